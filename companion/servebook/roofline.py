"""The roofline of one serving step: FLOPs, bytes moved, and which one sets the time.

A step of a transformer (one prefill of a batch of prompts, or one decode step
that adds a token to every sequence in a batch) does FLOPs and moves bytes
between HBM and the chip.  The GPU cannot do it faster than either allows
(Williams et al., 2009), so

    time >= max(FLOPs / peak FLOP/s, bytes / bandwidth)

and which term wins is decided by the step's *arithmetic intensity*
(FLOPs per byte) against the GPU's *ridge point* (peak / bandwidth).

What a step counts (Pope et al., 2023, do the same accounting):

- matmul FLOPs: 2 per weight per token (one multiply, one add), the "2·N rule";
- attention FLOPs: 4 · L · (n_heads · head_dim) per token per position attended
  (2 for q·k, 2 for the weighted sum of v);
- weight bytes: every matmul weight is read from HBM once per step, whatever the
  batch: that is what makes a small decode step memory-bound;
- KV bytes: the cache the step reads (tokens already stored) and writes (its new
  tokens).

Activations are not counted, so the bytes are a lower bound and the time bound
stays a lower bound.  All byte counts are ``int``; times are seconds (float).

Quantization changes the sums (see :class:`Scheme`): W8A8 stores INT8 weights
and runs the matmuls on the INT8 tensor cores; W4A16 stores 4-bit weights (plus
group scales) but multiplies in FP16, after dequantizing the weights on the
ordinary CUDA cores: fewer bytes, the same tensor-core FLOPs, and extra work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import gpus, memory, models
from .checks import choice, lookup, whole
from .gpus import GPU, GPUS
from .models import ModelSpec
from .units import GB, ceil_div

# ---------------------------------------------------------------------------
# GPUs live in :mod:`servebook.gpus`; the roofline names them as it always has.

gpu = gpus.get


def ridge_point(device: GPU | str, precision: str = "fp16") -> float:
    """Peak FLOP/s over bandwidth: the intensity (FLOP/byte) above which a step is compute-bound."""
    device = gpu(device)
    return device.peak(precision) / device.bandwidth


# ---------------------------------------------------------------------------
# Weight and activation precision: W16A16, W8A8, W4A16.


@dataclass(frozen=True)
class Scheme:
    """How weights are stored and how the matmuls run.

    ``dequant_flops_per_weight`` and ``dequant_tile_tokens`` model W4A16's extra
    work: a kernel converts each 4-bit weight back to FP16 (unpack, subtract the
    zero point, multiply by the scale: counted as one fused multiply-add, 2 FLOPs)
    once for every ``dequant_tile_tokens`` rows of activations it multiplies, on
    the CUDA cores at the FP32 rate.  These are modelling assumptions, not
    datasheet facts; kernels differ, so change them to match yours.
    """

    name: str
    weight_dtype: str
    matmul_precision: str            # "fp16" or "int8": which tensor cores run the matmuls
    group_size: int | None = None    # group-wise scales (and zero points) stored with the weights
    dequant_flops_per_weight: int = 0
    dequant_tile_tokens: int = 64

    def weight_bytes(self, n_params: int) -> int:
        """Bytes of ``n_params`` weights in this scheme (group scales included)."""
        return memory.weight_bytes(n_params, self.weight_dtype, group_size=self.group_size)


SCHEMES: dict[str, Scheme] = {
    "W16A16": Scheme("W16A16", "fp16", "fp16"),
    "W8A8": Scheme("W8A8", "int8", "int8"),
    "W4A16": Scheme("W4A16", "int4", "fp16", group_size=128, dequant_flops_per_weight=2),
}


def scheme(name: Scheme | str) -> Scheme:
    """Look a scheme up by name (``"W16A16"``, ``"W8A8"``, ``"W4A16"``)."""
    if isinstance(name, Scheme):
        return name
    if not isinstance(name, str):
        raise TypeError(f"scheme must be a Scheme or a name, got {type(name).__name__}")
    return lookup("scheme", name, SCHEMES, key=str.upper)


# ---------------------------------------------------------------------------
# What one step does: the one step model of the library.  Everything that
# times a step (this module's bounds, the batching simulator, the advisor, the
# lab's predictions) builds a StepCost here and bounds it with bound().


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
    """

    def __init__(self, model: ModelSpec | str, weights: Scheme | str = "W16A16", kv_dtype: str = "fp16",
                 device: GPU | str | None = None) -> None:
        self.spec = models.resolve(model)
        self.scheme = scheme(weights)
        self.kv_dtype = kv_dtype
        self.n_matmul = matmul_params(self.spec)
        self.kv_per_token = memory.kv_bytes_per_token(self.spec, kv_dtype)
        self.weight_bytes = self.scheme.weight_bytes(self.n_matmul)
        self.attention_flops_per_pair = 4 * self.spec.n_layers * self.spec.n_heads * self.spec.head_dim
        self.lm_head_params = (self.spec.vocab_size or 0) * self.spec.d_model
        self.gpu = None if device is None else gpu(device)

    def cost(self, sequences: int, tokens: int, cached_tokens: int, pairs: int, *, phase: str = "mixed",
             logits_tokens: int | None = None) -> StepCost:
        """The StepCost of a step of ``sequences`` sequences adding ``tokens`` to ``cached_tokens``.

        ``pairs`` is the step's attention (query, key) pairs, summed with
        :func:`attention_pairs` over its sequences.
        """
        sequences = whole("sequences", sequences, 1)
        tokens = whole("tokens", tokens, sequences)
        cached_tokens = whole("cached_tokens", cached_tokens, 0)
        pairs = whole("pairs", pairs, tokens)
        logits = tokens if logits_tokens is None else whole("logits_tokens", logits_tokens, 0, tokens)
        tiles = ceil_div(tokens, self.scheme.dequant_tile_tokens)
        return StepCost(
            phase=choice("phase", phase, PHASES), model=self.spec.name, scheme=self.scheme,
            sequences=sequences, tokens=tokens, cached_tokens=cached_tokens,
            matmul_flops=2 * self.n_matmul * tokens - 2 * self.lm_head_params * (tokens - logits),
            attention_flops=self.attention_flops_per_pair * pairs,
            dequant_flops=self.scheme.dequant_flops_per_weight * self.n_matmul * tiles,
            weight_bytes=self.weight_bytes,
            kv_read_bytes=self.kv_per_token * cached_tokens,
            kv_write_bytes=self.kv_per_token * tokens,
        )

    def seconds(self, tokens: int, cached_tokens: int, pairs: int, logits_tokens: int | None = None) -> float:
        """Roofline bound (seconds) of a step on the model's GPU, from its token counts; no checks, no objects.

        The same arithmetic as ``bound(self.cost(...), device).time``, for
        the inner loop of a simulator that has validated its own counts.
        """
        device, recipe = self.gpu, self.scheme
        if device is None:
            raise ValueError("StepModel.seconds needs a GPU: build the model with device=...")
        logits = tokens if logits_tokens is None else logits_tokens
        matmul = 2 * self.n_matmul * tokens - 2 * self.lm_head_params * (tokens - logits)
        attention = self.attention_flops_per_pair * pairs
        dequant = recipe.dequant_flops_per_weight * self.n_matmul * ceil_div(tokens, recipe.dequant_tile_tokens)
        compute = _compute_time(device, recipe, matmul, attention, dequant)
        moved = self.weight_bytes + self.kv_per_token * cached_tokens + self.kv_per_token * tokens
        return max(compute, moved / device.bandwidth)


