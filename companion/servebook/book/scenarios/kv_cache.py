"""Chapter 02's scenarios: a KV cache in a memory budget."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import memory, models
from ...units import GiB


@dataclass(frozen=True)
class KVBudget:
    """Requests of ``seq_len`` tokens whose KV cache must fit ``budget_gib`` GiB.

    ``growth_batches`` are the batch sizes whose growth in sequence length the chapter draws.
    """

    model: str = "llama-2-13b"
    seq_len: int = 4096
    budget_gib: int = 40
    dtype: str = "fp16"
    growth_batches: tuple[int, ...] = (1, 4, 8, 16)

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @property
    def budget(self) -> int:
        return self.budget_gib * GiB

    @property
    def per_token(self) -> int:
        return memory.kv_bytes_per_token(self.spec, self.dtype)

    @property
    def per_request(self) -> int:
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, dtype=self.dtype)

    @property
    def fits(self) -> int:
        """Requests of ``seq_len`` tokens that fit the budget (floor)."""
        return memory.max_batch(self.budget, self.per_request)

    def longest(self, batch: int) -> int:
        """The most tokens each of ``batch`` requests can hold within the budget."""
        return memory.max_batch(self.budget, batch * self.per_token)


KV_BUDGET = KVBudget()
"""Chapter 02's worked example 2: Llama-2-13B in FP16, requests of 4,096 tokens, 40 GiB for the KV cache."""

KV_TOY = models.ModelSpec("6-layer toy", n_layers=6, d_model=512, n_heads=8)
"""Chapter 02's worked example 1: a small multi-head model (6 layers, d_model 512, 8 heads)."""

KV_7B_CLASS = models.ModelSpec("7B-class", n_layers=32, d_model=4096, n_heads=32)
"""Chapter 02's exercise 2: a 7B-class model with multi-head attention (32 layers, d_model 4096)."""
