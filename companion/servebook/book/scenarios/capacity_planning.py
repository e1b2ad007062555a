"""Chapter 07's scenarios: one GPU's budget in users, and the worked examples' 13B model in decimal units."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import gpus, memory, models
from ...units import GB, GiB


@dataclass(frozen=True)
class CapacityCase:
    """A model on a GPU with an overhead, serving users of ``seq_len`` tokens each: the terms of the capacity plan.

    The GPU's memory is the GPU table's (what ``nvidia-smi`` reports), or ``gpu_bytes`` for a GPU the
    table does not have.
    """

    model: str | models.ModelSpec = "llama-2-13b"
    gpu: str = "a100-80gb-sxm"
    overhead: int = 4 * GiB
    seq_len: int = 4096
    kv_dtype: str = "fp16"
    gpu_bytes: int | None = None

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.resolve(self.model)

    @property
    def gpu_memory(self) -> int:
        return gpus.get(self.gpu).memory if self.gpu_bytes is None else self.gpu_bytes

    @property
    def per_user(self) -> int:
        """KV-cache bytes of one user of ``seq_len`` tokens."""
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, dtype=self.kv_dtype)

    def weights(self, dtype: str = "fp16", group_size: int | None = None) -> int:
        return memory.weight_bytes(self.spec.n_params, dtype, group_size=group_size)

    def plan(self, weights: int) -> memory.CapacityPlan | None:
        """The budget with ``weights`` bytes of weights; None where weights and overhead alone overflow the GPU."""
        if weights + self.overhead > self.gpu_memory:
            return None
        return memory.capacity_plan(self.gpu_memory, weights, self.per_user, overhead=self.overhead)

    def users(self, dtype: str = "fp16", group_size: int | None = None) -> int | None:
        """Users that fit with the weights in ``dtype``; None where the weights do not fit at all."""
        plan = self.plan(self.weights(dtype, group_size))
        return None if plan is None else plan.requests


CAPACITY = CapacityCase()
"""The capacity chapter's budget: Llama-2-13B on an A100 80GB (80 GiB), 4 GiB of overhead, users of 4,096 tokens."""

ROUNDED_WEIGHTS = {"fp16": 26 * GiB, "int4": int(6.5 * GiB)}
"""The users-per-GPU example's weights as often quoted, "26 GiB" and "6.5 GiB": 26 GB and 6.5 GB
mislabelled, kept to show the slip."""


@dataclass(frozen=True)
class DecimalBudget:
    """A round 13B model on one GPU, in decimal units: ``batch`` requests of ``seq_len`` tokens of FP16 KV.

    ``n_params`` is the round 13 x 10^9; the KV cache has ``model``'s shape.
    """

    gpu_memory: int = 80 * GB
    n_params: int = 13 * 10**9
    model: str = "llama-2-13b"
    seq_len: int = 4096
    batch: int = 16

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @property
    def kv(self) -> int:
        """KV-cache bytes of the whole batch."""
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, batch=self.batch)

    def weights(self, dtype: str = "fp16", group_size: int | None = None) -> int:
        return memory.weight_bytes(self.n_params, dtype, group_size=group_size)


DECIMAL_BUDGET = DecimalBudget()
"""13 x 10^9 weights and 16 requests of 4,096 tokens on an 80 GB (10^9 bytes) GPU."""