PHASES = ("prefill", "decode", "mixed")


def prefill_step(model: ModelSpec | str, batch: int, prompt_len: int, weights: Scheme | str = "W16A16",
                 kv_dtype: str = "fp16", cached_tokens: int = 0, logits: str = "all") -> StepCost:
    """One prefill step: ``batch`` prompts of ``prompt_len`` tokens go through the model at once.

    ``cached_tokens`` is a prefix (per prompt) already in the KV cache (prefix
    caching, or a later chunk of a chunked prefill); it is read, not
    recomputed.  ``logits="last"`` applies the LM head to each prompt's last
    token only, as a server (and the lab) does; ``"all"`` to every token.
    """
    batch = whole("batch", batch, 1)
    prompt_len = whole("prompt_len", prompt_len, 1)
    cached_tokens = whole("cached_tokens", cached_tokens, 0)
    logits_tokens = batch if choice("logits", logits, ("all", "last")) == "last" else None
    return StepModel(model, weights, kv_dtype).cost(
        batch, batch * prompt_len, batch * cached_tokens, batch * attention_pairs(prompt_len, cached_tokens),
        phase="prefill", logits_tokens=logits_tokens)


def decode_step(model: ModelSpec | str, batch: int, context_len: int, weights: Scheme | str = "W16A16",
                kv_dtype: str = "fp16") -> StepCost:
    """One decode step: each of ``batch`` sequences with ``context_len`` cached tokens adds one token."""
    batch = whole("batch", batch, 1)
    context_len = whole("context_len", context_len, 0)
    return StepModel(model, weights, kv_dtype).cost(
        batch, batch, batch * context_len, batch * attention_pairs(1, context_len), phase="decode")


