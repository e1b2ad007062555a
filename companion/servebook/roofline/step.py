"""What one step does: the FLOPs and bytes of a forward pass over the sequences scheduled together.

The one step model of the library.  Everything that times a step (the bounds,
the batching simulator, the advisor, the lab's predictions) builds a
:class:`StepCost` here, or asks :meth:`StepModel.seconds` for its bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import gpus, memory, models
from ..checks import choice, flag, whole
from ..gpus import GPU
from ..models import CHUNKED, SLIDING, ModelSpec
from ..models.params import expert_params, routed_params, unused_expert_params
from ..units import ceil_div
from .schemes import Scheme, compute_time, peak_rates, scheme


def matmul_params(model: ModelSpec | str) -> int:
    """Weights a token is multiplied by: all parameters but the input embedding table.

    The embedding is a lookup (no FLOPs, and only the looked-up rows are read);
    with tied embeddings the same matrix is also the LM head, so it counts.
    """
    spec = models.resolve(model)
    if spec.n_params is None:
        raise ValueError(f"{spec.name}: the roofline needs n_params")
    if spec.vocab_size is None or spec.tied_embeddings:
        return spec.n_params
    return spec.n_params - spec.vocab_size * spec.d_model


def attention_pairs(new_tokens: int, cached_tokens: int) -> int:
    """(query, key) pairs of causal attention when ``new_tokens`` join ``cached_tokens``.

    The i-th new token (1-based) attends to every cached token and to i new
    ones (itself included): n·c + n(n+1)/2.  A decode token (n = 1) gives c + 1.
    """
    return new_tokens * cached_tokens + new_tokens * (new_tokens + 1) // 2


def experts_read(n_experts: int, top_k: int, tokens: int) -> float:
    """Experts of one MoE layer that a step of ``tokens`` tokens reads, under uniform routing (expected value).

    Each token picks ``top_k`` of ``n_experts``; an expert is missed by one token
    with probability 1 − k/E and by all T tokens with (1 − k/E)^T, so
    E · (1 − (1 − k/E)^T) are read.  One token reads k; a large batch all E.
    Real routers are not uniform (a popular expert is read sooner), so this is
    a model, and the bytes it gives are the expectation, not a bound.
    """
    return n_experts * (1 - (1 - top_k / n_experts) ** tokens)


def _window_pairs(new_tokens: int, cached_tokens: int, window: int) -> int:
    """Σ over the new tokens of min(position + 1, W): the keys each new token of a sliding layer sees."""
    inside = max(0, min(new_tokens, window - cached_tokens))  # tokens whose window still reaches token 0
    return inside * cached_tokens + inside * (inside + 1) // 2 + (new_tokens - inside) * window


def _chunk_pairs(end: int, chunk: int) -> int:
    """Σ over positions p < end of (p mod C) + 1: the keys the tokens before ``end`` see in a chunked layer."""
    full, rest = divmod(end, chunk)
    return full * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


def local_view(model: ModelSpec | str, new_tokens: int, cached_tokens: int) -> tuple[int, int]:
    """(cached tokens read, attention pairs) of one sequence in the model's sliding or chunked layers.

    A sliding layer of window W reads the last W − 1 cached tokens at most; a
    chunked layer of chunk C only the cached tokens of the current chunk.  For
    a model whose layers are all global it is (cached_tokens, attention_pairs).
    """
    spec = models.resolve(model)
    new_tokens, cached_tokens = whole("new_tokens", new_tokens), whole("cached_tokens", cached_tokens, 0)
    if spec.local_kind == SLIDING:
        window = spec.sliding_window
        return min(cached_tokens, window - 1), _window_pairs(new_tokens, cached_tokens, window)
    if spec.local_kind == CHUNKED:
        chunk = spec.attention_chunk
        end = cached_tokens + new_tokens
        return cached_tokens % chunk, _chunk_pairs(end, chunk) - _chunk_pairs(cached_tokens, chunk)
    return cached_tokens, attention_pairs(new_tokens, cached_tokens)


def attention_flops_per_pair(spec: ModelSpec) -> int:
    """FLOPs of one (query, key) pair in one layer: 2 · heads · (q·k width + weighted-sum width).

    4 · n_heads · head_dim for MHA, GQA and MQA with equal K and V widths; for
    MLA the widths of the latent it attends over (kv_rank + rope, kv_rank).
    """
    if spec.mla is not None:
        return 2 * spec.n_heads * (spec.mla.cache_width + spec.mla.kv_rank)
    return 2 * spec.n_heads * (spec.head_dim + spec.v_head_dim)


@dataclass(frozen=True)
class StepShape:
    """The counts a :class:`StepModel` multiplies by a step's tokens: what one GPU holds, reads and sends.

    :meth:`of` gives the whole model on one GPU.  On one GPU of a tensor- or
    pipeline-parallel layout every count is that GPU's share (its shard of each
    weight, its KV heads, its query heads, its stage's layers), and a step also
    sends bytes over the GPUs' link: ``link_bytes_per_token`` per new token (the
    all-reduces), ``link_bytes_per_logit`` per token whose logits are gathered,
    and ``collectives`` collectives per step, each costing
    ``collective_latency`` seconds before its bytes move at ``link_bandwidth``
    bytes per second.  :mod:`servebook.parallel` builds those shapes; on one GPU
    the link terms are zero.
    """

    matmul_params: int
    active_params: int
    routed_params: int
    expert_params: int
    moe_layers: int
    kv_per_token: int
    kv_local_per_token: int
    attention_flops_per_pair: int
    local_attention_flops_per_pair: int
    lm_head_params: int
    link_bytes_per_token: int = 0
    link_bytes_per_logit: int = 0
    collectives: int = 0
    collective_latency: float = 0.0
    link_bandwidth: float = 0.0

    @classmethod
    def of(cls, model: ModelSpec | str, kv_dtype: str = "fp16") -> StepShape:
        """The whole model on one GPU: every weight, every KV head, every layer, no link."""
        spec = models.resolve(model)
        n_matmul = matmul_params(spec)
        local_layers = spec.layers_of(spec.local_kind) if spec.local_kind else 0
        pair = attention_flops_per_pair(spec)
        return cls(matmul_params=n_matmul, active_params=n_matmul - unused_expert_params(spec),
                   routed_params=routed_params(spec), expert_params=expert_params(spec) if spec.moe else 0,
                   moe_layers=spec.moe_layers, kv_per_token=memory.kv_bytes_per_token(spec, kv_dtype),
                   kv_local_per_token=local_layers * memory.kv_bytes_per_token_per_layer(spec, kv_dtype),
                   attention_flops_per_pair=(spec.n_layers - local_layers) * pair,
                   local_attention_flops_per_pair=local_layers * pair,
                   lm_head_params=(spec.vocab_size or 0) * spec.d_model)

    def communication_time(self, tokens: int, logits_tokens: int) -> float:
        """Seconds a step of ``tokens`` new tokens spends on the link: latencies, then bytes over bandwidth.

        Added to the roofline, not overlapped with it: a tensor-parallel
        all-reduce sits between two matmuls that wait for it.
        """
        if not self.collectives:
            return 0.0
        sent = self.link_bytes_per_token * tokens + self.link_bytes_per_logit * logits_tokens
        return self.collectives * self.collective_latency + sent / self.link_bandwidth


@dataclass(frozen=True)
class StepCost:
    """The work of one step: FLOPs by kind and bytes by kind.

    A step is one forward pass over the sequences scheduled together.  Each
    brings new tokens (a whole prompt, a chunk of one, or a single decode
    token) and attends to the tokens it already has in the KV cache.  The
    counts are sums over the step's sequences, so a scheduler's mixed step
    (some sequences prefilling while others decode) is one StepCost too.
    """

    phase: str            # "prefill", "decode" or "mixed"
    model: str
    scheme: Scheme
    sequences: int        # sequences in the step
    tokens: int           # new tokens the step processes, summed over its sequences
    cached_tokens: int    # tokens already in the KV cache, summed over its sequences (read, not recomputed)
    matmul_flops: int
    attention_flops: int
    dequant_flops: int
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int
    communication_time: float = 0.0  # seconds on the link between GPUs (0 on one GPU)

    @property
    def batch(self) -> int:
        """Sequences in the step."""
        return self.sequences

    @property
    def new_tokens(self) -> int:
        """New tokens per sequence (a prompt's length, or 1 in decode): exact for a uniform step."""
        return self.tokens // self.sequences

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.attention_flops + self.dequant_flops

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes


class StepModel:
    """The step model of one model under one scheme: a step's cost from its token counts.

    ``cost`` turns (sequences, new tokens, cached tokens, attention pairs) into
    a :class:`StepCost`; ``seconds`` gives the same step's roofline bound on a
    GPU without building one, for simulators that time millions of steps.
    Both use the same integers, so ``seconds(...) == bound(cost(...), gpu).time``.

    ``logits_tokens`` (in :meth:`cost`) is the number of tokens the LM head is
    applied to; by default every new token, as a plain forward pass does.
    A server samples only each sequence's last position, so it may pass the
    number of sequences instead.

    A model with sliding-window or chunked layers needs ``local_cached`` and
    ``local_pairs`` too: the cached tokens its local layers read and the pairs
    they attend, summed over the sequences (:func:`local_view` gives them for
    one sequence); the counts without them are its global layers'.

    ``shape`` (a :class:`StepShape`) makes it the step model of one GPU of a
    parallel layout; by default it is the whole model on one GPU.
    """

    def __init__(self, model: ModelSpec | str, weights: Scheme | str = "W16A16", kv_dtype: str = "fp16",
                 device: GPU | str | None = None, shape: StepShape | None = None) -> None:
        spec = self.spec = models.resolve(model)
        self.scheme = scheme(weights)
        self.kv_dtype = kv_dtype
        if shape is not None and not isinstance(shape, StepShape):
            raise TypeError(f"shape must be a StepShape, got {type(shape).__name__}")
        shape = self.shape = StepShape.of(spec, kv_dtype) if shape is None else shape
        self.n_matmul = shape.matmul_params
        self.n_active = shape.active_params  # the weights one token is multiplied by
        self.weight_bytes = self.scheme.weight_bytes(self.n_matmul)  # every weight (all experts)
        self._always_read = self.n_matmul - shape.routed_params
        self._read_bytes: dict[int, int] = {}
        self.kv_per_token = shape.kv_per_token  # written by every new token
        self.kv_local_per_token = shape.kv_local_per_token
        self.kv_global_per_token = self.kv_per_token - self.kv_local_per_token
        self.attention_flops_per_pair = shape.attention_flops_per_pair  # the global layers'
        self.local_attention_flops_per_pair = shape.local_attention_flops_per_pair
        self.lm_head_params = shape.lm_head_params
        self.gpu = None if device is None else gpus.get(device)
        self._rates: tuple[float, float, float] | None = None  # peak_rates, once

    def params_read(self, tokens: int) -> int:
        """Matmul weights a step of ``tokens`` tokens reads: all of a dense model's; a MoE's shared
        weights and the routed experts its tokens reach (:func:`experts_read`, uniform routing)."""
        moe = self.spec.moe
        if moe is None:
            return self.n_matmul
        routed = self.n_matmul - self._always_read
        reached = self.shape.moe_layers * experts_read(moe.n_experts, moe.top_k, tokens) * self.shape.expert_params
        return self._always_read + min(routed, math.ceil(reached))

    def weight_bytes_read(self, tokens: int) -> int:
        """Bytes of :meth:`params_read` in the model's scheme (cached: simulators ask for the same counts)."""
        if self.spec.moe is None:
            return self.weight_bytes
        if tokens not in self._read_bytes:
            self._read_bytes[tokens] = self.scheme.weight_bytes(self.params_read(tokens))
        return self._read_bytes[tokens]

    def _local(self, local_cached: int | None, local_pairs: int | None) -> tuple[int, int]:
        if not self.kv_local_per_token:
            return 0, 0
        if local_cached is None or local_pairs is None:
            raise ValueError(f"{self.spec.name} has {self.spec.local_kind} layers (span {self.spec.local_span}): "
                             "pass local_cached and local_pairs, what those layers read and attend "
                             "(roofline.local_view gives them per sequence)")
        return local_cached, local_pairs

    def cost(self, sequences: int, tokens: int, cached_tokens: int, pairs: int, *, phase: str = "mixed",
             logits_tokens: int | None = None, local_cached: int | None = None,
             local_pairs: int | None = None) -> StepCost:
        """The StepCost of a step of ``sequences`` sequences adding ``tokens`` to ``cached_tokens``.

        ``pairs`` is the step's attention (query, key) pairs, summed with
        :func:`attention_pairs` over its sequences.
        """
        sequences = whole("sequences", sequences, 1)
        tokens = whole("tokens", tokens, sequences)
        cached_tokens = whole("cached_tokens", cached_tokens, 0)
        pairs = whole("pairs", pairs, tokens)
        logits = tokens if logits_tokens is None else whole("logits_tokens", logits_tokens, 0, tokens)
        if local_cached is not None:
            local_cached = whole("local_cached", local_cached, 0, cached_tokens)
        if local_pairs is not None:
            local_pairs = whole("local_pairs", local_pairs, tokens, pairs)
        local_cached, local_pairs = self._local(local_cached, local_pairs)
        tiles = ceil_div(tokens, self.scheme.dequant_tile_tokens)
        return StepCost(
            phase=choice("phase", phase, PHASES), model=self.spec.name, scheme=self.scheme,
            sequences=sequences, tokens=tokens, cached_tokens=cached_tokens,
            matmul_flops=2 * self.n_active * tokens - 2 * self.lm_head_params * (tokens - logits),
            attention_flops=self.attention_flops_per_pair * pairs + self.local_attention_flops_per_pair * local_pairs,
            dequant_flops=self.scheme.dequant_flops_per_weight * self.params_read(tokens) * tiles,
            weight_bytes=self.weight_bytes_read(tokens),
            kv_read_bytes=self.kv_global_per_token * cached_tokens + self.kv_local_per_token * local_cached,
            kv_write_bytes=self.kv_per_token * tokens,
            communication_time=self.shape.communication_time(tokens, logits),
        )

    def seconds(self, tokens: int, cached_tokens: int, pairs: int, logits_tokens: int | None = None,
                local_cached: int | None = None, local_pairs: int | None = None) -> float:
        """Roofline bound (seconds) of a step on the model's GPU, from its token counts; no checks, no objects.

        The same arithmetic as ``bound(self.cost(...), device).time``, for
        the inner loop of a simulator that has validated its own counts.
        """
        device, recipe = self.gpu, self.scheme
        if device is None:
            raise ValueError("StepModel.seconds needs a GPU: build the model with device=...")
        local_cached, local_pairs = self._local(local_cached, local_pairs)
        logits = tokens if logits_tokens is None else logits_tokens
        matmul = 2 * self.n_active * tokens - 2 * self.lm_head_params * (tokens - logits)
        attention = self.attention_flops_per_pair * pairs + self.local_attention_flops_per_pair * local_pairs
        dequant = (recipe.dequant_flops_per_weight * self.params_read(tokens)
                   * ceil_div(tokens, recipe.dequant_tile_tokens)) if recipe.dequant_flops_per_weight else 0
        if self._rates is None:
            self._rates = peak_rates(device, recipe)
        compute = compute_time(device, recipe, matmul, attention, dequant, self._rates)
        moved = (self.weight_bytes_read(tokens) + self.kv_global_per_token * cached_tokens
                 + self.kv_local_per_token * local_cached + self.kv_per_token * tokens)
        return max(compute, moved / device.bandwidth) + self.shape.communication_time(tokens, logits)

    def timer(self, *, local_as_global: bool = False):
        """:meth:`seconds` as a function of ``(tokens, cached_tokens, pairs, logits_tokens)``, bound once.

        The same floats as :meth:`seconds`: the counts are integers, so
        leaving out the terms this model lacks (no experts, no
        dequantization, no link) changes none of them, and a simulator's
        inner loop pays only for the terms it has.  ``local_as_global``
        tells a model with sliding or chunked layers that no sequence
        outgrows one window (or chunk), so its local layers read and attend
        what the global ones do.
        """
        device = self.gpu
        if device is None:
            raise ValueError("StepModel.timer needs a GPU: build the model with device=...")
        local = flag("local_as_global", local_as_global) and bool(self.kv_local_per_token)
        if self.kv_local_per_token and not local:
            self._local(None, None)  # raises: what a model with local layers needs
        plain = (self.spec.moe is None and not self.scheme.dequant_flops_per_weight and not self.shape.collectives
                 and all(type(n) is int for n in (self.n_active, self.lm_head_params, self.weight_bytes,
                                                  self.attention_flops_per_pair, self.kv_per_token,
                                                  self.local_attention_flops_per_pair)))
        if not plain:
            if local:
                return lambda tokens, cached, pairs, logits: self.seconds(tokens, cached, pairs, logits, cached, pairs)
            return self.seconds
        matmul_rate, attention_rate, _ = peak_rates(device, self.scheme)
        per_token, lm_head, weights = 2 * self.n_active, 2 * self.lm_head_params, self.weight_bytes
        # (global + local) pairs, and the bytes a cached token is read in all layers, when local reads global
        per_pair = self.attention_flops_per_pair + self.local_attention_flops_per_pair * local
        per_cached = self.kv_global_per_token + self.kv_local_per_token * local
        per_new, bandwidth = self.kv_per_token, device.bandwidth

        def seconds(tokens: int, cached_tokens: int, pairs: int, logits_tokens: int) -> float:
            compute = (per_token * tokens - lm_head * (tokens - logits_tokens)) / matmul_rate \
                + per_pair * pairs / attention_rate
            return max(compute, (weights + per_cached * cached_tokens + per_new * tokens) / bandwidth)
        return seconds


PHASES = ("prefill", "decode", "mixed")


def prefill_step(model: ModelSpec | str, batch: int, prompt_len: int, weights: Scheme | str = "W16A16",
                 kv_dtype: str = "fp16", cached_tokens: int = 0, logits: str = "all",
                 shape: StepShape | None = None) -> StepCost:
    """One prefill step: ``batch`` prompts of ``prompt_len`` tokens go through the model at once.

    ``cached_tokens`` is a prefix (per prompt) already in the KV cache (prefix
    caching, or a later chunk of a chunked prefill); it is read, not
    recomputed.  ``logits="last"`` applies the LM head to each prompt's last
    token only, as a server (and the lab) does; ``"all"`` to every token.
    ``shape`` is one GPU's share of a parallel layout (default: the whole model).
    """
    batch = whole("batch", batch, 1)
    prompt_len = whole("prompt_len", prompt_len, 1)
    cached_tokens = whole("cached_tokens", cached_tokens, 0)
    logits_tokens = batch if choice("logits", logits, ("all", "last")) == "last" else None
    return _uniform_step(model, batch, prompt_len, cached_tokens, weights, kv_dtype, "prefill", logits_tokens,
                         shape)


def decode_step(model: ModelSpec | str, batch: int, context_len: int, weights: Scheme | str = "W16A16",
                kv_dtype: str = "fp16", shape: StepShape | None = None) -> StepCost:
    """One decode step: each of ``batch`` sequences with ``context_len`` cached tokens adds one token."""
    batch = whole("batch", batch, 1)
    context_len = whole("context_len", context_len, 0)
    return _uniform_step(model, batch, 1, context_len, weights, kv_dtype, "decode", shape=shape)


def _uniform_step(model: ModelSpec | str, batch: int, new: int, cached: int, weights: Scheme | str, kv_dtype: str,
                  phase: str, logits_tokens: int | None = None, shape: StepShape | None = None) -> StepCost:
    """A step of ``batch`` equal sequences, each adding ``new`` tokens to ``cached``."""
    step_model = StepModel(model, weights, kv_dtype, shape=shape)
    local_cached, local_pairs = local_view(step_model.spec, new, cached)
    return step_model.cost(batch, batch * new, batch * cached, batch * attention_pairs(new, cached), phase=phase,
                           logits_tokens=logits_tokens, local_cached=batch * local_cached,
                           local_pairs=batch * local_pairs)


