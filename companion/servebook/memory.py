"""Where GPU memory goes: the KV cache, the weights, and what is left for users.

All results are ``int`` bytes.  The KV-cache formula of the book is

    KV bytes = 2 * B * S * L * kv_dim * p

with kv_dim = n_kv_heads * head_dim (= d_model for multi-head attention),
2 for the key and the value, and p bytes per element.  Models of today
change two of its factors, layer by layer:

- what a layer stores per token: K and V of every key/value head (with keys
  and values of different widths, ``n_kv_heads * (head_dim + v_head_dim)``),
  or, with multi-head latent attention, one latent and one rope key, stored
  once: no factor 2 (DeepSeek-V3: (512 + 64) * 61 layers * 2 bytes = 70,272
  bytes per token in BF16);
- how many tokens a layer holds: every token of the context in a global
  layer, at most the window W in a sliding-window layer, at most its chunk C
  in a chunked layer (Llama 4).  So the sum runs over the layers:

      KV bytes = B * p * sum over layers of (tokens held at S) * (elements per token)

Mixture-of-experts layers change the weights, never the cache.

vLLM (0.33.0, the version the book describes) allocates the cache in pages of
``block_size`` tokens per layer, and reserves for a sliding-window layer a few
blocks more than W (:func:`vllm_max_blocks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from . import models
from .checks import byte_count, choice, flag, whole
from .models import CHUNKED, GLOBAL, LAYER_KINDS, SLIDING, ModelSpec
from .units import UNITS, bytes_per_element, ceil_div

K_AND_V = 2  # one key vector and one value vector per token per layer (not for MLA's latent)
VLLM_VERSION = "0.33.0"


def _ceil_bytes(amount: Fraction) -> int:
    # Half-byte dtypes (int4) pack two elements per byte; an odd count still needs the last byte.
    return math.ceil(amount)


def kv_bytes_per_token(model: ModelSpec | str, dtype: str = "fp16") -> int:
    """KV-cache bytes one token adds, over all layers, while the context is within every window.

    2 * L * kv_dim * p for MHA, GQA and MQA; L * (latent + rope) * p for MLA.
    Past a window, a sliding layer adds a token and drops one: use
    :func:`kv_cache_bytes` for a whole request.
    """
    spec = models.resolve(model)
    return _ceil_bytes(spec.n_layers * spec.cached_width * bytes_per_element(dtype))


def kv_bytes_per_token_per_layer(model: ModelSpec | str, dtype: str = "fp16") -> int:
    """Bytes one token stores in one layer: K and V of every key/value head, or MLA's latent and rope key."""
    spec = models.resolve(model)
    return _ceil_bytes(spec.cached_width * bytes_per_element(dtype))


def tokens_held(model: ModelSpec | str, kind: str, seq_len: int) -> int:
    """Tokens a layer of ``kind`` holds for a request of ``seq_len`` tokens: S, min(S, W) or min(S, C).

    A sliding-window layer attends to the last W tokens; a chunked layer to the
    tokens of its chunk, whose cache is dropped when the next chunk starts, so
    it never holds more than C (the most it holds over the request).
    """
    spec = models.resolve(model)
    seq_len = whole("seq_len", seq_len)
    kind = choice("kind", kind, LAYER_KINDS)
    if kind == SLIDING and spec.sliding_window is not None:
        return min(seq_len, spec.sliding_window)
    if kind == CHUNKED and spec.attention_chunk is not None:
        return min(seq_len, spec.attention_chunk)
    return seq_len


def _kind_elements(spec: ModelSpec, kind: str, seq_len: int) -> int:
    """Elements all layers of ``kind`` hold for one request of ``seq_len`` tokens."""
    return spec.layers_of(kind) * tokens_held(spec, kind, seq_len) * spec.cached_width


