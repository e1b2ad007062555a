"""Per-sequence bookkeeping over a :class:`~servebook.paging.block_pool.BlockPool`: block tables.

The counterpart of vLLM V1's ``kv_cache_manager.py``: each sequence's block
table (logical block -> physical block), allocation for a prompt with the
prefix-cache lookup, appending decoded tokens, forking with copy-on-write, and
freeing.  Which blocks are free, shared or cached is the pool's business.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from ..checks import flag, whole
from ..units import ceil_div
from .block_pool import Block, BlockPool
from .errors import OutOfBlocks, check_new_id, not_allocated
from .hashing import TOKEN_LIMIT, block_hash, token_ids
from .usage import PagedUsage


class _Sequence:
    __slots__ = ("table", "hashes", "cached_tokens")

    def __init__(self, table: list[Block], hashes: list[bytes], cached_tokens: int) -> None:
        self.table = table              # logical block i -> physical block
        self.hashes = hashes            # chained hash of each full logical block
        self.cached_tokens = cached_tokens

    def num_tokens(self, block_size: int) -> int:
        # Every block but the last is full, so the length needs no counter of its own.
        return (len(self.table) - 1) * block_size + len(self.table[-1].tokens)


class PagedAllocator:
    """Block tables over a :class:`BlockPool`: allocate, append, fork, free, and prefix caching.

    ``allocate(seq_id, prompt)`` gives a sequence the blocks for its prompt,
    reusing cached full blocks when ``prefix_caching`` is on;
    ``append(seq_id, token)`` writes one decoded token, taking a new block only
    when the last one is full (or shared: copy-on-write); ``fork`` makes a
    child share every block of its parent; ``free`` returns a sequence's blocks.

    An operation that fails (bad input, or :class:`OutOfBlocks`) changes nothing.
    """

    __slots__ = ("pool", "block_size", "prefix_caching", "_seqs", "prefix_queried_tokens", "prefix_hit_tokens")

    def __init__(self, num_blocks: int, block_size: int = 16, *, prefix_caching: bool = False) -> None:
        self.pool = BlockPool(num_blocks, block_size)
        self.block_size = self.pool.block_size
        self.prefix_caching = flag("prefix_caching", prefix_caching)
        self._seqs: dict[Hashable, _Sequence] = {}
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    # -- views
    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    @property
    def sequences(self) -> list[Hashable]:
        return list(self._seqs)

    def _get(self, seq_id: Hashable) -> _Sequence:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise not_allocated(seq_id) from None

    def block_table(self, seq_id: Hashable) -> list[int]:
        """Physical block ids of ``seq_id``, in logical order."""
        return [b.block_id for b in self._get(seq_id).table]

    def tokens(self, seq_id: Hashable) -> list[int]:
        """The token ids ``seq_id`` reads back through its block table."""
        return [t for block in self._get(seq_id).table for t in block.tokens]

    def num_tokens(self, seq_id: Hashable) -> int:
        return self._get(seq_id).num_tokens(self.block_size)

    def cached_tokens(self, seq_id: Hashable) -> int:
        """Prompt tokens of ``seq_id`` served from the prefix cache at allocation (no prefill needed)."""
        return self._get(seq_id).cached_tokens

    @property
    def slots_total(self) -> int:
        return self.pool.num_blocks * self.block_size

    @property
    def slots_reserved(self) -> int:
        return self.pool.num_used * self.block_size

    @property
    def tokens_stored(self) -> int:
        return self.pool.tokens_in_use

    def usage(self) -> PagedUsage:
        """Blocks used, free and cached, tokens stored, tail waste and prefix hits, right now.

        O(number of sequences), for ``logical_tokens``; the counters the
        simulator reads every iteration (``slots_reserved``, ``tokens_stored``) are O(1).
        """
        pool = self.pool
        return PagedUsage(
            slots_total=self.slots_total, slots_reserved=self.slots_reserved, tokens_stored=pool.tokens_in_use,
            block_size=self.block_size, blocks_total=pool.num_blocks, blocks_used=pool.num_used,
            blocks_free=pool.num_free, blocks_cached=pool.num_cached,
            logical_tokens=sum(seq.num_tokens(self.block_size) for seq in self._seqs.values()),
            prefix_queried_tokens=self.prefix_queried_tokens, prefix_hit_tokens=self.prefix_hit_tokens,
        )

    # -- admission
    def _full_block_hashes(self, tokens: list[int]) -> list[bytes]:
        """The chained hash of each full block of ``tokens``, in order."""
        bs = self.block_size
        hashes: list[bytes] = []
        parent = None
        for i in range(len(tokens) // bs):
            parent = block_hash(parent, tokens[i * bs:(i + 1) * bs])
            hashes.append(parent)
        return hashes

    def _plan(self, tokens: list[int]) -> tuple[list[bytes], list[Block], int]:
        """Hashes of the prompt's full blocks, the cached blocks it can reuse, and new blocks needed."""
        bs = self.block_size
        n_blocks = ceil_div(len(tokens), bs)
        if n_blocks > self.pool.num_blocks:
            raise ValueError(
                f"a prompt of {len(tokens)} tokens needs {n_blocks} blocks of {bs}; "
                f"the pool has only {self.pool.num_blocks}"
            )
        if not self.prefix_caching:
            return [], [], n_blocks
        hashes = self._full_block_hashes(tokens)
        hits: list[Block] = []
        # At least the last block is always computed, even when the whole prompt is
        # cached: the next token's logits come from running the prompt's last token.
        for i in range((len(tokens) - 1) // bs):
            block = self.pool.lookup(hashes[i], tokens[i * bs:(i + 1) * bs])
            if block is None:
                break
            hits.append(block)
        return hashes, hits, n_blocks - len(hits)

    @staticmethod
    def _fits(pool: BlockPool, hits: list[Block], n_new: int, keep_free: int = 0) -> bool:
        # A hit on a cached free block revives it, so it cannot also be evicted for a new block.
        revived = sum(1 for b in hits if b.ref_count == 0)
        return n_new + keep_free <= pool.num_available - revived

    def can_allocate(self, tokens: Sequence[int], *, keep_free: int = 0) -> bool:
        """Whether a prompt of ``tokens`` could be allocated now, leaving ``keep_free`` blocks (no side effects).

        A scheduler keeps a few blocks free (a watermark) so that running
        sequences can still grow after the admission.  A prompt that could never
        fit (more blocks than the pool has) raises ``ValueError``, as ``allocate`` does.
        """
        keep_free = whole("keep_free", keep_free, 0)
        _, hits, n_new = self._plan(token_ids(tokens))
        return self._fits(self.pool, hits, n_new, keep_free)

    def allocate(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Give ``seq_id`` blocks for its prompt ``tokens``; return how many tokens came from the cache.

        Raises ``ValueError`` for an id already allocated or a prompt longer than the
        pool, :class:`OutOfBlocks` if the blocks are not free now; either way nothing changes.
        """
        check_new_id("seq_id", seq_id, self._seqs)
        tokens = token_ids(tokens)
        hashes, hits, n_new = self._plan(tokens)
        if not self._fits(self.pool, hits, n_new):
            raise OutOfBlocks(f"a prompt of {len(tokens)} tokens needs {n_new} new blocks; "
                              f"{self.pool.num_available} free or cached (some may be this prompt's own hits)")
        cached = len(hits) * self.block_size
        self._seqs[seq_id] = _Sequence(self._table(tokens, hashes, hits), hashes, cached)
        if self.prefix_caching:
            self.prefix_queried_tokens += len(tokens)
            self.prefix_hit_tokens += cached
        return cached

    def _table(self, tokens: list[int], hashes: list[bytes], hits: list[Block]) -> list[Block]:
        """The block table of a new prompt: its cache hits shared, then new blocks filled with the rest."""
        pool, bs = self.pool, self.block_size
        for block in hits:  # before taking new blocks, so an eviction cannot take a hit
            pool.share(block)
        table = list(hits)
        for i in range(len(hits), ceil_div(len(tokens), bs)):
            block = pool.take()
            block.tokens = tokens[i * bs:(i + 1) * bs]
            pool.tokens_in_use += len(block.tokens)
            if i < len(hashes):
                pool.register(block, hashes[i])
            table.append(block)
        return table

    # -- decoding
    def can_append(self, seq_id: Hashable) -> bool:
        """Whether one more token for ``seq_id`` fits now."""
        last = self._get(seq_id).table[-1]
        if len(last.tokens) < self.block_size and last.ref_count == 1:
            return True
        return self.pool.num_available >= 1

    def append(self, seq_id: Hashable, token: int) -> None:
        """Write one token after ``seq_id``'s last; a new block only if the last is full or shared."""
        try:  # _get, inlined: this is the operation a decode step runs once per sequence
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise not_allocated(seq_id) from None
        if type(token) is not int or not 0 <= token < TOKEN_LIMIT:
            token = token_ids([token], "token")[0]
        pool = self.pool
        last = seq.table[-1]
        slots = last.tokens
        if len(slots) == self.block_size:
            last = pool.take()  # may raise OutOfBlocks before anything changed
            seq.table.append(last)
            slots = last.tokens
        elif last.ref_count > 1:
            last = self._copy_on_write(seq)
            slots = last.tokens
        slots.append(token)
        pool.tokens_in_use += 1
        if self.prefix_caching and len(slots) == self.block_size:
            key = block_hash(seq.hashes[-1] if seq.hashes else None, slots)
            seq.hashes.append(key)
            pool.register(last, key)

    def _copy_on_write(self, seq: _Sequence) -> Block:
        """Give ``seq`` its own copy of its shared, partly filled last block, and return the copy.

        Writing into the shared block (a fork's) would change the other sequence's tokens.
        """
        pool = self.pool
        shared = seq.table[-1]
        copy = pool.take()  # may raise OutOfBlocks before anything changed
        copy.tokens = shared.tokens.copy()
        pool.tokens_in_use += len(copy.tokens)
        pool.release(shared)
        seq.table[-1] = copy
        return copy

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Make ``child_id`` a copy of ``parent_id`` that shares all its blocks (parallel sampling)."""
        parent = self._get(parent_id)
        check_new_id("child_id", child_id, self._seqs)
        for block in parent.table:
            self.pool.share(block)
        self._seqs[child_id] = _Sequence(list(parent.table), list(parent.hashes), 0)

    def free(self, seq_id: Hashable) -> None:
        """Return ``seq_id``'s blocks, last block first.

        Tail first, so that in the LRU order of cached blocks a sequence's tail
        (the part least likely to be shared) is evicted before its prefix.
        """
        seq = self._get(seq_id)
        del self._seqs[seq_id]
        for block in reversed(seq.table):
            self.pool.release(block)
