"""The physical pool of KV blocks: free, used (reference counted) or cached for prefix reuse.

The semantics of vLLM 0.33.0's V1 ``BlockPool`` (``vllm/v1/core/block_pool.py``),
restated.  Like it, the pool knows nothing of sequences: which block a
sequence's i-th logical block is lives in the block tables of
:mod:`servebook.paging.paged_allocator`.

- A full block is registered under its hash when the step that computes it
  is scheduled (``BlockPool.cache_full_blocks``), and keeps it until it is
  evicted.  Two blocks with the same content both keep their hash:
  duplicates stay reachable, since block tables only grow at the end and a
  block id in a table never changes (``BlockHashToBlockMap``).
- A prefix-cache lookup is by hash alone (``BlockPool.get_cached_block``):
  SHA-256 makes a collision practically impossible, so vLLM does not compare
  tokens.  (nano-vllm compares the stored tokens too.)
- Freed blocks go back in V1's eviction order (``BlockPool.free_blocks``): a
  block without a hash can never be hit, so it is reused first, the most
  recently freed first; a hashed block is kept behind every empty one, least
  recently freed first.  A new block is therefore taken from the empty ones
  while any is left, and only then is the least recently freed cached block
  evicted.

Every operation is O(1) in the number of blocks: empty blocks sit on a stack,
cached ones in an insertion-ordered dict, so nothing scans the pool or removes
from the middle of a list.
"""

from __future__ import annotations

from collections import OrderedDict

from ..checks import whole
from .errors import OutOfBlocks