def kv_cache_bytes(model: ModelSpec | str, seq_len: int, batch: int = 1, dtype: str = "fp16") -> int:
    """KV-cache bytes for ``batch`` requests of ``seq_len`` tokens each, summed over the layers.

    2 * B * S * L * kv_dim * p for a model whose layers are all global; a
    sliding layer counts min(S, W) tokens and a chunked one min(S, C).
    """
    spec = models.resolve(model)
    seq_len = whole("seq_len", seq_len)
    batch = whole("batch", batch)
    elements = sum(_kind_elements(spec, kind, seq_len) for kind in LAYER_KINDS)
    return _ceil_bytes(batch * elements * bytes_per_element(dtype))


def kv_bytes_by_layer_kind(model: ModelSpec | str, seq_len: int, dtype: str = "fp16") -> dict[str, int]:
    """One request's KV bytes per layer kind (only the kinds the model has): where the cache goes."""
    spec = models.resolve(model)
    seq_len = whole("seq_len", seq_len)
    return {kind: _ceil_bytes(_kind_elements(spec, kind, seq_len) * bytes_per_element(dtype))
            for kind in LAYER_KINDS if spec.layers_of(kind)}


def longest_seq_len(model: ModelSpec | str, budget: int, batch: int = 1, dtype: str = "fp16") -> int | None:
    """The longest S such that ``batch`` requests of S tokens fit ``budget`` bytes of KV cache (0 if none does).

    For a model whose layers are all global this is budget / (B * bytes per
    token), floored.  Past its window a sliding (or chunked) layer stops
    growing, so only the global layers set how long a request can be; a model
    with no global layer at all has a cache that stops growing, and if that
    cap fits every S does: the answer is then ``None`` (no limit from memory).
    """
    spec = models.resolve(model)
    budget = byte_count("budget", budget)
    batch = whole("batch", batch)

    def fits(seq_len: int) -> bool:
        return kv_cache_bytes(spec, seq_len, batch, dtype) <= budget

    if not fits(1):
        return 0
    if spec.layers_of(GLOBAL):
        too_long = 2
        while fits(too_long):  # a global layer grows with every token, so this ends
            too_long *= 2
    else:
        too_long = max(tokens for tokens in (spec.sliding_window, spec.attention_chunk) if tokens) + 1
        if fits(too_long):
            return None
    longest = 1  # fits; too_long does not: bisect between them
    while too_long - longest > 1:
        middle = (longest + too_long) // 2
        longest, too_long = (middle, too_long) if fits(middle) else (longest, middle)
    return longest


# ---------------------------------------------------------------------------
# vLLM's pages (vLLM 0.33.0, vllm/v1/kv_cache_interface.py).


def vllm_page_bytes(model: ModelSpec | str, block_size: int = 16, dtype: str = "fp16") -> int:
    """One layer's KV page in vLLM: ``block_size`` tokens of that layer's cache.

    ``AttentionSpec.page_size_bytes``: num_kv_heads * block_size * (head_size +
    head_size_v) * dtype size, the same for a global, a sliding-window and a
    chunked layer; for MLA, ``MLAAttentionSpec`` has one KV head of head size
    kv_lora_rank + qk_rope_head_dim and no separate V (mla_attention.py,
    ``get_kv_cache_spec``).  Both are ``block_size * cached_width * p``.
    """
    block_size = whole("block_size", block_size)
    return block_size * kv_bytes_per_token_per_layer(model, dtype)


VLLM_CONCURRENT_BATCHES = 2
"""Batches in flight in vLLM 0.33.0 by default: asynchronous scheduling is on unless something rules it
out (``VllmConfig.__post_init__``), and then ``VllmConfig.max_concurrent_batches`` is 2 (``config/vllm.py``);
1 with ``--no-async-scheduling``."""


