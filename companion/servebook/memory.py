"""Where GPU memory goes: the KV cache, the weights, and what is left for users.

All results are ``int`` bytes.  The KV-cache formula of the book is

    KV bytes = 2 * B * S * L * kv_dim * p

with kv_dim = n_kv_heads * head_dim (= d_model for multi-head attention),
2 for the key and the value, and p bytes per element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from . import models
from .checks import byte_count, whole
from .models import ModelSpec
from .units import UNITS, bytes_per_element

K_AND_V = 2  # one key vector and one value vector per token per layer


def _ceil_bytes(amount: Fraction) -> int:
    # Half-byte dtypes (int4) pack two elements per byte; an odd count still needs the last byte.
    return math.ceil(amount)


def kv_bytes_per_token(model: ModelSpec | str, dtype: str = "fp16") -> int:
    """KV-cache bytes one token adds: 2 * L * kv_dim * p, over all layers."""
    spec = models.resolve(model)
    return _ceil_bytes(K_AND_V * spec.n_layers * spec.kv_dim * bytes_per_element(dtype))


def kv_cache_bytes(model: ModelSpec | str, seq_len: int, batch: int = 1, dtype: str = "fp16") -> int:
    """KV-cache bytes for ``batch`` requests of ``seq_len`` tokens each: 2 * B * S * L * kv_dim * p."""
    spec = models.resolve(model)
    seq_len = whole("seq_len", seq_len)
    batch = whole("batch", batch)
    return _ceil_bytes(K_AND_V * batch * seq_len * spec.n_layers * spec.kv_dim * bytes_per_element(dtype))


def max_batch(budget: int, per_request: int) -> int:
    """Largest number of requests of ``per_request`` bytes that fit ``budget``: floor, never round.

    A fraction of a request cannot be served, and rounding 12.8 up to 13 is an OOM.
    """
    budget = byte_count("budget", budget)
    per_request = byte_count("per_request", per_request, allow_zero=False)
    return budget // per_request


def weight_bytes(n_params: int, dtype: str = "fp16", group_size: int | None = None,
                 scale_dtype: str = "fp16", zero_points: bool = True) -> int:
    """Bytes of ``n_params`` weights stored as ``dtype``.

    With ``group_size`` the weights are quantized group-wise, and each group of
    ``group_size`` weights also stores a scale (``scale_dtype``) and, for an
    asymmetric scheme, a zero point of the same width as the codes: the real
    cost of "4-bit" weights is a little over 4 bits.
    """
    n_params = whole("n_params", n_params)
    total = n_params * bytes_per_element(dtype)
    if group_size is not None:
        group_size = whole("group_size", group_size)
        groups = math.ceil(Fraction(n_params, group_size))
        total += groups * bytes_per_element(scale_dtype)
        if zero_points:
            total += groups * bytes_per_element(dtype)
    return _ceil_bytes(total)


@dataclass(frozen=True)
class CapacityPlan:
    """A whole GPU split into weights, reserved overhead, and a KV pool shared by requests."""

    gpu: int
    weights: int
    overhead: int
    per_request: int

    @property
    def kv_pool(self) -> int:
        return self.gpu - self.weights - self.overhead

    @property
    def requests(self) -> int:
        """Concurrent requests whose KV cache fits the pool (floor)."""
        return max_batch(self.kv_pool, self.per_request)

    @property
    def kv_used(self) -> int:
        return self.requests * self.per_request

    @property
    def leftover(self) -> int:
        """Bytes of the pool too small for one more request."""
        return self.kv_pool - self.kv_used

    def describe(self, unit: str = "GiB", digits: int = 3) -> str:
        if unit not in UNITS:
            raise ValueError(f"unknown unit {unit!r}; known units: {', '.join(UNITS)}")
        u = UNITS[unit]
        return (f"GPU {self.gpu / u:.{digits}f} {unit} - weights {self.weights / u:.{digits}f} {unit}"
                f" - overhead {self.overhead / u:.{digits}f} {unit} = KV pool {self.kv_pool / u:.{digits}f} {unit}"
                f" -> {self.requests} requests of {self.per_request / u:.{digits}f} {unit}"
                f" ({self.leftover / u:.{digits}f} {unit} left over)")


def capacity_plan(gpu: int, weights: int, per_request: int, overhead: int = 0) -> CapacityPlan:
    """Split ``gpu`` bytes into weights + overhead + KV pool and count the requests that fit.

    Sizes are bytes; pass them in the unit the question uses (``80 * GiB`` or
    ``80 * GB``), and the plan answers in bytes.
    """
    gpu = byte_count("gpu", gpu, allow_zero=False)
    weights = byte_count("weights", weights)
    overhead = byte_count("overhead", overhead)
    per_request = byte_count("per_request", per_request, allow_zero=False)
    if weights + overhead > gpu:
        raise ValueError(
            f"weights ({weights:,} B) + overhead ({overhead:,} B) exceed the GPU ({gpu:,} B): "
            "nothing is left for the KV cache"
        )
    return CapacityPlan(gpu=gpu, weights=weights, overhead=overhead, per_request=per_request)
