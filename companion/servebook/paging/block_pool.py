"""The physical pool of KV blocks: free, used (reference counted) or cached for prefix reuse.

Like vLLM V1's ``block_pool.py``, the pool knows nothing of sequences: which
block a sequence's i-th logical block is lives in the block tables of
:mod:`servebook.paging.paged_allocator`.  Every operation is O(1) in the number
of blocks: free blocks sit on a stack, freed-but-cached blocks in an
insertion-ordered dict, so nothing scans the pool or removes from the middle of a list.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from ..checks import whole
from .errors import OutOfBlocks


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
