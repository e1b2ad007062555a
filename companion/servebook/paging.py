"""The paged KV cache: fixed-size blocks, block tables, sharing, and prefix caching.

A naive server reserves ``max_len`` token slots for every request, because it
cannot know how long the answer will be.  PagedAttention (Kwon et al., 2023)
stores the KV cache in fixed-size *blocks* instead, handed out one at a time as
a sequence grows, so at most the last block of a sequence is partly empty.

Two classes, as in vLLM V1 (``block_pool.py`` vs ``kv_cache_manager.py``):

- :class:`BlockPool` owns the physical blocks: which are free, which are in
  use and by how many sequences (reference counts), and which freed blocks
  still hold a reusable prefix (the prefix cache, evicted least recently used).
- :class:`PagedAllocator` keeps the per-sequence bookkeeping: each sequence's
  block table (logical block -> physical block), allocation for a prompt,
  appending decoded tokens, forking with copy-on-write, freeing, and the
  prefix-cache lookup for a new prompt.

:class:`NaiveAllocator` is the contiguous scheme it replaces: one region of
``max_len`` slots per request.  The closed-form helpers (:func:`blocks_needed`,
:func:`paged_waste`, :func:`naive_waste`) are the arithmetic of the book's
worked examples; the allocators must agree with them.

Every operation is O(1) in the number of blocks in the pool (amortised; an
operation on a sequence also touches that sequence's own blocks): free blocks
sit on a stack, freed-but-cached blocks in an insertion-ordered dict, so no
operation scans the pool or removes from the middle of a list.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral

from .checks import whole

__all__ = [
    "Block", "BlockPool", "PagedAllocator", "NaiveAllocator", "OutOfBlocks",
    "KVUsage", "PagedUsage", "blocks_needed", "paged_slots", "paged_waste", "naive_waste", "block_hash",
]


class OutOfBlocks(RuntimeError):
    """Not enough free KV-cache memory right now; nothing was changed.

    Unlike a ``ValueError`` (a request that can never fit), this is transient:
    the request fits once other sequences finish or are preempted.
    """


# ---------------------------------------------------------------------------
# Closed forms: the arithmetic of the worked examples.

def blocks_needed(n_tokens: int, block_size: int) -> int:
    """Blocks that hold ``n_tokens`` tokens: ceil(n / block_size).

    A ceiling, because the token that spills past a full block needs a whole new block.
    """
    n_tokens = whole("n_tokens", n_tokens, 0)
    block_size = whole("block_size", block_size, 1)
    return -(-n_tokens // block_size)


def paged_slots(n_tokens: int, block_size: int) -> int:
    """Token slots reserved by paging: whole blocks, ceil(n / block_size) * block_size."""
    return blocks_needed(n_tokens, block_size) * block_size


def paged_waste(n_tokens: int, block_size: int) -> int:
    """Empty slots in the last block of an ``n_tokens`` sequence: at most ``block_size - 1``."""
    return paged_slots(n_tokens, block_size) - n_tokens


def naive_waste(n_tokens: int, max_len: int) -> int:
    """Slots a contiguous ``max_len`` reservation leaves empty: ``max_len - n_tokens``."""
    n_tokens = whole("n_tokens", n_tokens, 0)
    max_len = whole("max_len", max_len, 1)
    if n_tokens > max_len:
        raise ValueError(f"n_tokens ({n_tokens}) exceeds max_len ({max_len}): the request does not fit its reservation")
    return max_len - n_tokens


def block_hash(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """SHA-256 of a full block's tokens, chained with the hash of the blocks before it.

    Chaining makes the hash name the whole prefix, not just this block: the same
    16 tokens after a different prefix have different keys and values, so they
    must not match.  A cryptographic hash, because a collision would silently
    hand one request another's KV cache; vLLM moved from Python's ``hash()`` to
    SHA-256 for that reason.
    """
    digest = hashlib.sha256(parent or b"")
    digest.update(array("q", tokens).tobytes())
    return digest.digest()


_TOKEN_LIMIT = 2**63  # token ids are hashed as signed 64-bit integers


def _token_ids(tokens: Iterable[int], name: str = "tokens") -> list[int]:
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of token ids (ints), got {type(tokens).__name__}")
    try:
        ids = list(tokens)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of token ids (ints), got {tokens!r}") from None
    if not ids:
        raise ValueError(f"{name} must hold at least one token")
    if set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) < _TOKEN_LIMIT:
        return ids  # the common case, checked at C speed
    for i, t in enumerate(ids):
        if type(t) is not int:
            if isinstance(t, bool) or not isinstance(t, Integral):
                raise TypeError(f"{name}[{i}] must be an int token id, got {t!r}")
            ids[i] = t = int(t)
        if not 0 <= t < _TOKEN_LIMIT:
            raise ValueError(f"{name}[{i}] must be a token id in [0, 2**63), got {t}")
    return ids


# ---------------------------------------------------------------------------
# Metrics

@dataclass(frozen=True)
class KVUsage:
    """A snapshot of a KV cache, in token slots (multiply by KV bytes per token for bytes)."""

    slots_total: int      # the whole pool
    slots_reserved: int   # held by sequences (whole blocks, or whole max_len regions)
    tokens_stored: int    # slots that hold a token's keys and values

    @property
    def reserved_unused(self) -> int:
        """Reserved slots holding no token: tail waste (paged) or the unused reservation (naive)."""
        return self.slots_reserved - self.tokens_stored

    @property
    def utilisation(self) -> float:
        """Share of the reserved slots that hold tokens (1.0 when nothing is reserved)."""
        return self.tokens_stored / self.slots_reserved if self.slots_reserved else 1.0

    @property
    def pool_utilisation(self) -> float:
        """Share of the whole pool that holds tokens."""
        return self.tokens_stored / self.slots_total


@dataclass(frozen=True)
class PagedUsage(KVUsage):
    """:class:`KVUsage` plus the block counts and prefix-cache counters of a paged cache."""

    block_size: int = 16
    blocks_total: int = 0
    blocks_used: int = 0      # reference count > 0
    blocks_free: int = 0      # hold nothing reusable
    blocks_cached: int = 0    # free, but still hold a hashed full block a new prompt can reuse
    logical_tokens: int = 0   # sum of sequence lengths; > tokens_stored when blocks are shared
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0

    @property
    def tail_waste(self) -> int:
        """Empty slots in used blocks: only last blocks can have any, so at most ``block_size - 1`` per block table."""
        return self.reserved_unused

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache over prompt tokens looked up."""
        return self.prefix_hit_tokens / self.prefix_queried_tokens if self.prefix_queried_tokens else 0.0