class Block:
    """One physical block: its id, how many sequences use it, and its content.

    ``tokens`` stands in for the keys and values the block would hold on a GPU:
    the token ids written into its slots, a list (or a ``range``, when the ids
    written at once were consecutive, as a simulated request's own are).
    ``block_hash`` is set only while the block is full and registered in the prefix cache.
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
    """Fixed-size physical blocks with reference counts, a free queue and a prefix cache.

    Every block is in exactly one state:

    - *used*: ``ref_count > 0``, held by that many block tables;
    - *empty*: ``ref_count == 0`` and no hash, on a stack (most recently freed on top);
    - *cached*: ``ref_count == 0`` with a hash: a freed full block kept for
      prefix reuse, in an insertion-ordered dict, least recently freed first.

    ``num_available`` (empty plus cached) is what vLLM calls the free blocks.
    """

    __slots__ = ("num_blocks", "block_size", "blocks", "_free", "_cached_free", "_by_hash", "_later", "tokens_in_use")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = whole("num_blocks", num_blocks, 1)
        self.block_size = whole("block_size", block_size, 1)
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        self._free: list[Block] = self.blocks[::-1]           # pop() hands out block 0 first
        self._cached_free: OrderedDict[int, Block] = OrderedDict()  # block_id -> block, LRU first
        # Every block that has a hash, used or not: the first registered under it, and (rarely) the others
        # with the same content, in the order they were registered.
        self._by_hash: dict[bytes, Block] = {}
        self._later: dict[bytes, list[Block]] = {}
        self.tokens_in_use = 0  # token slots filled in used blocks

    # -- counts
    @property
    def num_free(self) -> int:
        """Empty free blocks (no hash)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        """Free blocks that still hold a hashed full block."""
        return len(self._cached_free)

    @property
    def num_available(self) -> int:
        """Blocks a new allocation may take: empty ones, then cached ones by eviction."""
        return len(self._free) + len(self._cached_free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free) - len(self._cached_free)

    @property
    def num_hashes(self) -> int:
        """Distinct hashes in the prefix cache (a hash shared by duplicate blocks counts once)."""
        return len(self._by_hash)

    def free_block_ids(self) -> list[int]:
        """Ids of the empty free blocks, in the order they will be handed out."""
        return [b.block_id for b in reversed(self._free)]

    def cached_block_ids(self) -> list[int]:
        """Ids of the freed-but-cached blocks, least recently freed (next evicted) first."""
        return list(self._cached_free)

    def blocks_with_hash(self, key: bytes) -> list[int]:
        """Ids of every block, used or cached, registered under ``key``."""
        key = _key(key)
        first = self._by_hash.get(key)
        return [] if first is None else [first.block_id] + [b.block_id for b in self._later.get(key, ())]

    # -- checks
    def _own(self, block: Block) -> Block:
        if not isinstance(block, Block):
            raise TypeError(f"block must be a Block, got {type(block).__name__}")
        if not 0 <= block.block_id < self.num_blocks or self.blocks[block.block_id] is not block:
            raise ValueError(f"block {block.block_id} does not belong to this pool")
        return block

    # -- state changes
    def take(self) -> Block:
        """A block for one more writer (``ref_count`` 1): an empty one, else evict the LRU cached one."""
        if self._free:
            block = self._free.pop()
        elif self._cached_free:
            _, block = self._cached_free.popitem(last=False)
            self._forget(block)
            block.tokens = []
        else:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block.ref_count = 1
        return block

    def _take_many(self, n: int) -> list[Block]:
        """``n`` blocks in the order ``n`` calls of :meth:`take` hand them out; unchecked: for the allocator,
        which has checked that ``n`` are available.  Empty ones are cut off the stack in one slice."""
        free = self._free
        if not 0 < n <= len(free):
            return [self.take() for _ in range(n)]
        blocks = free[-n:]
        del free[-n:]
        blocks.reverse()   # take() pops the top first
        for block in blocks:
            block.ref_count = 1
        return blocks

    def _forget(self, block: Block) -> None:
        """Take ``block`` out of the prefix cache (its hash may still name duplicates: the next one is found)."""
        key = block.block_hash
        block.block_hash = None
        later = self._later.get(key)
        if later is None:
            del self._by_hash[key]
            return
        if self._by_hash[key] is block:
            self._by_hash[key] = later.pop(0)
        else:
            later.remove(block)
        if not later:
            del self._later[key]

    def share(self, block: Block) -> None:
        """One more block table holds ``block``: a used block, or a cached one, which comes back to life.

        An empty free block holds nothing to share: ``ValueError``.
        """
        self._own(block)
        if block.ref_count == 0 and block.block_id not in self._cached_free:
            raise ValueError(f"block {block.block_id} is free and holds nothing reusable; "
                             "take() a block to write into")
        self._share(block)

    def _share(self, block: Block) -> None:
        # Unchecked: for the allocator, which shares only used blocks and the cached ones its lookups found.
        if block.ref_count == 0:
            del self._cached_free[block.block_id]
            self.tokens_in_use += len(block.tokens)
        block.ref_count += 1

    def release(self, block: Block) -> None:
        """One block table lets go of ``block``; at zero it is cached (if hashed) or emptied."""
        self._own(block)
        if block.ref_count <= 0:
            raise ValueError(f"block {block.block_id} is not in use (ref_count {block.ref_count})")
        self._release_all((block,))

    def _release_all(self, blocks) -> None:
        """Release each of ``blocks`` in turn (a freed table, tail first); unchecked: for the allocator,
        whose tables hold only used blocks of this pool."""
        empty, cached, tokens = self._free, self._cached_free, 0
        for block in blocks:
            block.ref_count -= 1
            if not block.ref_count:
                tokens += len(block.tokens)
                if block.block_hash is None:
                    block.tokens = []
                    empty.append(block)  # reused first, as vLLM prepends unhashed blocks
                else:
                    cached[block.block_id] = block  # most recently freed: evicted last
        self.tokens_in_use -= tokens

    def lookup(self, key: bytes) -> Block | None:
        """A block cached under ``key`` (the first registered), or ``None``: by hash alone, as vLLM V1."""
        return self._lookup(_key(key))

    def _lookup(self, key: bytes) -> Block | None:
        return self._by_hash.get(key)

    def register(self, block: Block, key: bytes) -> None:
        """Put a full, used, not yet hashed ``block`` in the prefix cache under ``key``.

        A block with the same key may be there already: both stay reachable.
        """
        self._own(block)
        key = _key(key)
        if block.ref_count == 0:
            raise ValueError(f"block {block.block_id} is free: only a used block is registered")
        if len(block.tokens) != self.block_size:
            raise ValueError(f"block {block.block_id} holds {len(block.tokens)} of {self.block_size} tokens: "
                             "only a full block is registered")
        if block.block_hash is not None:
            raise ValueError(f"block {block.block_id} is registered already")
        self._register(block, key)

    def _register(self, block: Block, key: bytes) -> None:
        # Unchecked: for the allocator, which registers only the full used blocks it has just written.
        block.block_hash = key
        if self._by_hash.setdefault(key, block) is not block:
            self._later.setdefault(key, []).append(block)


def _key(key: bytes) -> bytes:
    if not isinstance(key, bytes) or not key:
        raise TypeError(f"key must be a non-empty bytes hash, got {type(key).__name__}")
    return key