# ---------------------------------------------------------------------------
# Bounds.


def _compute_time(device: GPU, recipe: Scheme, matmul_flops: int, attention_flops: int, dequant_flops: int) -> float:
    """Tensor-core time of the matmuls (at the scheme's precision) and of attention (FP16), plus the
    CUDA-core time of W4A16's dequantization, which competes with the matmuls for the same SMs."""
    return (matmul_flops / device.peak(recipe.matmul_precision)
            + attention_flops / device.peak("fp16")
            + dequant_flops / device.peak("fp32"))


@dataclass(frozen=True)
class Bound:
    """The roofline bound of a step on a GPU.

    ``compute_time`` adds the tensor-core time of the matmuls (FP16 or INT8 per
    the scheme), the FP16 tensor-core time of attention, and the CUDA-core time
    of W4A16 dequantization, which competes with the matmul for the same SMs.
    ``memory_time`` is bytes over bandwidth; dequantization hides behind it.
    """

    step: StepCost
    gpu: GPU
    compute_time: float
    memory_time: float

    @property
    def time(self) -> float:
        """Lower bound on the step's time, seconds."""
        return max(self.compute_time, self.memory_time)

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"memory"``: the roof the step sits under."""
        return "compute" if self.compute_time >= self.memory_time else "memory"

    @property
    def tokens_per_s(self) -> float:
        """Upper bound on tokens processed per second (decode: tokens generated)."""
        return self.step.tokens / self.time

    @property
    def effective_peak(self) -> float:
        """FLOP/s the step's mix of work would reach at full compute (its own compute roof)."""
        return self.step.flops / self.compute_time

    @property
    def ridge(self) -> float:
        """The ridge point of this step's mix: effective peak over bandwidth (FLOP/byte)."""
        return self.effective_peak / self.gpu.bandwidth

    @property
    def attainable_flops(self) -> float:
        """FLOP/s the roofline allows at the step's intensity: min(peak, intensity x bandwidth)."""
        return self.step.flops / self.time

    def describe(self) -> str:
        s = self.step
        shape = (f"batch {s.batch} x {s.new_tokens} tokens (cached {s.cached_tokens // s.batch})"
                 if s.phase != "mixed" else f"{s.sequences} sequences, {s.tokens} tokens (cached {s.cached_tokens})")
        return (f"{s.phase} {s.model} {s.scheme.name} {shape} "
                f"on {self.gpu.name}: {s.flops / 1e12:,.2f} TFLOP, "
                f"{s.bytes / GB:,.2f} GB, intensity {s.intensity:,.1f} FLOP/B vs ridge {self.ridge:,.1f}; "
                f"compute {self.compute_time * 1e3:,.3f} ms, memory {self.memory_time * 1e3:,.3f} ms "
                f"-> {self.bound}-bound, >= {self.time * 1e3:,.3f} ms, <= {self.tokens_per_s:,.0f} tokens/s")


def bound(step: StepCost, device: GPU | str) -> Bound:
    """The roofline bound of ``step`` on ``device``."""
    if not isinstance(step, StepCost):
        raise TypeError(f"step must be a StepCost (from prefill_step or decode_step), got {type(step).__name__}")
    device = gpu(device)
    compute = _compute_time(device, step.scheme, step.matmul_flops, step.attention_flops, step.dequant_flops)
    return Bound(step=step, gpu=device, compute_time=compute, memory_time=step.bytes / device.bandwidth)


def decode_crossover_batch(model: ModelSpec | str, device: GPU | str, context_len: int,
                           weights: Scheme | str = "W16A16", kv_dtype: str = "fp16") -> int | None:
    """Smallest decode batch that is compute-bound (``None`` if no batch ever is).

    Per step, compute time grows by ``a`` per sequence (plus ``D`` per tile of
    dequantization), memory time by ``m`` per sequence (its KV cache) on top of
    a fixed ``W`` (the weights).  The crossover is where ``B·a + tiles·D >= W + B·m``.
    If ``a + D/tile <= m`` a sequence's own KV reads cost more than its FLOPs and
    more batch never helps: decode stays memory-bound at any batch.
    """
    device = gpu(device)
    recipe = scheme(weights)
    one = bound(decode_step(model, 1, context_len, recipe, kv_dtype), device)
    s = one.step
    peak = device.peak(recipe.matmul_precision)
    a = s.matmul_flops / peak + s.attention_flops / device.peak("fp16")
    tile_time = s.dequant_flops / device.peak("fp32")
    m = (s.kv_read_bytes + s.kv_write_bytes) / device.bandwidth
    w = s.weight_bytes / device.bandwidth
    tile = recipe.dequant_tile_tokens

    def compute_bound(b: int) -> bool:
        return b * a + math.ceil(b / tile) * tile_time >= w + b * m

    slope = a - m + tile_time / tile
    if slope <= 0:
        # f(b) = compute - memory then peaks at b = 1 (each further tile of sequences costs more than it adds).
        return 1 if compute_bound(1) else None
    # ceil(b/tile) lies in [b/tile, b/tile + 1), so f(b) < 0 for every b < (w - D) / slope: start the scan
    # just below that (one step of margin for rounding) and stop at the first compute-bound batch.
    b = max(1, math.floor((w - tile_time) / slope) - 1)
    while not compute_bound(b):
        b += 1
    return b