# ---------------------------------------------------------------------------
# The physical pool

class Block:
    """One physical block: its id, how many sequences use it, and its content.

    ``tokens`` stands in for the keys and values the block would hold on a GPU:
    the token ids written into its slots.  ``block_hash`` is set only while the
    block is full and registered in the prefix cache.
    """

    __slots__ = ("block_id", "ref_count", "block_hash", "tokens")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: bytes | None = None
        self.tokens: list[int] = []

    def __repr__(self) -> str:
        cached = ", cached" if self.block_hash is not None else ""
        return f"Block({self.block_id}, ref={self.ref_count}, tokens={len(self.tokens)}{cached})"


class BlockPool:
    """Fixed-size physical blocks with reference counts, a free list and an LRU prefix cache.

    Every block is in exactly one state:

    - *used*: ``ref_count > 0``, held by that many block tables;
    - *free*: ``ref_count == 0`` and no hash: empty, on a stack;
    - *cached*: ``ref_count == 0`` with a hash: a freed full block kept for
      prefix reuse, in an insertion-ordered dict, least recently freed first.

    A new block comes from the free stack; only when it is empty is the least
    recently used cached block evicted.  (vLLM V1 keeps one queue for both and
    takes its head, so it can evict a reusable block while empty ones wait
    further back; spending an empty block first loses nothing.)
    """

    __slots__ = ("num_blocks", "block_size", "blocks", "_free", "_cached_free", "_by_hash", "tokens_in_use")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = whole("num_blocks", num_blocks, 1)
        self.block_size = whole("block_size", block_size, 1)
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        self._free: list[Block] = self.blocks[::-1]           # pop() hands out block 0 first
        self._cached_free: OrderedDict[int, Block] = OrderedDict()  # block_id -> block, LRU first
        self._by_hash: dict[bytes, Block] = {}                  # every block that has a hash, used or not
        self.tokens_in_use = 0  # token slots filled in used blocks

    # -- counts
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached_free)

    @property
    def num_available(self) -> int:
        """Blocks a new allocation may take: free ones, then cached ones by eviction."""
        return len(self._free) + len(self._cached_free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free) - len(self._cached_free)

    def free_block_ids(self) -> list[int]:
        """Ids of the empty free blocks, in the order they will be handed out."""
        return [b.block_id for b in reversed(self._free)]

    def cached_block_ids(self) -> list[int]:
        """Ids of the freed-but-cached blocks, least recently used (next evicted) first."""
        return list(self._cached_free)

    # -- state changes
    def take(self) -> Block:
        """A block for one more writer (``ref_count`` 1): a free one, else evict the LRU cached one."""
        if self._free:
            block = self._free.pop()
        elif self._cached_free:
            _, block = self._cached_free.popitem(last=False)
            del self._by_hash[block.block_hash]
            block.block_hash = None
            block.tokens = []
        else:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block.ref_count = 1
        return block

    def share(self, block: Block) -> None:
        """One more block table holds ``block``; a cached free block comes back to life."""
        if block.ref_count == 0:
            del self._cached_free[block.block_id]
            self.tokens_in_use += len(block.tokens)
        block.ref_count += 1

    def release(self, block: Block) -> None:
        """One block table lets go of ``block``; at zero it is cached (if hashed) or emptied."""
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} is not in use (ref_count {block.ref_count})")
        block.ref_count -= 1
        if block.ref_count == 0:
            self.tokens_in_use -= len(block.tokens)
            if block.block_hash is not None:
                self._cached_free[block.block_id] = block  # most recently used: evicted last
            else:
                block.tokens = []
                self._free.append(block)

    def lookup(self, key: bytes, tokens: Sequence[int]) -> Block | None:
        """The block cached under ``key`` if its stored tokens are ``tokens``, else ``None``."""
        block = self._by_hash.get(key)
        if block is None or block.tokens != tokens:
            return None
        return block

    def register(self, block: Block, key: bytes) -> bool:
        """Put a full block in the prefix cache under ``key``; ``False`` if an equal block is there.

        A duplicate stays unregistered rather than replacing the other block in a
        sequence's table: block tables only ever grow at the end, as in vLLM V1.
        """
        if key in self._by_hash or block.block_hash is not None:
            return False
        block.block_hash = key
        self._by_hash[key] = block
        return True


