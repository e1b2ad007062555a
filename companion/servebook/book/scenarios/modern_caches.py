"""The modern-caches chapter's scenarios: every registry model at one context, the worked examples' models,
vLLM's reservation for a hybrid model, a mixture of experts at decode, and one GPU at 8k and 128k tokens."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property

from ... import memory, models, roofline
from ...models import LAYER_KINDS, ModelSpec
from ...units import GiB, ceil_div
from .capacity_planning import CapacityCase

COMPARE_CONTEXT = 8192
"""The context at which the chapter compares every registry model's cache (8k tokens)."""


def kv_per_token_by_kind(model: ModelSpec | str, seq_len: int = COMPARE_CONTEXT,
                         dtype: str = "fp16") -> dict[str, Fraction]:
    """One request's KV bytes in each layer kind, divided by its ``seq_len`` tokens: what a token costs there.

    Below every window this is the per-token cost of chapter 02's formula;
    past a window, a sliding layer's share falls as 1/S.
    """
    return {kind: Fraction(n, seq_len) for kind, n in memory.kv_bytes_by_layer_kind(model, seq_len, dtype).items()}


def as_mha(model: ModelSpec | str) -> ModelSpec:
    """``model`` with multi-head attention over the same heads: a key and a value for every query head.

    For MLA this is what its latent replaces: every head's key (nope + rope
    wide) and value, per token and layer.
    """
    spec = models.resolve(model)
    return ModelSpec(f"{spec.display_name} with MHA", n_layers=spec.n_layers, d_model=spec.d_model,
                     n_heads=spec.n_heads, head_dim=spec.head_dim, v_head_dim=spec.v_head_dim)


def all_global(model: ModelSpec | str) -> ModelSpec:
    """``model`` with every layer global: the cache a reader that drops the window would count."""
    spec = models.resolve(model)
    return replace(spec, name=f"{spec.name} (all global)", layer_types=None, sliding_window=None,
                   attention_chunk=None)


@dataclass(frozen=True)
class WindowCase:
    """One request of ``seq_len`` tokens on a model whose layers alternate between sliding and global."""

    model: str = "gemma-2-9b"
    seq_len: int = 8192
    dtype: str = "fp16"

    @cached_property
    def spec(self) -> ModelSpec:
        return models.get(self.model)

    @property
    def by_kind(self) -> dict[str, int]:
        return memory.kv_bytes_by_layer_kind(self.spec, self.seq_len, self.dtype)

    @property
    def total(self) -> int:
        return memory.kv_cache_bytes(self.spec, self.seq_len, dtype=self.dtype)

    @property
    def if_all_global(self) -> int:
        return memory.kv_cache_bytes(all_global(self.spec), self.seq_len, dtype=self.dtype)


WINDOW_CASE = WindowCase()
"""Worked example 2: Gemma-2-9B (21 sliding layers of W = 4,096, 21 global) at 8,192 tokens."""


