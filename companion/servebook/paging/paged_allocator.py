"""Per-sequence bookkeeping over a :class:`~servebook.paging.block_pool.BlockPool`: block tables.

The counterpart of vLLM 0.33.0's V1 ``KVCacheManager``
(``vllm/v1/core/kv_cache_manager.py``): each sequence's block table (logical
block -> physical block), allocation for a prompt with the prefix-cache lookup
(``get_computed_blocks``), writing the tokens a step computes, a chunk of a
prompt or one decoded token (``allocate_slots``), forking with copy-on-write,
and freeing, tail first (``free``).  Which blocks are free, shared or cached is
the pool's business.

A full block enters the prefix cache when the step that computes it is
scheduled, that is when its tokens are written here: so a later sequence in
the same step may hit it (it is computed in the same forward pass), and a
block nobody has scheduled is never served from the cache.  (vLLM computes a
request's block hashes as its tokens become known, ``Request.update_block_hashes``,
and caches the blocks under them in ``allocate_slots``; the hash of a block is
a function of its tokens alone, so computing it at either moment gives the same key.)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from ..checks import flag, whole
from ..units import ceil_div
from .block_pool import Block, BlockPool
from .errors import OutOfBlocks, check_new_id, not_allocated
from .hashing import TOKEN_LIMIT, block_hash, extend_hashes, token_ids
from .usage import PagedUsage


class _Sequence:
    __slots__ = ("table", "hashes", "cached_tokens", "length")

    def __init__(self, table: list[Block], hashes: list[bytes], cached_tokens: int) -> None:
        self.table = table              # logical block i -> physical block
        self.hashes = hashes            # chained hash of each full logical block (at least the registered ones)
        self.cached_tokens = cached_tokens
        self.length = 0                 # tokens written

    def num_tokens(self, block_size: int) -> int:
        return self.length


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
    def prefix_hashes(self, tokens: Sequence[int], hashes: list[bytes] | None = None) -> list[bytes]:
        """The chained hash of each full block of ``tokens``; ``hashes``, if given, is extended in place.

        A scheduler keeps one such list per request (as vLLM keeps
        ``Request.block_hashes``), so a block's hash is computed once however
        often the request is looked up, preempted and readmitted.
        """
        return extend_hashes([] if hashes is None else hashes, tokens, self.block_size)

    def _hits(self, tokens: list[int], hashes: list[bytes]) -> list[Block]:
        """The cached blocks a new prompt can reuse: its longest prefix of full blocks in the cache.

        By hash alone, as vLLM V1.  At least the last token is always computed,
        even when the whole prompt is cached: the next token's logits come from it.
        """
        lookup = self.pool._by_hash.get  # the hashes are the allocator's own: BlockPool._lookup, unchecked
        hits: list[Block] = []
        for i in range((len(tokens) - 1) // self.block_size):
            block = lookup(hashes[i])
            if block is None:
                break
            hits.append(block)
        return hits

    def cached_prefix(self, tokens: Sequence[int], hashes: list[bytes] | None = None) -> int:
        """Tokens of ``tokens`` that a new sequence would take from the prefix cache now (no side effects)."""
        if not self.prefix_caching:
            return 0
        return len(self._prompt_hits(token_ids(tokens), hashes)[1]) * self.block_size

    @staticmethod
    def _fits(pool: BlockPool, hits: list[Block], n_new: int, keep_free: int = 0) -> bool:
        # A hit on a cached free block revives it, so it cannot also be evicted for a new block.
        revived = sum(1 for b in hits if b.ref_count == 0) if hits else 0
        return n_new + keep_free <= pool.num_available - revived

    def _check_fits_pool(self, n_tokens: int) -> None:
        n_blocks = ceil_div(n_tokens, self.block_size)
        if n_blocks > self.pool.num_blocks:
            raise ValueError(f"a prompt of {n_tokens} tokens needs {n_blocks} blocks of {self.block_size}; "
                             f"the pool has only {self.pool.num_blocks}")

    def can_allocate(self, tokens: Sequence[int], *, keep_free: int = 0) -> bool:
        """Whether a prompt of ``tokens`` could be allocated now, leaving ``keep_free`` blocks (no side effects).

        A prompt that could never fit (more blocks than the pool has) raises
        ``ValueError``, as ``allocate`` does.  A scheduler need not ask first:
        ``allocate(..., reserve=...)`` checks the same and changes nothing when it refuses.
        """
        keep_free = whole("keep_free", keep_free, 0)
        tokens = token_ids(tokens)
        self._check_fits_pool(len(tokens))
        return self._would_fit(tokens, None, keep_free)[0]

    def allocate(self, seq_id: Hashable, tokens: Sequence[int], *, num_new: int | None = None,
                 max_new: int | None = None, reserve: int = 0, hashes: list[bytes] | None = None) -> int:
        """Give ``seq_id`` blocks for its prompt ``tokens``; return how many tokens came from the cache.

        The cached prefix is shared; after it, ``num_new`` tokens (default: all
        the rest, or at most ``max_new``: a step's token budget, so that a
        scheduler need not look the prefix up first) are written, as the step
        that computes them is scheduled, and
        their full blocks are hashed then (vLLM V1's ``allocate_slots``).  A
        chunked prefill writes the rest later with :meth:`extend`.  The whole
        prompt must fit with ``reserve`` blocks to spare (vLLM 0.33.0 admits a
        request only if its full sequence fits, ``scheduler_reserve_full_isl``,
        and keeps its watermark for the running ones).  ``hashes``: the
        prompt's block hashes so far, extended in place (:meth:`prefix_hashes`).

        Raises ``ValueError`` for an id already allocated, a prompt longer than
        the pool, or ``num_new`` out of range; :class:`OutOfBlocks` if the
        blocks are not free now; either way nothing changes.
        """
        check_new_id("seq_id", seq_id, self._seqs)
        tokens = token_ids(tokens)
        self._check_fits_pool(len(tokens))
        return self._allocate(seq_id, tokens, num_new=num_new, max_new=max_new, reserve=whole("reserve", reserve, 0),
                              hashes=hashes)

    def _prompt_hits(self, tokens: Sequence[int], hashes: list[bytes] | None) -> tuple[list[bytes], list[Block]]:
        """The prompt's block hashes (``hashes`` extended in place) and its hits; nothing without prefix caching."""
        if not self.prefix_caching:
            return [], []
        hashes = self.prefix_hashes(tokens, hashes)
        return hashes, self._hits(tokens, hashes)

    def _would_fit(self, tokens: Sequence[int], hashes: list[bytes] | None, reserve: int) -> tuple[bool, int]:
        """Whether :meth:`_allocate` would take the prompt ``tokens`` now, and the tokens it would find cached.

        No side effect but the one ``_allocate`` has too: ``hashes`` extended.
        For the simulator, which asks whether the head of its queue could be
        admitted in a step it runs without the scheduling phases.
        """
        _, hits = self._prompt_hits(tokens, hashes)
        fits = self._fits(self.pool, hits, ceil_div(len(tokens), self.block_size) - len(hits), reserve)
        return fits, len(hits) * self.block_size

    def _allocate(self, seq_id: Hashable, tokens: list[int], *, num_new: int | None = None,
                  max_new: int | None = None, reserve: int = 0, hashes: list[bytes] | None = None) -> int:
        """:meth:`allocate` for a new ``seq_id`` whose ``tokens`` are known to be token ids that fit the pool.

        For the simulator, whose streams are its own and whose requests were checked against the pool
        once: validating every prompt again at every admission attempt would cost more than the lookup.
        """
        hashes, hits = self._prompt_hits(tokens, hashes)
        cached = len(hits) * self.block_size
        n_new = len(tokens) - cached if num_new is None else whole("num_new", num_new, 1, len(tokens) - cached)
        if max_new is not None:
            n_new = min(n_new, whole("max_new", max_new, 1))
        if not self._fits(self.pool, hits, ceil_div(len(tokens), self.block_size) - len(hits), reserve):
            raise OutOfBlocks(f"a prompt of {len(tokens)} tokens does not fit with {reserve} blocks to spare; "
                              f"{self.pool.num_available} free or cached (some may be this prompt's own hits)")
        pool = self.pool
        for block in hits:  # before taking new blocks, so an eviction cannot take a hit
            pool._share(block)
        seq = self._seqs[seq_id] = _Sequence(list(hits), hashes, cached)
        seq.length = cached
        self._write(seq, tokens, cached, cached + n_new)
        if self.prefix_caching:
            self.prefix_queried_tokens += len(tokens)
            self.prefix_hit_tokens += cached
        return cached

    def _write(self, seq: _Sequence, tokens: Sequence[int], start: int, stop: int) -> None:
        """Write ``tokens[start:stop]`` after the sequence's first ``start``, taking blocks as they fill;
        with prefix caching, every block that fills is hashed and registered.

        The caller has checked that the new blocks are available.
        """
        pool, bs, table = self.pool, self.block_size, seq.table
        need = ceil_div(stop, bs) - len(table)   # blocks _grow has not taken ahead
        if need > 0:
            table += pool._take_many(need)
        written = tokens[start:stop]   # sliced once (a view's slice is a Python call; a list's or range's is not)
        first = i = start // bs
        at = 0                         # where block i's part starts in written
        if start % bs:                 # the partly filled block, continued
            at = min(bs - start % bs, stop - start)
            table[i].tokens = [*table[i].tokens, *written[:at]]
            i += 1
        for block in table[i:ceil_div(stop, bs)]:   # a list of its own, or a range of consecutive ids
            block.tokens = written[at:at + bs]
            at += bs
        pool.tokens_in_use += stop - start
        seq.length = stop
        full = stop // bs
        if self.prefix_caching and first < full:
            hashes = seq.hashes
            if len(hashes) < full:
                if len(hashes) == first and start % bs:   # the continued block: hashed from what it holds
                    hashes.append(block_hash(hashes[-1] if hashes else None, table[first].tokens))
                extend_hashes(hashes, tokens, bs, stop)   # the blocks written whole, from the stream at once
            register = pool._register
            for i in range(first, full):
                register(table[i], hashes[i])

    def _write_through(self, seq_id: Hashable, tokens: Sequence[int], stop: int) -> None:
        """:meth:`extend` up to ``stop`` tokens without its checks of the arguments: for the simulator,
        which writes streams of its own making.  :class:`OutOfBlocks` changes nothing."""
        seq = self._seqs[seq_id]
        if stop > len(seq.table) * self.block_size:
            need = ceil_div(stop, self.block_size) - len(seq.table)
            if need > self.pool.num_available:
                raise OutOfBlocks(f"{need} new blocks needed, {self.pool.num_available} free or cached")
        self._write(seq, tokens, seq.length, stop)

    def _grow(self, seq_id: Hashable) -> None:
        """Take the block the next token of ``seq_id`` starts, ahead of writing the token; unchecked.

        For the simulator, whose decodes take their blocks in the step they run
        and write their tokens later.  :class:`OutOfBlocks` changes nothing.
        """
        self._seqs[seq_id].table.append(self.pool.take())

    def _register_block(self, seq: _Sequence, i: int) -> None:
        """Hash the sequence's ``i``-th block, now full, and put it in the prefix cache."""
        if len(seq.hashes) <= i:
            seq.hashes.append(block_hash(seq.hashes[-1] if seq.hashes else None, seq.table[i].tokens))
        self.pool._register(seq.table[i], seq.hashes[i])

    def extend(self, seq_id: Hashable, tokens: Sequence[int], num_new: int) -> None:
        """Write the next ``num_new`` of ``tokens`` (the sequence's whole stream so far) into ``seq_id``.

        The continuation of a chunked prefill, or a decode step (``num_new`` 1);
        blocks that fill are hashed, as when their step is scheduled.  Raises
        :class:`OutOfBlocks` (changing nothing) if the new blocks are not free.
        """
        seq = self._get(seq_id)
        start = seq.length
        num_new = whole("num_new", num_new, 1, len(tokens) - start)
        last = seq.table[-1] if seq.table else None
        if last is not None and last.ref_count > 1 and start % self.block_size:
            raise ValueError(f"seq_id {seq_id!r} shares its last block: append() copies it first")
        token_ids(tokens[start:start + num_new])
        self._write_through(seq_id, tokens, start + num_new)

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
        elif type(slots) is not list:   # a range written at once: a list from now on
            slots = last.tokens = list(slots)
        slots.append(token)
        pool.tokens_in_use += 1
        seq.length += 1
        if self.prefix_caching and len(slots) == self.block_size:
            self._register_block(seq, len(seq.table) - 1)

    def _copy_on_write(self, seq: _Sequence) -> Block:
        """Give ``seq`` its own copy of its shared, partly filled last block, and return the copy.

        Writing into the shared block (a fork's) would change the other sequence's tokens.
        """
        pool = self.pool
        shared = seq.table[-1]
        copy = pool.take()  # may raise OutOfBlocks before anything changed
        copy.tokens = list(shared.tokens)
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
        child = self._seqs[child_id] = _Sequence(list(parent.table), list(parent.hashes), 0)
        child.length = parent.length

    def free(self, seq_id: Hashable) -> None:
        """Return ``seq_id``'s blocks, last block first.

        Tail first, so that in the LRU order of cached blocks a sequence's tail
        (the part least likely to be shared) is evicted before its prefix.
        """
        seq = self._get(seq_id)
        del self._seqs[seq_id]
        self.pool._release_all(reversed(seq.table))