def decode_time(model: ModelSpec | str, device: GPU | str, batch: int, context_len: int, steps: int,
                weights: Scheme | str = "W16A16", kv_dtype: str = "fp16") -> float:
    """Lower bound on the time of ``steps`` decode steps, the first at ``context_len`` cached tokens.

    The sum of :func:`bound` over contexts ``context_len .. context_len + steps - 1``.
    Both sides of the roofline grow linearly with the context (attention FLOPs,
    KV bytes read), so the sum is summed in closed form, split where the
    two lines cross, rather than step by step.
    """
    steps = whole("steps", steps, 0)
    if steps == 0:
        return 0.0
    device = gpu(device)
    first = bound(decode_step(model, batch, context_len, weights, kv_dtype), device)
    second = bound(decode_step(model, batch, context_len + 1, weights, kv_dtype), device)
    c0, c_slope = first.compute_time, second.compute_time - first.compute_time
    m0, m_slope = first.memory_time, second.memory_time - first.memory_time

    def line_sum(start: float, slope: float, lo: int, hi: int) -> float:
        """sum of start + slope * j for j in [lo, hi)."""
        n = hi - lo
        return n * start + slope * (lo + hi - 1) * n / 2

    # Index j (0-based step) from which memory >= compute, if the lines cross inside [0, steps).
    gap0, gap_slope = m0 - c0, m_slope - c_slope
    if gap_slope == 0:
        split = 0 if gap0 >= 0 else steps
    else:
        root = -gap0 / gap_slope
        split = min(steps, max(0, math.ceil(root))) if gap_slope > 0 else min(steps, max(0, math.floor(root) + 1))
    if gap_slope > 0:  # compute wins before the crossing, memory after
        return line_sum(c0, c_slope, 0, split) + line_sum(m0, m_slope, split, steps)
    if gap_slope < 0:  # memory wins before the crossing, compute after
        return line_sum(m0, m_slope, 0, split) + line_sum(c0, c_slope, split, steps)
    return line_sum(m0, m_slope, 0, steps) if gap0 >= 0 else line_sum(c0, c_slope, 0, steps)


def scheme_bounds(model: ModelSpec | str, device: GPU | str, step: str, batch: int, tokens: int,
                  kv_dtype: str = "fp16") -> list[Bound]:
    """The same step under W16A16, W8A8 and W4A16: how each scheme moves each bound.

    ``step`` is ``"prefill"`` (``tokens`` = prompt length) or ``"decode"``
    (``tokens`` = context length).
    """
    make = prefill_step if choice("step", step, ("prefill", "decode")) == "prefill" else decode_step
    return [bound(make(model, batch, tokens, name, kv_dtype), device) for name in SCHEMES]


def gpu_table(precisions: tuple[str, ...] = ("fp16", "int8")) -> list[dict[str, object]]:
    """The GPU table as rows of display values (decimal units, as datasheets print them)."""
    rows = []
    for g in GPUS.values():
        row: dict[str, object] = {
            "GPU": g.name,
            "memory (datasheet)": g.memory_label,
            "memory (nvidia-smi, GiB)": round(g.memory / 1024**3, 1),
            "bandwidth (GB/s)": round(g.bandwidth / GB),
            "FP16 dense (TFLOP/s)": g.fp16_flops / 1e12,
            "INT8 dense (TOP/s)": g.int8_ops / 1e12,
            # The A100's datasheet prints both rates; the table keeps its dense one.
            "datasheet figure used": "sparse, halved" if g.fp16.sparse else "dense",
        }
        for p in precisions:
            row[f"ridge {p.upper()} (FLOP/B)"] = round(ridge_point(g, p), 1)
        row["source"] = g.source
        rows.append(row)
    return rows