def vllm_max_blocks(model: ModelSpec | str, kind: str, max_model_len: int, *, block_size: int = 16,
                    max_num_batched_tokens: int, concurrent_batches: int = VLLM_CONCURRENT_BATCHES) -> int:
    """Blocks vLLM 0.33.0 reserves per request for one layer of ``kind`` (its pool sizing and admission bound).

    - global (``FullAttentionSpec.max_memory_usage_bytes``): cdiv(max_model_len, block_size);
    - sliding (``SlidingWindowSpec.max_admission_blocks_per_request``):
      cdiv(min(W - 1 + in-flight tokens, max_model_len), block_size) + 1, the +1
      because the window need not start on a block boundary;
    - chunked (``ChunkedLocalAttentionSpec.max_admission_blocks_per_request``):
      cdiv(min(C + in-flight tokens, max_model_len), block_size).

    In-flight tokens are ``concurrent_batches * max_num_batched_tokens``
    (``VllmConfig.max_in_flight_tokens``: 2 batches with async scheduling, the
    default, :data:`VLLM_CONCURRENT_BATCHES`; the pipeline depth with pipeline
    parallelism; 1 without either).  vLLM's default
    ``max_num_batched_tokens`` depends on the GPU and the entry point
    (``engine/arg_utils.py``), so it is required here.
    """
    spec = models.resolve(model)
    kind = choice("kind", kind, LAYER_KINDS)
    max_model_len = whole("max_model_len", max_model_len)
    block_size = whole("block_size", block_size)
    in_flight = whole("concurrent_batches", concurrent_batches) * whole("max_num_batched_tokens",
                                                                        max_num_batched_tokens)
    if kind == SLIDING and spec.sliding_window is not None:
        return ceil_div(min(spec.sliding_window - 1 + in_flight, max_model_len), block_size) + 1
    if kind == CHUNKED and spec.attention_chunk is not None:
        return ceil_div(min(spec.attention_chunk + in_flight, max_model_len), block_size)
    return ceil_div(max_model_len, block_size)


def vllm_max_request_bytes(model: ModelSpec | str, max_model_len: int, *, block_size: int = 16,
                           max_num_batched_tokens: int, concurrent_batches: int = VLLM_CONCURRENT_BATCHES,
                           dtype: str = "fp16") -> int:
    """KV bytes vLLM 0.33.0 reserves for one request of ``max_model_len`` tokens: blocks times pages, every layer."""
    spec = models.resolve(model)
    page = vllm_page_bytes(spec, block_size, dtype)
    return sum(spec.layers_of(kind) * page * vllm_max_blocks(
        spec, kind, max_model_len, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
        concurrent_batches=concurrent_batches) for kind in LAYER_KINDS if spec.layers_of(kind))


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


def model_weight_bytes(model: ModelSpec | str, dtype: str = "fp16", *, active: bool = False,
                       group_size: int | None = None, scale_dtype: str = "fp16", zero_points: bool = True) -> int:
    """Bytes of a model's weights: every parameter (``n_params``), or with ``active`` those one token uses.

    A mixture of experts must hold every expert in memory; ``active`` is what
    one token reads (:func:`servebook.models.params.active_params`), not what fits.
    """
    spec = models.resolve(model)
    if spec.n_params is None:
        raise ValueError(f"{spec.name}: weight bytes need the model's parameter count (n_params)")
    n = spec.count_active_params() if flag("active", active) else spec.n_params
    return weight_bytes(n, dtype, group_size=group_size, scale_dtype=scale_dtype, zero_points=zero_points)


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


def model_capacity_plan(model: ModelSpec | str, gpu: int, seq_len: int, *, weights_dtype: str = "fp16",
                        kv_dtype: str = "fp16", overhead: int = 0) -> CapacityPlan:
    """A :func:`capacity_plan` for ``model``: all its weights, and requests of ``seq_len`` tokens (layer by layer)."""
    return capacity_plan(gpu, model_weight_bytes(model, weights_dtype), kv_cache_bytes(model, seq_len, dtype=kv_dtype),
                         overhead=overhead)
