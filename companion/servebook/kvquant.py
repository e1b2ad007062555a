"""Quantizing the KV cache: vLLM 0.33.0's ``--kv-cache-dtype`` schemes and a KIVI-like one, as fake quantization.

Each scheme says how a key or value tensor of shape (batch, kv_heads, tokens, head_dim), the
layout of a Hugging Face cache, is stored and read back:

- ``fp8`` / ``fp8_e5m2``: one FP8 number per element, one scale per tensor for K and one for V
  (``k_scale``, ``v_scale``); vLLM 0.33.0 sets both to 1.0 when the checkpoint carries none
  (``model_executor/layers/attention/attention.py``), so the values are cast as they are.
  With ``fp8`` on a backend that takes FP8 queries (FlashAttention-3, vLLM's default on Hopper;
  FlashInfer's TensorRT-LLM kernels on SM100) vLLM also casts each query to E4M3 with a
  per-tensor ``q_scale``, the checkpoint's or 1.0 (``attention.py``'s ``query_quant``).  A checkpoint
  with K/V scales and no ``q_scale`` gets 1.0 too: ``quantization/kv_cache.py`` warns that it sets
  ``q_scale`` to ``k_scale``, then overwrites it with 1.0 before attention reads it.  FlashAttention-3
  rounds the softmax probabilities to E4M3 as well, for its FP8 tensor cores' product with V
  (:func:`fp8_attention`).  The cache alone leaves queries and probabilities in 16 and 32 bits;
  :func:`fa3_fp8` rounds them as FlashAttention-3 does.
- ``fp8_per_token_head``, ``int8_per_token_head``: one scale per token and head,
  ``max(absmax / qmax, 1e-6)`` in float32, symmetric (vLLM's ``triton_reshape_and_cache_flash.py``;
  INT8 rounds half away from zero and clamps to -128..127).
- ``int4_per_token_head``: a randomized Hadamard rotation of each head vector, then asymmetric
  INT4 per token and head, ``s = max((max - min) / 15, 1e-6)`` (``int4_per_token_head.py``; vLLM
  hides the zero point in the low bits of the FP32 scale, so it costs no bytes).
- ``kivi4``, ``kivi2``: KIVI-like [Liu et al., 2024]: keys per *channel* (one grid per channel over
  each group of ``group`` tokens, because key outliers sit in fixed channels), values per *token*
  (one grid per group of ``group`` channels of a token).  Harsher than the paper, which keeps the
  newest R keys *and* values in 16 bits (R = 128 with G = 32 in its experiments): here only the
  newest keys that do not yet fill a group (fewer than ``group``) stay in 16 bits, and every value
  is quantized on arrival.

:func:`quantized_cache` applies a scheme to a model's cache during generation: beside the 16-bit
keys and values it keeps what the quantized cache holds (:class:`QuantizedKV`), each token
quantized once, and hands attention that.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import torch

from . import memory, models
from .checks import choice, positive, whole
from .quant import Mapping, Rounding, choose_qparams, choose_qparams_affine, fake_quantize
from .quant.fp8 import FP8Format, choose_fp8_scale, fake_quantize_fp8, fp8_max
from .units import ceil_div

__all__ = ["SCHEMES", "KVScheme", "scheme", "fake_quantize_kv", "QuantizedKV", "quantized_cache", "calibrated_scales",
           "kv_bytes_per_token",
           "attention_error", "hadamard", "fp8_attention", "fa3_fp8"]

PER_TOKEN_HEAD_FLOOR = 1e-6   # vLLM's floor on a per-(token, head) scale


@dataclass(frozen=True)
class KVScheme:
    """How one scheme stores K and V: bits per element, scale bytes per (token, head), and its rule."""

    name: str
    bits: int
    scale_bytes_per_token_head: int    # per K or V vector of one head of one token
    description: str
    group: int = 32                    # KIVI's token (keys) and channel (values) group


SCHEMES = {s.name: s for s in (
    KVScheme("auto", 16, 0, "16-bit, unquantized (vLLM's default: the model's dtype)"),
    KVScheme("fp8", 8, 0, "FP8 E4M3, one scale per tensor (1.0 unless calibrated)"),
    KVScheme("fp8_e5m2", 8, 0, "FP8 E5M2, one scale per tensor (1.0)"),
    KVScheme("fp8_per_token_head", 8, 4, "FP8 E4M3, an FP32 scale per token and head"),
    KVScheme("int8_per_token_head", 8, 4, "INT8 symmetric, an FP32 scale per token and head"),
    KVScheme("int4_per_token_head", 4, 4, "Hadamard rotation, INT4 asymmetric per token and head"),
    KVScheme("kivi4", 4, 0, "KIVI-like: INT4 keys per channel, values per token, groups of 32"),
    KVScheme("kivi2", 2, 0, "KIVI-like: INT2 keys per channel, values per token, groups of 32"),
)}


def scheme(name: str) -> KVScheme:
    """The :class:`KVScheme` called ``name`` (one of :data:`SCHEMES`)."""
    return SCHEMES[choice("scheme", name, SCHEMES)]


def hadamard(n: int, seed: int = 0) -> torch.Tensor:
    """An orthonormal randomized Hadamard matrix ``H D / sqrt(n)`` (n a power of two, D random signs)."""
    n = whole("n", n)
    if n & (n - 1):
        raise ValueError(f"n must be a power of two for a Hadamard matrix, got {n}")
    return _hadamard(n, whole("seed", seed, 0)).clone()


@cache
def _hadamard(n: int, seed: int) -> torch.Tensor:
    # Built once per size: the INT4 scheme rotates every key and value vector on every cache read.
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    signs = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(seed)) * 2 - 1
    return (h * signs / math.sqrt(n)).float()


def _per_token_head(x: torch.Tensor, fp8: bool) -> torch.Tensor:
    if fp8:
        scale = choose_fp8_scale(x, FP8Format.E4M3, axis=tuple(range(x.ndim - 1)), floor=PER_TOKEN_HEAD_FLOOR)
        return fake_quantize_fp8(x, scale, FP8Format.E4M3)
    scale, _ = choose_qparams_affine(x.amin(-1, keepdim=True), x.amax(-1, keepdim=True), 8, Mapping.SYMMETRIC,
                                     eps=PER_TOKEN_HEAD_FLOOR, exact_constant=False)
    # The codes are vLLM's, not quant.quantize's: _reshape_cache_per_token_head (vLLM 0.33.0,
    # v1/attention/ops/triton_reshape_and_cache_flash.py) rounds half away from zero, v + 0.5 or
    # v - 0.5 truncated by the int8 store, which neither Rounding is (HALF_UP sends -2.5 to -2,
    # HALF_EVEN sends 2.5 to 2); its clamp to -128 never binds, since |v| <= 127.
    v = x.float() * (1.0 / scale)
    v = torch.where(v >= 0, torch.floor(v + 0.5), torch.ceil(v - 0.5)).clamp(-128, 127)
    return (v * scale).to(x.dtype)


def _int4_rotated(x: torch.Tensor) -> torch.Tensor:
    h = _hadamard(x.shape[-1], 0).to(x.device)
    r = x.float() @ h
    lo = r.amin(dim=-1, keepdim=True)
    scale, _ = choose_qparams_affine(lo, r.amax(dim=-1, keepdim=True), 4, Mapping.ASYMMETRIC,
                                     eps=PER_TOKEN_HEAD_FLOOR, exact_constant=False)
    # The zero point and codes are vLLM's, not the library's (_reshape_cache_int4_kernel, vLLM 0.33.0,
    # v1/attention/ops/int4_per_token_head.py): it rounds by truncating v + 0.5, which is not
    # Rounding.HALF_UP's exact rule at the float just below 1/2 (0.5 - 2^-25 + 0.5 rounds to 1.0),
    # and it adds the zero point before rounding, round(r / s + z), where quant.quantize rounds
    # first, round(r / s) + z, which can differ in float32.  (floor(v + 0.5) clamped at 0 is vLLM's
    # where(v >= 0, v + 0.5, v - 0.5) truncated and clamped, for every v.)  Not modelled: vLLM
    # dequantizes with the scale's low 4 mantissa bits replaced by the zero point, within 2^-19 of s.
    z = -lo / scale
    z = torch.where(z >= 0, torch.floor(z + 0.5), torch.ceil(z - 0.5)).clamp(0, 15)
    q = (torch.floor(r * (1.0 / scale) + z + 0.5)).clamp(0, 15)
    return (((q - z) * scale) @ h.T).to(x.dtype)


def _kivi(x: torch.Tensor, bits: int, group: int, keys: bool) -> torch.Tensor:
    """Keys: a grid per channel over each group of ``group`` tokens; values: per token, groups of channels.
    The last keys that do not fill a group stay as they are (a residual of fewer than ``group`` keys;
    no value residual, unlike the paper's R recent tokens of both)."""
    tokens = x.shape[-2]
    full = tokens - tokens % group if keys else tokens
    out = x.clone()
    if full == 0:
        return out
    part = x[..., :full, :].float()
    if keys:   # (..., tokens, d) -> (..., d, tokens): groups run along the tokens
        part = part.transpose(-1, -2)
    qp = choose_qparams(part, bits, Mapping.ASYMMETRIC, axis=-1, group_size=group, rounding=Rounding.HALF_EVEN)
    fake = fake_quantize(part, qp, Rounding.HALF_EVEN)
    out[..., :full, :] = (fake.transpose(-1, -2) if keys else fake).to(x.dtype)
    return out


def fake_quantize_kv(keys: torch.Tensor, values: torch.Tensor, name: str, *, k_scale: float = 1.0,
                     v_scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """What a cache of scheme ``name`` hands attention for ``keys``, ``values`` (..., tokens, head_dim)."""
    kv = scheme(name)
    for label, t in (("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.ndim < 2:
            raise TypeError(f"{label} must be a floating tensor (..., tokens, head_dim)")
    if kv.name == "auto":
        return keys, values
    if kv.name in ("fp8", "fp8_e5m2"):
        fmt = FP8Format.E4M3 if kv.name == "fp8" else FP8Format.E5M2
        return fake_quantize_fp8(keys, k_scale, fmt), fake_quantize_fp8(values, v_scale, fmt)
    if kv.name == "fp8_per_token_head":
        return _per_token_head(keys, True), _per_token_head(values, True)
    if kv.name == "int8_per_token_head":
        return _per_token_head(keys, False), _per_token_head(values, False)
    if kv.name == "int4_per_token_head":
        return _int4_rotated(keys), _int4_rotated(values)
    return _kivi(keys, kv.bits, kv.group, True), _kivi(values, kv.bits, kv.group, False)


def calibrated_scales(keys: torch.Tensor, values: torch.Tensor) -> tuple[float, float]:
    """Per-tensor FP8 ``k_scale``, ``v_scale`` = absmax / 448: what a calibrated checkpoint carries."""
    top = fp8_max(FP8Format.E4M3)
    return float(keys.abs().max()) / top, float(values.abs().max()) / top


def kv_bytes_per_token(model, name: str) -> int:
    """Bytes one token adds to the KV cache of ``model`` (all layers, K and V) under scheme ``name``,
    codes plus per-(token, head) scales.  KIVI's per-group scales and zero points (two FP16 numbers
    per group of 32) are counted as well."""
    spec = models.resolve(model)
    kv = scheme(name)
    vectors = 2 * spec.n_layers * spec.n_kv_heads        # one K and one V vector per head per layer
    codes = vectors * spec.head_dim * kv.bits
    if kv.name.startswith("kivi"):
        return ceil_div(codes + ceil_div(vectors * spec.head_dim * 32, kv.group), 8)
    if kv.name == "auto":
        return memory.kv_bytes_per_token(spec, "fp16")
    return ceil_div(codes, 8) + vectors * kv.scale_bytes_per_token_head


def attention_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, name: str, *, k_scale: float = 1.0,
                    v_scale: float = 1.0) -> float:
    """Relative error ``||A(q, K_hat, V_hat) - A(q, K, V)|| / ||A(q, K, V)||`` of causal attention outputs
    (``q``, ``k``, ``v``: batch x heads x tokens x head_dim, as many query heads as key heads)."""
    k_hat, v_hat = fake_quantize_kv(k, v, name, k_scale=k_scale, v_scale=v_scale)
    exact = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    approx = torch.nn.functional.scaled_dot_product_attention(q.float(), k_hat.float(), v_hat.float(),
                                                              is_causal=True)
    return float((approx - exact).norm() / exact.norm())


class QuantizedKV:
    """One layer's quantized cache, grown as tokens arrive: each token is quantized once and kept.

    :meth:`read` takes the layer's 16-bit keys and values so far (..., tokens, head_dim, the newest
    last) and returns what attention reads, :func:`fake_quantize_kv` of them, quantizing only what
    it has not quantized before.  Every scheme quantizes each token by itself, except KIVI's keys:
    per channel over a group of ``group`` tokens, as soon as the group fills; the newest keys that
    do not fill one are read in 16 bits.  (Bit for bit the whole cache's, but for the INT4
    rotation's float rounding: :func:`quantized_cache` says when.)
    """

    def __init__(self, name: str, k_scale: float = 1.0, v_scale: float = 1.0):
        self.scheme = scheme(name)
        self.k_scale, self.v_scale = positive("k_scale", k_scale), positive("v_scale", v_scale)
        self.keys = self.values = None     # what is quantized so far (KIVI's keys: the full groups)

    def read(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What attention reads from the cache whose 16-bit keys and values are ``keys``, ``values``."""
        if self.scheme.name == "auto":
            return keys, values
        tokens = keys.shape[-2]
        if self.values is not None and (self.values.shape[-2] > tokens or self.values.shape[:-2] != values.shape[:-2]):
            self.keys = self.values = None   # the 16-bit cache was cut or its batch changed: start over
        done = 0 if self.values is None else self.values.shape[-2]
        ready = tokens - tokens % self.scheme.group if self.scheme.name.startswith("kivi") else tokens
        if done < tokens:
            done_keys = 0 if self.keys is None else self.keys.shape[-2]
            new_keys, new_values = fake_quantize_kv(keys[..., done_keys:ready, :], values[..., done:, :],
                                                    self.scheme.name, k_scale=self.k_scale, v_scale=self.v_scale)
            self.keys = new_keys if self.keys is None else torch.cat([self.keys, new_keys], dim=-2)
            self.values = new_values if self.values is None else torch.cat([self.values, new_values], dim=-2)
        if ready < tokens:
            return torch.cat([self.keys, keys[..., ready:, :]], dim=-2), self.values
        return self.keys, self.values


# What a Hugging Face cache can do to its 16-bit tensors besides appending to them.
_REWRITES = ("crop", "reset", "reorder_cache", "batch_select_indices", "batch_repeat_interleave")
_CACHE_CLASS = None


def _forgets(rewrite):
    def rewrite_and_forget(self, *args, **kwargs):
        self.quantized.clear()   # requantized from the rewritten 16-bit tensors on the next read
        return rewrite(self, *args, **kwargs)
    return rewrite_and_forget


def _cache_class():
    global _CACHE_CLASS
    if _CACHE_CLASS is None:   # transformers is imported only when a cache is asked for
        from transformers import DynamicCache

        class QuantizedKVCache(DynamicCache):
            def __init__(self, *args, **kwargs):
                self.quantized = {}
                super().__init__(*args, **kwargs)

            def update(self, key_states, value_states, layer_idx, *args, **kwargs):
                keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
                if layer_idx not in self.quantized:
                    self.quantized[layer_idx] = QuantizedKV(
                        self.scheme, 1.0 if self.k_scales is None else float(self.k_scales[layer_idx]),
                        1.0 if self.v_scales is None else float(self.v_scales[layer_idx]))
                return self.quantized[layer_idx].read(keys, values)

        for name in _REWRITES:
            if hasattr(DynamicCache, name):
                setattr(QuantizedKVCache, name, _forgets(getattr(DynamicCache, name)))
        _CACHE_CLASS = QuantizedKVCache
    return _CACHE_CLASS


def quantized_cache(name: str, k_scales=None, v_scales=None):
    """A Hugging Face ``DynamicCache`` whose ``update`` hands attention the quantized keys and values.

    Pass it as the model's cache (``cache=`` from transformers 5.24 on, ``past_key_values=`` before;
    :func:`servebook.smallmodel.perplexity` picks the keyword).  Beside the 16-bit tensors it keeps
    each layer's quantized ones (:class:`QuantizedKV`), as a quantized cache does: a token is
    quantized once, when it arrives (KIVI's keys once per group of 32, when it fills), so
    generating T tokens costs O(T) quantization work.  Attention reads :func:`fake_quantize_kv` of
    the whole cache, bit for bit, except under ``int4_per_token_head``: its Hadamard rotation is a
    float32 matrix product whose rounding depends on how many tokens are multiplied at once, so a
    token rotated on arrival can differ from the whole cache's by float rounding, and a code that
    lay on a rounding boundary by one INT4 step.  Cropping, resetting, reordering or selecting
    from the cache requantizes its 16-bit tensors on the next read.  ``k_scales`` / ``v_scales``
    (one per layer) are the per-tensor FP8 scales; 1.0 when omitted, as in vLLM.
    """
    cache = _cache_class()()
    cache.scheme, cache.k_scales, cache.v_scales = scheme(name).name, k_scales, v_scales
    return cache


PROBABILITY_OFFSET = 8
"""FlashAttention-3's ``Max_offset`` for FP8: it exponentiates ``s - (m - 8 ln 2)``, probabilities times 2^8."""


def fp8_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None,
                  scale: float | None = None, *, round_probabilities: bool = True) -> torch.Tensor:
    """Attention as FlashAttention-3's FP8 kernel computes it, in float32 (batch x heads x tokens x head_dim,
    as many heads in each; ``mask``: True where a query may attend, or ``None`` for causal attention,
    the queries being the last positions; ``scale``: 1/sqrt(head_dim) by default).

    The kernel multiplies V by the probabilities on FP8 tensor cores, so it casts them to E4M3
    first: for a row whose largest score is m, ``2^8 exp(s - m)`` (in (0, 256], so that they use
    E4M3's range and not just [0, 1]), and it divides the product by the sum of the unrounded
    ones, times 2^8 (``Softmax<..., Max_offset = 8>`` for FP8 in ``hopper/flash_fwd_kernel_sm90.h``,
    applied in ``hopper/softmax.h``: read in ``vllm-project/flash-attention``, the fork vLLM
    builds its kernels from, at commits 2cf8a1f and 32f7952, and upstream; vLLM 0.33.0's wheel
    does not carry the kernel sources to pin the commit).  Its m is the largest score of the key
    tiles read so far, which moves only which probabilities below 2^-18 of the largest round to
    zero.  With ``round_probabilities`` False: exact softmax attention of the same inputs.
    """
    if not isinstance(round_probabilities, bool):
        raise TypeError(f"round_probabilities must be True or False, got {round_probabilities!r}")
    if query.ndim != 4 or key.shape != value.shape or query.shape[:2] != key.shape[:2] \
            or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}: "
                         "expected batch x heads x tokens x head_dim, the same heads and width in each")
    n_queries, n_keys = query.shape[-2], key.shape[-2]
    if mask is None:   # causal, the queries being the last n_queries positions
        mask = torch.ones(n_queries, n_keys, dtype=torch.bool, device=query.device).tril(n_keys - n_queries)
    elif mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True where a query may attend), got {mask.dtype}")
    elif tuple(mask.shape[-2:]) != (n_queries, n_keys):
        raise ValueError(f"mask must end in (queries, keys) = ({n_queries}, {n_keys}), got {tuple(mask.shape)}")
    scale = query.shape[-1] ** -0.5 if scale is None else positive("scale", scale)
    scores = (query.float() @ key.float().transpose(-1, -2) * scale).masked_fill(~mask, -math.inf)
    exps = torch.exp(scores - scores.amax(-1, keepdim=True))
    if not round_probabilities:
        return exps @ value.float() / exps.sum(-1, keepdim=True)
    shifted = exps * 2.0**PROBABILITY_OFFSET
    rounded = fake_quantize_fp8(shifted, 1.0, FP8Format.E4M3)
    return rounded @ value.float() / shifted.sum(-1, keepdim=True)