# ---------------------------------------------------------------------------
# Per-sequence bookkeeping

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
        self.prefix_caching = bool(prefix_caching)
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
            raise ValueError(f"seq_id {seq_id!r} is not allocated (unknown, or already freed)") from None

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
    def _plan(self, tokens: list[int]) -> tuple[list[bytes], list[Block], int]:
        """Hashes of the prompt's full blocks, the cached blocks it can reuse, and new blocks needed."""
        bs = self.block_size
        n_blocks = -(-len(tokens) // bs)
        if n_blocks > self.pool.num_blocks:
            raise ValueError(
                f"a prompt of {len(tokens)} tokens needs {n_blocks} blocks of {bs}; "
                f"the pool has only {self.pool.num_blocks}"
            )
        hashes: list[bytes] = []
        hits: list[Block] = []
        if self.prefix_caching:
            parent = None
            for i in range(len(tokens) // bs):
                parent = block_hash(parent, tokens[i * bs:(i + 1) * bs])
                hashes.append(parent)
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
        _, hits, n_new = self._plan(_token_ids(tokens))
        return self._fits(self.pool, hits, n_new, keep_free)

    def allocate(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Give ``seq_id`` blocks for its prompt ``tokens``; return how many tokens came from the cache.

        Raises ``ValueError`` for an id already allocated or a prompt longer than the
        pool, :class:`OutOfBlocks` if the blocks are not free now; either way nothing changes.
        """
        if not isinstance(seq_id, Hashable):
            raise TypeError(f"seq_id must be hashable, got {type(seq_id).__name__}")
        if seq_id in self._seqs:
            raise ValueError(f"seq_id {seq_id!r} is already allocated")
        tokens = _token_ids(tokens)
        hashes, hits, n_new = self._plan(tokens)
        pool = self.pool
        if not self._fits(pool, hits, n_new):
            raise OutOfBlocks(f"a prompt of {len(tokens)} tokens needs {n_new} new blocks; "
                              f"{pool.num_available} free or cached (some may be this prompt's own hits)")
        for block in hits:  # before taking new blocks, so an eviction cannot take a hit
            pool.share(block)
        table = list(hits)
        bs = self.block_size
        for i in range(len(hits), len(hits) + n_new):
            block = pool.take()
            block.tokens = tokens[i * bs:(i + 1) * bs]
            pool.tokens_in_use += len(block.tokens)
            if i < len(hashes):
                pool.register(block, hashes[i])
            table.append(block)
        cached = len(hits) * bs
        self._seqs[seq_id] = _Sequence(table, hashes, cached)
        if self.prefix_caching:
            self.prefix_queried_tokens += len(tokens)
            self.prefix_hit_tokens += cached
        return cached

    def can_append(self, seq_id: Hashable) -> bool:
        """Whether one more token for ``seq_id`` fits now."""
        last = self._get(seq_id).table[-1]
        if len(last.tokens) < self.block_size and last.ref_count == 1:
            return True
        return self.pool.num_available >= 1

    def append(self, seq_id: Hashable, token: int) -> None:
        """Write one token after ``seq_id``'s last; a new block only if the last is full or shared."""
        try:
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"seq_id {seq_id!r} is not allocated (unknown, or already freed)") from None
        if type(token) is not int or not 0 <= token < _TOKEN_LIMIT:
            token = _token_ids([token], "token")[0]
        pool = self.pool
        last = seq.table[-1]
        slots = last.tokens
        if len(slots) == self.block_size:
            last = pool.take()  # may raise OutOfBlocks before anything changed
            seq.table.append(last)
            slots = last.tokens
        elif last.ref_count > 1:
            # Copy-on-write: the partly filled last block is shared (a fork); writing
            # into it would change the other sequence's tokens, so write into a copy.
            copy = pool.take()
            copy.tokens = slots = slots.copy()
            pool.tokens_in_use += len(slots)
            pool.release(last)
            seq.table[-1] = last = copy
        slots.append(token)
        pool.tokens_in_use += 1
        if self.prefix_caching and len(slots) == self.block_size:
            key = block_hash(seq.hashes[-1] if seq.hashes else None, slots)
            seq.hashes.append(key)
            pool.register(last, key)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Make ``child_id`` a copy of ``parent_id`` that shares all its blocks (parallel sampling)."""
        parent = self._get(parent_id)
        if not isinstance(child_id, Hashable):
            raise TypeError(f"child_id must be hashable, got {type(child_id).__name__}")
        if child_id in self._seqs:
            raise ValueError(f"child_id {child_id!r} is already allocated")
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


# ---------------------------------------------------------------------------
# The scheme paging replaces

class NaiveAllocator:
    """Contiguous allocation: every request reserves one region of ``max_len`` slots.

    The pool of ``num_slots`` slots is cut into ``num_slots // max_len`` regions;
    the remainder can never be used (external fragmentation).  A request's
    region is reserved whole at admission, however short the request turns out.
    """

    def __init__(self, num_slots: int, max_len: int) -> None:
        self.num_slots = whole("num_slots", num_slots, 1)
        self.max_len = whole("max_len", max_len, 1)
        self.num_regions = self.num_slots // self.max_len
        if self.num_regions == 0:
            raise ValueError(f"num_slots ({num_slots}) is smaller than one max_len region ({max_len})")
        self._free_regions = list(range(self.num_regions - 1, -1, -1))
        self._seqs: dict[Hashable, list[int]] = {}  # seq_id -> [region, num_tokens]
        self._tokens = 0

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def _get(self, seq_id: Hashable) -> list[int]:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"seq_id {seq_id!r} is not allocated (unknown, or already freed)") from None

    def region(self, seq_id: Hashable) -> tuple[int, int]:
        """The slot range ``[start, stop)`` reserved for ``seq_id``."""
        region = self._get(seq_id)[0]
        return region * self.max_len, (region + 1) * self.max_len

    def num_tokens(self, seq_id: Hashable) -> int:
        return self._get(seq_id)[1]

    @property
    def slots_total(self) -> int:
        return self.num_slots

    @property
    def slots_reserved(self) -> int:
        return len(self._seqs) * self.max_len

    @property
    def tokens_stored(self) -> int:
        return self._tokens

    @property
    def unusable_slots(self) -> int:
        """Slots past the last whole region: never reservable."""
        return self.num_slots - self.num_regions * self.max_len

    def usage(self) -> KVUsage:
        return KVUsage(slots_total=self.num_slots, slots_reserved=self.slots_reserved, tokens_stored=self._tokens)

    def _check_prompt(self, tokens: Sequence[int]) -> int:
        n = len(_token_ids(tokens))
        if n > self.max_len:
            raise ValueError(f"a prompt of {n} tokens is longer than max_len ({self.max_len})")
        return n

    def can_allocate(self, tokens: Sequence[int]) -> bool:
        self._check_prompt(tokens)
        return bool(self._free_regions)

    def allocate(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Reserve a whole ``max_len`` region for ``seq_id``; return 0 (no prefix caching)."""
        if not isinstance(seq_id, Hashable):
            raise TypeError(f"seq_id must be hashable, got {type(seq_id).__name__}")
        if seq_id in self._seqs:
            raise ValueError(f"seq_id {seq_id!r} is already allocated")
        n = self._check_prompt(tokens)
        if not self._free_regions:
            raise OutOfBlocks(f"all {self.num_regions} regions of {self.max_len} slots are reserved")
        self._seqs[seq_id] = [self._free_regions.pop(), n]
        self._tokens += n
        return 0

    def can_append(self, seq_id: Hashable) -> bool:
        return self._get(seq_id)[1] < self.max_len

    def append(self, seq_id: Hashable, token: int) -> None:
        entry = self._get(seq_id)
        if type(token) is not int or not 0 <= token < _TOKEN_LIMIT:
            _token_ids([token], "token")
        if entry[1] >= self.max_len:
            raise ValueError(f"seq_id {seq_id!r} already holds max_len = {self.max_len} tokens")
        entry[1] += 1
        self._tokens += 1

    def free(self, seq_id: Hashable) -> None:
        region, n = self._get(seq_id)
        del self._seqs[seq_id]
        self._free_regions.append(region)
        self._tokens -= n
