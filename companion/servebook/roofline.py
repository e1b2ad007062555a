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

from . import memory, models
from .checks import lookup, whole
from .models import ModelSpec
from .units import GB, MiB

# ---------------------------------------------------------------------------
# GPUs: datasheet numbers, with their sources.


@dataclass(frozen=True)
class Quoted:
    """A peak rate exactly as a datasheet prints it, and whether that print assumes 2:4 sparsity.

    NVIDIA's Ampere, Hopper and Ada datasheets print tensor-core rates "with
    sparsity" (a 2:4 structured-sparse matrix), twice the dense rate a serving
    engine gets from a dense model.  :attr:`dense` undoes that.
    """

    value: float  # in the datasheet's unit (TFLOPS or TOPS) as printed
    sparse: bool  # True where the printed figure is the sparse one (marked * on the datasheet)

    @property
    def dense(self) -> float:
        """The dense rate in operations per second."""
        return self.value * 1e12 / (2 if self.sparse else 1)


@dataclass(frozen=True)
class GPU:
    """One GPU's memory and peak rates, from its datasheet.

    ``memory`` is what ``nvidia-smi`` reports as the card's total (bytes): the
    datasheet's capacity label is given in ``memory_label`` as printed, and the
    two differ (the A100's "80GB" is 81,920 MiB = 80 GiB).  ``bandwidth`` is
    in bytes per second (datasheets print decimal GB/s and TB/s).
    """

    name: str
    memory: int
    memory_label: str
    bandwidth: int
    fp16: Quoted       # FP16/BF16 tensor core
    int8: Quoted       # INT8 tensor core
    fp32_tflops: float  # non-tensor FP32 (CUDA cores): where W4A16 dequantizes
    source: str        # references.bib key of the datasheet
    url: str
    notes: str = ""

    @property
    def fp16_flops(self) -> float:
        """Dense FP16/BF16 tensor-core peak, FLOP/s."""
        return self.fp16.dense

    @property
    def int8_ops(self) -> float:
        """Dense INT8 tensor-core peak, OP/s."""
        return self.int8.dense

    @property
    def fp32_flops(self) -> float:
        """Non-tensor FP32 peak, FLOP/s."""
        return self.fp32_tflops * 1e12

    def peak(self, precision: str = "fp16") -> float:
        """Dense peak of the ``"fp16"`` or ``"int8"`` tensor cores, or the ``"fp32"`` CUDA cores."""
        rates = {"fp16": self.fp16_flops, "bf16": self.fp16_flops, "int8": self.int8_ops, "fp32": self.fp32_flops}
        if precision not in rates:
            raise ValueError(f"precision must be one of {', '.join(rates)}, got {precision!r}")
        return rates[precision]


_SPARSE_NOTE = "The datasheet prints tensor-core rates with sparsity (*); dense is half."

GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in [
        GPU("a100-80gb-sxm", memory=81_920 * MiB, memory_label="80GB HBM2e", bandwidth=2_039 * GB,
            fp16=Quoted(312, sparse=False), int8=Quoted(624, sparse=False), fp32_tflops=19.5,
            source="nvidiaa100",
            url="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            notes="SXM column. The datasheet prints dense and sparse side by side: FP16 312 | 624*, "
                  "INT8 624 | 1,248* TOPS. The PCIe 80GB card has 1,935 GB/s."),
        GPU("h100-sxm", memory=81_559 * MiB, memory_label="80GB HBM3", bandwidth=3_350 * GB,
            fp16=Quoted(1_979, sparse=True), int8=Quoted(3_958, sparse=True), fp32_tflops=67,
            source="nvidiah100", url="https://www.nvidia.com/en-us/data-center/h100/",
            notes="SXM column. " + _SPARSE_NOTE + " FP16/BF16 1,979* -> 989.5 dense "
                  "(the Hopper whitepaper lists 989.4); INT8 3,958* -> 1,979 dense."),
        GPU("h200", memory=143_771 * MiB, memory_label="141GB HBM3e", bandwidth=4_800 * GB,
            fp16=Quoted(1_979, sparse=True), int8=Quoted(3_958, sparse=True), fp32_tflops=67,
            source="nvidiah200", url="https://www.nvidia.com/en-us/data-center/h200/",
            notes="SXM column: the H100's compute with more, faster memory. " + _SPARSE_NOTE),
        GPU("l4", memory=23_034 * MiB, memory_label="24GB GDDR6", bandwidth=300 * GB,
            fp16=Quoted(242, sparse=True), int8=Quoted(485, sparse=True), fp32_tflops=30.3,
            source="nvidial4", url="https://www.nvidia.com/en-us/data-center/l4/",
            notes=_SPARSE_NOTE + " FP16 242* -> 121 dense; INT8 485* -> 242.5 dense."),
        GPU("t4", memory=15_360 * MiB, memory_label="16GB GDDR6", bandwidth=320 * GB,
            fp16=Quoted(65, sparse=False), int8=Quoted(130, sparse=False), fp32_tflops=8.1,
            source="nvidiat4", url="https://www.nvidia.com/en-us/data-center/tesla-t4/",
            notes="Turing has no sparse tensor cores: the datasheet's figures are dense. "
                  "FP16 is 'mixed precision (FP16/FP32)'; bandwidth is printed as '320+ GB/s'."),
    ]
}
"""The GPU table.  ``memory`` is the total ``nvidia-smi`` reports (public logs: A100-SXM4-80GB
81,920 MiB; H100 80GB HBM3 81,559 MiB; H200 143,771 MiB; L4 23,034 MiB; T4 15,360 MiB)."""