@dataclass(frozen=True)
class VllmReservation:
    """What vLLM 0.33.0 reserves for one request of ``max_model_len`` tokens, layer kind by layer kind.

    ``max_num_batched_tokens`` = 8,192 is ``vllm serve``'s default on an H100
    or H200 in that version (``engine/arg_utils.py``, ``get_batch_defaults``);
    ``concurrent_batches`` is its default too (:data:`servebook.memory.VLLM_CONCURRENT_BATCHES`:
    two batches in flight under asynchronous scheduling).
    """

    model: str = "gemma-3-27b"
    max_model_len: int = 131072
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    concurrent_batches: int = memory.VLLM_CONCURRENT_BATCHES
    dtype: str = "fp16"

    @cached_property
    def spec(self) -> ModelSpec:
        return models.get(self.model)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind in LAYER_KINDS if self.spec.layers_of(kind))

    @property
    def page(self) -> int:
        """Bytes of one layer's block (the same for every layer kind)."""
        return memory.vllm_page_bytes(self.spec, self.block_size, self.dtype)

    def blocks(self, kind: str) -> int:
        """Blocks one layer of ``kind`` reserves per request (vLLM's bound)."""
        return memory.vllm_max_blocks(self.spec, kind, self.max_model_len, block_size=self.block_size,
                                      max_num_batched_tokens=self.max_num_batched_tokens,
                                      concurrent_batches=self.concurrent_batches)

    def held_blocks(self, kind: str) -> int:
        """Blocks the tokens a layer of ``kind`` holds would fill, at the most: min(S, W) over the block size."""
        return ceil_div(memory.tokens_held(self.spec, kind, self.max_model_len), self.block_size)

    @property
    def reserved(self) -> int:
        return memory.vllm_max_request_bytes(self.spec, self.max_model_len, block_size=self.block_size,
                                             max_num_batched_tokens=self.max_num_batched_tokens,
                                             concurrent_batches=self.concurrent_batches, dtype=self.dtype)

    @property
    def counted(self) -> int:
        """The formula's bytes for the same request (min(S, W) tokens in a sliding layer)."""
        return memory.kv_cache_bytes(self.spec, self.max_model_len, dtype=self.dtype)


VLLM_RESERVATION = VllmReservation()
"""Worked example 3: Gemma-3-27B at its 131,072-token context, in vLLM 0.33.0's blocks of 16."""


@dataclass(frozen=True)
class MoECase:
    """A mixture of experts beside the dense model with its attention: what changes and what does not."""

    model: str = "mixtral-8x7b"
    dense_twin: str = "mistral-7b"
    dtype: str = "fp16"
    decode_batches: tuple[int, ...] = (1, 8, 64)

    @cached_property
    def spec(self) -> ModelSpec:
        return models.get(self.model)

    @cached_property
    def step_model(self) -> roofline.StepModel:
        return roofline.StepModel(self.spec)

    def weights(self, active: bool = False) -> int:
        return memory.model_weight_bytes(self.spec, self.dtype, active=active)

    def experts_read(self, batch: int) -> float:
        """Routed experts a decode step of ``batch`` tokens reads per MoE layer (uniform routing)."""
        moe = self.spec.moe
        return roofline.experts_read(moe.n_experts, moe.top_k, batch)

    def weight_bytes_read(self, batch: int) -> int:
        """Weight bytes a decode step of ``batch`` tokens reads (16-bit weights)."""
        return self.step_model.weight_bytes_read(batch)


MOE_CASE = MoECase()
"""Worked example 4: Mixtral-8x7B against Mistral-7B, whose attention it shares."""


@dataclass(frozen=True)
class ContextCapacity:
    """Users whose caches fit one GPU next to 16-bit weights, at a short and a long context.

    Every model listed has a context window of at least the longest context;
    each count is a :class:`CapacityCase` of chapter 07.
    """

    models: tuple[str, ...] = ("llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "deepseek-v2-lite", "gemma-3-27b")
    gpu: str = "h200"
    contexts: tuple[int, ...] = (8192, 131072)
    overhead: int = 4 * GiB
    weights: str = "fp16"
    kv_dtype: str = "fp16"

    def __post_init__(self) -> None:
        short = [m for m in self.models if (models.get(m).max_seq_len or 0) < max(self.contexts)]
        if short:
            raise ValueError(f"contexts reach {max(self.contexts):,} tokens, beyond the window of {short}")

    def case(self, model: str, seq_len: int) -> CapacityCase:
        return CapacityCase(model, self.gpu, self.overhead, seq_len, self.kv_dtype)

    def users(self, model: str, seq_len: int) -> int | None:
        return self.case(model, seq_len).users(self.weights)


CONTEXT_CAPACITY = ContextCapacity()
"""The capacity comparison: five models with 128k windows on one H200, at 8,192 and 131,072 tokens."""
