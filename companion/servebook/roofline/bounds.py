"""Bounds: which roof a step sits under on a GPU, decode's crossover batch, the time of many decode steps."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import gpus, models
from ..checks import choice, whole
from ..gpus import GPU, GPUS
from ..models import CHUNKED, SLIDING, ModelSpec
from ..units import GB
from .schemes import SCHEMES, Scheme, compute_time, runs_on, scheme
from .step import StepCost, StepModel, StepShape, decode_step, prefill_step

gpu = gpus.get


def ridge_point(device: GPU | str, precision: str = "fp16") -> float:
    """Peak FLOP/s over bandwidth: the intensity (FLOP/byte) above which a step is compute-bound."""
    device = gpu(device)
    return device.peak(precision) / device.bandwidth





@dataclass(frozen=True)
class Bound:
    """The roofline bound of a step on a GPU.

    ``compute_time`` adds the tensor-core time of the matmuls (FP16 or INT8 per
    the scheme), the FP16 tensor-core time of attention, and the CUDA-core time
    of W4A16 dequantization, which competes with the matmul for the same SMs.
    ``memory_time`` is bytes over bandwidth; dequantization hides behind it.
    ``communication_time`` is the step's time on the link between GPUs
    (:meth:`StepShape.communication_time`, 0 on one GPU), added to the roofline.
    """

    step: StepCost
    gpu: GPU
    compute_time: float
    memory_time: float

    @property
    def communication_time(self) -> float:
        """Seconds on the link between GPUs (0 on one GPU)."""
        return self.step.communication_time

    @property
    def time(self) -> float:
        """Lower bound on the step's time, seconds."""
        return max(self.compute_time, self.memory_time) + self.step.communication_time

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
        link = f", link {self.communication_time * 1e3:,.3f} ms" if self.communication_time else ""
        return (f"{s.phase} {s.model} {s.scheme.name} {shape} "
                f"on {self.gpu.name}: {s.flops / 1e12:,.2f} TFLOP, "
                f"{s.bytes / GB:,.2f} GB, intensity {s.intensity:,.1f} FLOP/B vs ridge {self.ridge:,.1f}; "
                f"compute {self.compute_time * 1e3:,.3f} ms, memory {self.memory_time * 1e3:,.3f} ms{link} "
                f"-> {self.bound}-bound, >= {self.time * 1e3:,.3f} ms, <= {self.tokens_per_s:,.0f} tokens/s")


def bound(step: StepCost, device: GPU | str) -> Bound:
    """The roofline bound of ``step`` on ``device``."""
    if not isinstance(step, StepCost):
        raise TypeError(f"step must be a StepCost (from prefill_step or decode_step), got {type(step).__name__}")
    device = gpu(device)
    compute = compute_time(device, step.scheme, step.matmul_flops, step.attention_flops, step.dequant_flops)
    return Bound(step=step, gpu=device, compute_time=compute, memory_time=step.bytes / device.bandwidth)