def gpu(name: GPU | str) -> GPU:
    """Look a GPU up by name (case-insensitive); an unknown name lists the known ones."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu must be a GPU or a name such as 'a100-80gb-sxm', got {type(name).__name__}")
    return lookup("GPU", name, GPUS)


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
# What one step does.


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


@dataclass(frozen=True)
class StepCost:
    """The work of one step over a batch: FLOPs by kind and bytes by kind."""

    phase: str            # "prefill" or "decode"
    model: str
    scheme: Scheme
    batch: int            # sequences in the step
    new_tokens: int       # tokens each sequence adds in this step (prompt length, or 1)
    cached_tokens: int    # tokens each sequence already had in its KV cache
    matmul_flops: int
    attention_flops: int
    dequant_flops: int
    weight_bytes: int
    kv_read_bytes: int
    kv_write_bytes: int

    @property
    def tokens(self) -> int:
        """Tokens the step processes: batch x new tokens."""
        return self.batch * self.new_tokens

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


def _step(phase: str, model, batch: int, new_tokens: int, cached_tokens: int,
          weights: Scheme | str, kv_dtype: str) -> StepCost:
    spec = models.resolve(model)
    recipe = scheme(weights)
    n_matmul = matmul_params(spec)
    kv_per_token = memory.kv_bytes_per_token(spec, kv_dtype)
    q_dim = spec.n_heads * spec.head_dim
    # Causal attention: the i-th new token (1-based) attends to the cached tokens and to i new ones.
    positions = new_tokens * cached_tokens + new_tokens * (new_tokens + 1) // 2
    tokens = batch * new_tokens
    tiles = math.ceil(tokens / recipe.dequant_tile_tokens)
    return StepCost(
        phase=phase, model=spec.name, scheme=recipe, batch=batch, new_tokens=new_tokens,
        cached_tokens=cached_tokens,
        matmul_flops=2 * n_matmul * tokens,
        attention_flops=4 * spec.n_layers * q_dim * positions * batch,
        dequant_flops=recipe.dequant_flops_per_weight * n_matmul * tiles,
        weight_bytes=recipe.weight_bytes(n_matmul),
        kv_read_bytes=kv_per_token * cached_tokens * batch,
        kv_write_bytes=kv_per_token * tokens,
    )


def prefill_step(model: ModelSpec | str, batch: int, prompt_len: int, weights: Scheme | str = "W16A16",
                 kv_dtype: str = "fp16", cached_tokens: int = 0) -> StepCost:
    """One prefill step: ``batch`` prompts of ``prompt_len`` tokens go through the model at once.

    ``cached_tokens`` is a prefix already in the KV cache (prefix caching, or a
    later chunk of a chunked prefill); it is read, not recomputed.
    """
    batch = whole("batch", batch, 1)
    prompt_len = whole("prompt_len", prompt_len, 1)
    cached_tokens = whole("cached_tokens", cached_tokens, 0)
    return _step("prefill", model, batch, prompt_len, cached_tokens, weights, kv_dtype)


def decode_step(model: ModelSpec | str, batch: int, context_len: int, weights: Scheme | str = "W16A16",
                kv_dtype: str = "fp16") -> StepCost:
    """One decode step: each of ``batch`` sequences with ``context_len`` cached tokens adds one token."""
    batch = whole("batch", batch, 1)
    context_len = whole("context_len", context_len, 0)
    return _step("decode", model, batch, 1, context_len, weights, kv_dtype)


# ---------------------------------------------------------------------------
# Bounds.


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
        return (f"{s.phase} {s.model} {s.scheme.name} batch {s.batch} x {s.new_tokens} tokens "
                f"(cached {s.cached_tokens}) on {self.gpu.name}: {s.flops / 1e12:,.2f} TFLOP, "
                f"{s.bytes / GB:,.2f} GB, intensity {s.intensity:,.1f} FLOP/B vs ridge {self.ridge:,.1f}; "
                f"compute {self.compute_time * 1e3:,.3f} ms, memory {self.memory_time * 1e3:,.3f} ms "
                f"-> {self.bound}-bound, >= {self.time * 1e3:,.3f} ms, <= {self.tokens_per_s:,.0f} tokens/s")


def bound(step: StepCost, device: GPU | str) -> Bound:
    """The roofline bound of ``step`` on ``device``."""
    if not isinstance(step, StepCost):
        raise TypeError(f"step must be a StepCost (from prefill_step or decode_step), got {type(step).__name__}")
    device = gpu(device)
    compute = (step.matmul_flops / device.peak(step.scheme.matmul_precision)
               + step.attention_flops / device.peak("fp16")
               + step.dequant_flops / device.peak("fp32"))
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
    if step not in ("prefill", "decode"):
        raise ValueError(f"step must be 'prefill' or 'decode', got {step!r}")
    make = prefill_step if step == "prefill" else decode_step
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
