"""The paged KV cache: fixed-size blocks, block tables, sharing, and prefix caching.

A naive server reserves ``max_len`` token slots for every request, because it
cannot know how long the answer will be.  PagedAttention (Kwon et al., 2023)
stores the KV cache in fixed-size *blocks* instead, handed out one at a time as
a sequence grows, so at most the last block of a sequence is partly empty.

The physical pool apart from the per-sequence tables, with the semantics of
vLLM 0.33.0's V1 engine (``vllm/v1/core/block_pool.py`` vs ``kv_cache_manager.py``):

- :mod:`~servebook.paging.block_pool`: :class:`BlockPool` owns the physical
  blocks: which are free, which are in use and by how many sequences
  (reference counts), and which freed blocks still hold a reusable prefix (the
  prefix cache: looked up by hash alone, duplicates kept reachable, empty
  blocks reused before any cached one is evicted, least recently freed first);
- :mod:`~servebook.paging.paged_allocator`: :class:`PagedAllocator` keeps each
  sequence's block table (logical block -> physical block): allocation for a
  prompt with the prefix-cache lookup and a reserve of blocks, the tokens each
  step computes (a chunk of a prompt, one decoded token), hashing full blocks
  when their step is scheduled, forking with copy-on-write, freeing tail first;
- :mod:`~servebook.paging.naive_allocator`: :class:`NaiveAllocator`, the
  contiguous scheme paging replaces: one region of ``max_len`` slots per request;
- :mod:`~servebook.paging.closed_forms`: :func:`blocks_needed`,
  :func:`paged_slots`, :func:`paged_waste`, :func:`naive_waste`, the arithmetic
  of the book's worked examples, which the allocators must agree with, and
  :func:`mean_tail_waste`, :func:`tail_share`: what a block size costs a workload;
- :mod:`~servebook.paging.hashing`: :func:`block_hash`, the chained key of the
  prefix cache, and the checks on token ids;
- :mod:`~servebook.paging.usage`: :class:`KVUsage` and :class:`PagedUsage`,
  snapshots of what is reserved and what holds tokens;
- :mod:`~servebook.paging.errors`: :class:`OutOfBlocks` and the allocators' other refusals.

Every operation is O(1) in the number of blocks in the pool (amortised; an
operation on a sequence also touches that sequence's own blocks).
"""

from .block_pool import Block, BlockPool
from .closed_forms import blocks_needed, mean_tail_waste, naive_waste, paged_slots, paged_waste, tail_share
from .errors import OutOfBlocks
from .hashing import block_hash
from .naive_allocator import NaiveAllocator
from .paged_allocator import PagedAllocator
from .usage import KVUsage, PagedUsage

__all__ = [
    "Block", "BlockPool", "PagedAllocator", "NaiveAllocator", "OutOfBlocks",
    "KVUsage", "PagedUsage", "blocks_needed", "paged_slots", "paged_waste", "naive_waste", "block_hash",
    "mean_tail_waste", "tail_share",
]
