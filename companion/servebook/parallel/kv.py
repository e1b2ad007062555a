"""The KV cache per GPU: split by key/value heads, copied where there are fewer heads than GPUs.

Under tensor parallelism each GPU stores the keys and values of its own
key/value heads, max(1, n_kv // t) of them (vLLM 0.33.0, ``LlamaAttention``):
Llama-3-70B's 8 heads give 4, 2, 1 and 1 per GPU at t = 2, 4, 8 and 16, so
at t = 16 each head is stored twice and a GPU's cache per token is the same
as at t = 8.  Multi-head latent attention has no heads to split: every GPU
stores the whole latent (``MLAAttention`` caches one KV head of width
kv_lora_rank + rope), the cache is copied t times.  A pipeline stage stores
the cache of its own layers only.
"""

from __future__ import annotations

import math

from .. import memory
from ..checks import whole
from ..models import LAYER_KINDS, ModelSpec
from ..units import bytes_per_element
from .layout import Layout, check, stage_layers
from .weights import kv_heads_per_gpu


def kv_width_per_gpu(spec: ModelSpec, tensor: int) -> int:
    """Elements one token stores in one layer on one GPU: K and V of its heads, or MLA's whole latent."""
    if spec.mla is not None:
        return spec.mla.cache_width
    return kv_heads_per_gpu(spec, tensor) * (spec.head_dim + spec.v_head_dim)


def kv_copies(spec: ModelSpec, tensor: int) -> int:
    """GPUs that store each cached element: 1 while heads divide, t / n_kv past that, t for MLA's latent."""
    return kv_width_per_gpu(spec, tensor) * tensor // spec.cached_width


def _stage_kinds(spec: ModelSpec, layout: Layout, stage: int) -> dict[str, int]:
    layers = stage_layers(spec, check(spec, layout))[stage]
    kinds = [spec.layer_types[i] for i in layers]
    return {kind: kinds.count(kind) for kind in LAYER_KINDS if kind in kinds}


def stage_kv_bytes_per_token(spec: ModelSpec, layout: Layout, stage: int = 0, dtype: str = "fp16") -> int:
    """KV bytes one token adds on one GPU of ``stage``, while the context is within every window."""
    layers = len(stage_layers(spec, check(spec, layout))[stage])
    return math.ceil(layers * kv_width_per_gpu(spec, layout.tensor) * bytes_per_element(dtype))


def stage_kv_bytes(spec: ModelSpec, layout: Layout, seq_len: int, stage: int = 0, dtype: str = "fp16") -> int:
    """KV bytes one request of ``seq_len`` tokens takes on one GPU of ``stage``, layer kind by layer kind."""
    seq_len = whole("seq_len", seq_len)
    width = kv_width_per_gpu(spec, layout.tensor)
    elements = sum(count * memory.tokens_held(spec, kind, seq_len) * width
                   for kind, count in _stage_kinds(spec, layout, stage).items())
    return math.ceil(elements * bytes_per_element(dtype))


def kv_bytes_per_token_per_gpu(spec: ModelSpec, layout: Layout, dtype: str = "fp16") -> int:
    """KV bytes one token adds on the fullest GPU (the stage with the most layers)."""
    return max(stage_kv_bytes_per_token(spec, layout, s, dtype) for s in range(layout.pipeline))


def kv_cache_bytes_per_gpu(spec: ModelSpec, layout: Layout, seq_len: int, dtype: str = "fp16") -> int:
    """KV bytes one request of ``seq_len`` tokens takes on the fullest GPU."""
    return max(stage_kv_bytes(spec, layout, seq_len, s, dtype) for s in range(layout.pipeline))