_FA3_FP8 = "servebook_fa3_fp8"


def _fa3_fp8_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    # vLLM's query_quant (a static per-tensor E4M3 cast after RoPE), then FlashAttention-3's FP8 kernel.
    from transformers.integrations.sdpa_attention import repeat_kv

    query = fake_quantize_fp8(query, module.fp8_q_scale, FP8Format.E4M3)
    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask > torch.finfo(attention_mask.dtype).min / 2  # an additive mask's zeros
    out = fp8_attention(query, key, value, attention_mask, scaling, round_probabilities=module.fp8_probabilities)
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


@contextmanager
def fa3_fp8(model, q_scales=None, *, round_probabilities: bool = True):
    """Within the block, ``model``'s attention is FlashAttention-3's under ``--kv-cache-dtype fp8``.

    What vLLM 0.33.0 adds on an H100 to the cache's FP8 keys and values: the queries, after RoPE,
    are scaled by ``q_scales[layer]`` (1.0 each when omitted, what vLLM uses for a checkpoint
    without ``q_scale``, calibrated K/V scales or not) and cast to E4M3, and the probabilities are
    rounded to E4M3 before they multiply the values (:func:`fp8_attention`; ``round_probabilities``
    False leaves them exact, to tell the two apart).  For a Hugging Face Llama-style model with SDPA
    attention; the model's attention is restored on leaving.
    """
    from transformers import AttentionInterface

    if not hasattr(model, "set_attn_implementation"):
        raise TypeError("fa3_fp8 needs a transformers model with set_attn_implementation (transformers 5)")
    if not isinstance(round_probabilities, bool):
        raise TypeError(f"round_probabilities must be True or False, got {round_probabilities!r}")
    layers = [layer.self_attn for layer in model.model.layers]
    scales = [1.0] * len(layers) if q_scales is None else [positive("q_scale", float(s)) for s in q_scales]
    if len(scales) != len(layers):
        raise ValueError(f"q_scales must hold one scale per layer ({len(layers)}), got {len(scales)}")
    before = model.config._attn_implementation
    if before != "sdpa":
        raise ValueError(f"fa3_fp8 needs a model with SDPA attention, got {before!r}")
    AttentionInterface.register(_FA3_FP8, _fa3_fp8_attention)
    for attention, scale in zip(layers, scales, strict=True):
        attention.fp8_q_scale, attention.fp8_probabilities = scale, round_probabilities
    model.set_attn_implementation(_FA3_FP8)
    try:
        yield model
    finally:
        model.set_attn_implementation(before)
        for attention in layers:
            del attention.fp8_q_scale, attention.fp8_probabilities
