"""Chapter 03's scenarios: one request naive against paged, the walk-through, the chatbot, lengths for a block size."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import batching, gpus, memory, paging
from .continuous_batching import BATCHING_SERVER


@dataclass(frozen=True)
class PagedRequest:
    """One request of ``n_tokens`` on a naive server reserving ``max_len`` slots, or in blocks of ``block_size``."""

    n_tokens: int = 100
    max_len: int = 2048
    block_size: int = 16

    @property
    def naive_waste(self) -> int:
        return paging.naive_waste(self.n_tokens, self.max_len)

    @property
    def blocks(self) -> int:
        return paging.blocks_needed(self.n_tokens, self.block_size)

    @property
    def slots(self) -> int:
        return paging.paged_slots(self.n_tokens, self.block_size)

    @property
    def paged_waste(self) -> int:
        return paging.paged_waste(self.n_tokens, self.block_size)


PAGED_REQUEST = PagedRequest()
"""Chapter 03's worked example 2 (and chapter 01's paging lever): 100 tokens, ``max_len`` 2,048, blocks of 16."""


def paging_walkthrough() -> paging.PagedAllocator:
    """Chapter 03's walk-through: two samples of one prompt, then a second request with the same prefix."""
    kv = paging.PagedAllocator(num_blocks=12, block_size=4, prefix_caching=True)
    prompt = [101, 102, 103, 104, 105, 106, 107, 108, 109, 110]
    kv.allocate("A", prompt)
    kv.fork("A", "A'")
    kv.append("A", 201)
    kv.append("A'", 301)
    kv.allocate("B", prompt[:8] + [401, 402, 403, 404, 405])
    return kv


def chat_sessions(slots_per_session: int, weight_dtype: str = "fp16") -> memory.CapacityPlan:
    """Chapter 03's chatbot on chapter 04's server: sessions that each hold ``slots_per_session`` KV slots.

    The server (Llama-2-13B, a 40 GiB A100, 4 GiB of overhead) is :data:`BATCHING_SERVER`, with its
    weights stored in ``weight_dtype``.
    """
    server = BATCHING_SERVER
    return memory.capacity_plan(gpu=gpus.get(server.gpu).memory,
                                weights=memory.weight_bytes(server.spec.n_params, weight_dtype),
                                per_request=slots_per_session * memory.kv_bytes_per_token(server.spec),
                                overhead=server.overhead)


@dataclass(frozen=True)
class LengthMix:
    """Chat-like request lengths (log-normal, seeded) against which chapter 03 chooses a block size."""

    n_requests: int = 2000
    mean: int = 300
    sigma: float = 1.0
    seed: int = 0
    block_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)

    @cached_property
    def lengths(self) -> tuple[int, ...]:
        return tuple(int(n) for n in batching.lognormal_lengths(self.n_requests, mean=self.mean,
                                                                 sigma=self.sigma, seed=self.seed))


BLOCK_SIZE_MIX = LengthMix()
"""Chapter 03's lengths for choosing a block size: 2,000 requests, mean 300 tokens, seed 0."""