def decode_crossover_batch(model: ModelSpec | str, device: GPU | str, context_len: int,
                           weights: Scheme | str = "W16A16", kv_dtype: str = "fp16") -> int | None:
    """Smallest decode batch that is compute-bound (``None`` if no batch ever is).

    Per step, compute time grows by ``a`` per sequence (plus ``D`` per tile of
    dequantization), memory time by ``m`` per sequence (its KV cache) on top of
    a fixed ``W`` (the weights).  The crossover is where ``B·a + tiles·D >= W + B·m``.
    If ``a + D/tile <= m`` a sequence's own KV reads cost more than its FLOPs and
    more batch never helps: decode stays memory-bound at any batch.  A mixture
    of experts reads more experts as the batch grows (:func:`_moe_crossover`).
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
    step_model = StepModel(model, recipe, kv_dtype)
    if step_model.spec.moe is not None:
        return _moe_crossover(step_model, device, a, m)

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


def _moe_crossover(step_model: StepModel, device: GPU, a: float, m: float) -> int | None:
    """The crossover of a mixture of experts, whose step reads W(B): more experts as the batch B grows.

    Up to the batch at which every expert is read (under uniform routing,
    once (1 - k/E)^B < 1 / routed parameters) each batch is tried; past it the
    model reads all its weights and the dense case's reasoning applies.
    """
    recipe, bandwidth = step_model.scheme, device.bandwidth
    tile, per_weight = recipe.dequant_tile_tokens, recipe.dequant_flops_per_weight / device.peak("fp32")

    def gap(b: int) -> float:
        compute = b * a + math.ceil(b / tile) * per_weight * step_model.params_read(b)
        return compute - (step_model.weight_bytes_read(b) / bandwidth + b * m)

    moe = step_model.spec.moe
    miss = 1 - moe.top_k / moe.n_experts
    routed = step_model.n_matmul - step_model.params_read(0)
    every = 1 if miss == 0 else math.ceil(math.log(routed) / -math.log(miss)) + 2
    found = next((b for b in range(1, every + 1) if gap(b) >= 0), None)
    if found is not None:
        return found
    w, d = step_model.weight_bytes / bandwidth, per_weight * step_model.n_matmul
    slope = a - m + d / tile
    if slope <= 0:  # compute - memory then only falls, tile after tile: one more tile can still cross
        return next((b for b in range(every + 1, every + tile + 1) if gap(b) >= 0), None)
    b = max(every + 1, math.floor((w - d) / slope) - 1)
    while gap(b) < 0:
        b += 1
    return b


def decode_time(model: ModelSpec | str, device: GPU | str, batch: int, context_len: int, steps: int,
                weights: Scheme | str = "W16A16", kv_dtype: str = "fp16", shape: StepShape | None = None) -> float:
    """Lower bound on the time of ``steps`` decode steps, the first at ``context_len`` cached tokens.

    The sum of :func:`bound` over contexts ``context_len .. context_len + steps - 1``.
    Both sides of the roofline grow linearly with the context (attention FLOPs,
    KV bytes read), so the sum is summed in closed form, split where the
    two lines cross, rather than step by step.  A sliding-window layer stops
    growing once the context fills its window, and a chunked layer starts over
    at each chunk: the contexts are cut into runs where both sides are linear.
    ``shape`` is one GPU's share of a parallel layout; its link time, the same
    at every context, is added once per step.
    """
    steps = whole("steps", steps, 0)
    if steps == 0:
        return 0.0
    device = gpu(device)
    spec = models.resolve(model)
    context_len = whole("context_len", context_len, 0)
    return sum(_linear_decode_time(spec, device, batch, start, count, weights, kv_dtype, shape)
               for start, count in _linear_runs(spec, context_len, steps))


def _linear_runs(spec: ModelSpec, context_len: int, steps: int) -> list[tuple[int, int]]:
    """(first context, steps) runs over which a decode step's cost is linear in the context."""
    cuts: list[int] | range = []
    if spec.local_kind == SLIDING:
        cuts = [spec.sliding_window - 1]  # from here a sliding layer reads W - 1 cached tokens, always
    elif spec.local_kind == CHUNKED:
        chunk = spec.attention_chunk
        cuts = range((context_len // chunk + 1) * chunk, context_len + steps, chunk)
    edges = [context_len, *(c for c in cuts if context_len < c < context_len + steps), context_len + steps]
    return [(lo, hi - lo) for lo, hi in zip(edges, edges[1:], strict=False)]


def _linear_decode_time(spec: ModelSpec, device: GPU, batch: int, context_len: int, steps: int,
                        weights: Scheme | str, kv_dtype: str, shape: StepShape | None = None) -> float:
    """decode_time over contexts where compute and memory time are both linear in the context."""
    first = bound(decode_step(spec, batch, context_len, weights, kv_dtype, shape), device)
    second = bound(decode_step(spec, batch, context_len + 1, weights, kv_dtype, shape), device)
    return _roofline_sum(first, second, steps) + steps * first.communication_time


def _roofline_sum(first: Bound, second: Bound, steps: int) -> float:
    """Sum over ``steps`` steps of max(compute, memory), both lines through the first two steps' bounds."""
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
    """The same step under every scheme ``device`` can run (:data:`SCHEMES`: W8A8-FP8 only on GPUs with FP8
    tensor cores): how each scheme moves each bound.

    ``step`` is ``"prefill"`` (``tokens`` = prompt length) or ``"decode"``
    (``tokens`` = context length).
    """
    make = prefill_step if choice("step", step, ("prefill", "decode")) == "prefill" else decode_step
    device = gpu(device)
    return [bound(make(model, batch, tokens, recipe, kv_dtype), device)
            for recipe in SCHEMES.values() if runs_on(device, recipe)]


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


def weight_scheme_speedup(model: ModelSpec | str, device: GPU | str, tokens: int, weights: str) -> float:
    """Bound of a ``tokens``-token step with FP16 weights over its bound with ``weights``.

    The step is ``tokens`` one-token sequences: the matmuls of a ``tokens``-token
    step, without an attention term that grows with ``tokens``², and without a
    KV cache to read, so only the weights tell the schemes apart.
    """
    def step_time(weight_scheme: str) -> float:
        return bound(prefill_step(model, tokens, 1, weight_scheme), device).time

    return step_time("W16A16") / step_time(weights)
