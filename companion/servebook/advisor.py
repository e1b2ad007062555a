"""Choosing the lever: which wall a workload hits, and what each technique buys against it.

Give a model, a GPU and a :class:`Workload`; :func:`advise` answers in two steps,
the way the chapter on choosing the lever teaches:

1. **Which wall?**  Memory capacity first (does the batch fit, and which bucket,
   weights or KV cache, fills the GPU; how much of each KV reservation is never
   used), then time (which phase, prefill or decode, takes the time at the batch
   asked for, and whether it is compute- or memory-bound on the roofline).
2. **Which lever?**  Each of PagedAttention, continuous batching, W4A16 and W8A8
   is applied alone to the baseline server, and the workload is served again
   on paper: requests that fit at once, generated tokens per second, and mean
   latency per request.  The levers are ranked by the workload's goal.
   With ``levers=ALL_LEVERS`` two more are weighed, each costing GPUs: a
   second GPU splitting the model (tensor parallelism, :mod:`servebook.parallel`)
   and a second replica of the server; ``goal="throughput per GPU"`` ranks by
   what each GPU delivers.

How a workload is served on paper: requests run in *waves* of as many as fit
at once, capped at the scheduler's ``max_num_seqs`` (vLLM 0.33.0's default for
the GPU unless the workload sets it); the rest wait for the next wave.  A wave
is its prefill, whole prompts packed into steps of at most
``max_num_batched_tokens`` tokens (a longer prompt in chunks), then one decode
step per further output token; each step takes its roofline time
(:mod:`servebook.roofline`), a lower bound.  Latency is reported as the mean
time to first token (the waves before, then the wave's prefill) and to the
last token.  A static batch
runs until its longest output is done; continuous batching refills a finished
request's slot at once, modelled as every request taking its mean output length.

Weight bytes count every parameter at the scheme's width, the embedding table
and the LM head included.  Real W4A16 and W8A8 checkpoints usually keep those
two in FP16, so the quantized levers' weights are a little understated (a few
GiB for a 70B model with a 128k vocabulary); the ranking is what to trust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from . import batching, memory, models, paging, parallel, roofline, text
from .checks import byte_count, choice, names, whole
from .models import ModelSpec
from .units import GiB, MiB, canonical_dtype, ceil_div

GOALS = ("throughput", "latency", "throughput per GPU")
BATCHING = ("static", "continuous")
LEVERS = ("PagedAttention", "continuous batching", "W4A16", "W8A8")
PARALLEL_LEVERS = ("add a GPU (TP 2)", "a second replica")
"""Levers that cost GPUs: split the model over twice the GPUs, or run the server twice."""
ALL_LEVERS = LEVERS + PARALLEL_LEVERS


@dataclass(frozen=True)
class Workload:
    """What the service must do, and how the baseline server does it.

    prompt_len, output_len: tokens in and out per request (means).
    batch: requests the service wants in flight together; ``None`` = as many as fit.
    max_len: KV slots the server reserves per request up front (a naive, contiguous
        allocator); ``None`` = the server already allocates paged blocks.
    goal: ``"throughput"`` (generated tokens/s) or ``"latency"`` (mean time per request).
    output_len_max: the longest output in a batch; a static batch runs until it is
        done.  ``None`` = every output has ``output_len`` tokens.
    batching: ``"static"`` or ``"continuous"`` (the baseline server's).
    weights: a scheme of :data:`servebook.roofline.SCHEMES` (the baseline server's): ``"W16A16"``,
        ``"W8A8"``, ``"W8A8-FP8"`` (GPUs with FP8 tensor cores) or ``"W4A16"``.
    kv_dtype: the KV cache's dtype.  overhead: bytes reserved for activations,
        CUDA context and fragmentation (on every GPU).  block_size: tokens per KV block when paged.
    tensor_parallel: GPUs one replica splits the model over, its weights and KV
        cache counted per GPU as vLLM shards them (:mod:`servebook.parallel`);
        ``None`` = one GPU and the model's parameter count, the first edition's way.
    replicas: copies of the server, each serving its share of the requests.
    max_num_seqs, max_num_batched_tokens: the scheduler's caps on the requests that run
        together and on the tokens of one step; ``None`` = vLLM 0.33.0's server defaults
        for the GPU (:func:`servebook.batching.vllm_limits`: 256 and 2,048 on an A100,
        1,024 and 8,192 on an H100 or H200).
    """

    prompt_len: int
    output_len: int
    batch: int | None = None
    max_len: int | None = None
    goal: str = "throughput"
    output_len_max: int | None = None
    batching: str = "static"
    weights: str = "W16A16"
    kv_dtype: str = "fp16"
    overhead: int = 4 * GiB
    block_size: int = 16
    tensor_parallel: int | None = None
    replicas: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None

    def __post_init__(self) -> None:
        whole("prompt_len", self.prompt_len, 1)
        whole("output_len", self.output_len, 1)
        if self.batch is not None:
            whole("batch", self.batch, 1)
        if self.output_len_max is not None:
            whole("output_len_max", self.output_len_max, self.output_len)
        if self.max_len is not None:
            whole("max_len", self.max_len, 1)
            longest = self.prompt_len + (self.output_len_max or self.output_len)
            if longest > self.max_len:
                raise ValueError(f"max_len ({self.max_len}) is shorter than a request "
                                 f"(prompt {self.prompt_len} + output {longest - self.prompt_len} tokens)")
        choice("goal", self.goal, GOALS)
        choice("batching", self.batching, BATCHING)
        roofline.scheme(self.weights)
        canonical_dtype(self.kv_dtype)
        object.__setattr__(self, "overhead", byte_count("overhead", self.overhead))
        whole("block_size", self.block_size, 1)
        if self.tensor_parallel is not None:
            whole("tensor_parallel", self.tensor_parallel, 1)
        whole("replicas", self.replicas, 1)
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) is not None:
                whole(name, getattr(self, name), 1)

    @property
    def gpus(self) -> int:
        """GPUs the service uses: tensor-parallel size times replicas."""
        return (self.tensor_parallel or 1) * self.replicas

    @property
    def tokens(self) -> int:
        """Tokens one request leaves in the KV cache (mean): prompt + output."""
        return self.prompt_len + self.output_len

    @property
    def paged(self) -> bool:
        return self.max_len is None


@dataclass(frozen=True)
class Served:
    """One server configuration serving the workload, on paper."""

    label: str
    change: str              # what the lever changes, in words
    weights: int             # bytes of weights
    kv_pool: int             # bytes left for the KV cache (negative: the weights do not fit)
    reserved_per_request: int
    used_per_request: int
    fits: int                # requests whose KV cache fits at once
    requests: int            # requests served
    wave: int                # requests per wave
    prefill_s: float         # one full wave's prefill step
    decode_s: float          # one full wave's decode steps
    makespan_s: float        # all waves
    mean_latency_s: float
    throughput: float        # generated tokens per second
    prefill_bound: str
    decode_bound: str
    gpus: int = 1            # GPUs the configuration uses
    ttft_s: float = float("nan")   # mean time to first token: the waves before, then the wave's prefill
    tpot_s: float = float("nan")   # time per output token after the first: a decode step

    @property
    def throughput_per_gpu(self) -> float:
        return self.throughput / self.gpus

    @property
    def fit_fraction(self) -> float:
        return min(self.fits, self.requests) / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class LeverResult:
    """What one lever buys over the baseline."""

    lever: str
    served: Served
    throughput_gain: float   # x baseline generated tokens/s
    latency_gain: float      # baseline mean latency / this mean latency (> 1 is faster)
    fits_gain: float         # x requests that fit at once
    note: str

    per_gpu_gain: float = 1.0  # x baseline generated tokens/s per GPU

    def gain(self, goal: str) -> float:
        return {"throughput": self.throughput_gain, "latency": self.latency_gain,
                "throughput per GPU": self.per_gpu_gain}[goal]


@dataclass(frozen=True)
class Advice:
    """The diagnosis of a workload and the ranking of the levers, with the numbers behind both."""

    model: str
    gpu: str
    workload: Workload
    baseline: Served
    ranking: tuple[LeverResult, ...]
    dominant: str                 # the wall, in one line
    diagnosis: tuple[str, ...]    # the wall's numbers: memory first, then time
    numbers: dict[str, float] = field(default_factory=dict)

    @property
    def best(self) -> LeverResult:
        return self.ranking[0]

    def lever(self, name: str) -> LeverResult:
        for result in self.ranking:
            if result.lever == name:
                return result
        raise ValueError(f"unknown lever {name!r}; levers: {', '.join(r.lever for r in self.ranking)}")

    def rows(self) -> list[dict[str, object]]:
        """The ranking as table rows (baseline first), for display."""
        goal = self.workload.goal

        def row(rank, name, s: Served, gain, note):
            return {"rank": rank, "lever": name, "fits at once": s.fits,
                    "weights (GiB)": round(s.weights / GiB, 1),
                    "KV/request (MiB)": round(s.reserved_per_request / MiB, 1),
                    "tokens/s": round(s.throughput), "mean latency (s)": round(s.mean_latency_s, 2),
                    "TTFT (s)": round(s.ttft_s, 2),
                    f"x {goal}": round(gain, 2), "what it buys": note}

        rows = [row("", "baseline", self.baseline, 1.0, self.baseline.change)]
        rows += [row(i, r.lever, r.served, r.gain(goal), r.note) for i, r in enumerate(self.ranking, 1)]
        if any(r.served.gpus > 1 for r in self.ranking) or self.baseline.gpus > 1:  # levers that cost GPUs
            served = [self.baseline] + [r.served for r in self.ranking]
            for r, s in zip(rows, served, strict=True):
                r["GPUs"], r["tokens/s per GPU"] = s.gpus, round(s.throughput_per_gpu)
                r["what it buys"] = r.pop("what it buys")
        return rows

    def table(self) -> str:
        """The ranking in 75 columns: what each lever serves, its latency and its gain on the goal."""
        shown = {"rank": "rank", "lever": "lever", "fits at once": "fits", "tokens/s": "tok/s",
                 "mean latency (s)": "latency s", "TTFT (s)": "TTFT s", f"x {self.workload.goal}": "gain",
                 "GPUs": "GPUs"}
        return text.table([{label: row[key] for key, label in shown.items() if key in row} for row in self.rows()])

    def notes(self) -> list[str]:
        """What each lever changes, a wrapped line or two per lever."""
        return [line for row in self.rows() for line in text.wrap(f"{row['lever']}: {row['what it buys']}",
                                                                  first="  ", later="    ")]

    def __str__(self) -> str:
        w = self.workload
        head = (f"{models.display_name(self.model)} on {roofline.gpu(self.gpu).display_name}: prompt "
                f"{w.prompt_len}, output {w.output_len}, batch "
                f"{w.batch if w.batch is not None else 'as many as fit'}, "
                f"{'paged' if w.paged else f'reserve {w.max_len}'}, {w.batching} batching, {w.weights}, "
                f"goal: {w.goal}")
        lines = [*text.wrap(head), *text.wrap(f"Dominant wall: {self.dominant}")]
        lines += [line for d in self.diagnosis for line in text.wrap(d, first="  - ", later="    ")]
        return "\n".join([*lines, "", self.table(), "", "what each lever changes:", *self.notes()])


# ---------------------------------------------------------------------------
# Serving a workload on paper.


def _decode_steps(w: Workload) -> int:
    """Decode steps of a wave: its longest output in a static batch, the mean with continuous batching."""
    longest = w.output_len if w.batching == "continuous" else (w.output_len_max or w.output_len)
    return longest - 1  # the prefill step already produced each request's first token


def _shape(spec: ModelSpec, device: roofline.GPU, w: Workload) -> roofline.StepShape | None:
    """One GPU's share of a step under the workload's tensor parallelism (``None``: the whole model on one GPU)."""
    if w.tensor_parallel is None:
        return None
    return parallel.step_shape(spec, parallel.Layout(w.tensor_parallel), device, kv_dtype=w.kv_dtype)


def _sizes(spec: ModelSpec, w: Workload, slots: int) -> tuple[int, int, int]:
    """Bytes on one GPU of the weights, of a request's reserved KV cache (``slots`` tokens) and of its used one."""
    recipe = roofline.scheme(w.weights)
    if w.tensor_parallel is None:
        return (recipe.weight_bytes(spec.n_params), memory.kv_cache_bytes(spec, seq_len=slots, dtype=w.kv_dtype),
                memory.kv_cache_bytes(spec, seq_len=w.tokens, dtype=w.kv_dtype))
    layout = parallel.Layout(w.tensor_parallel)
    return (recipe.weight_bytes(parallel.params_per_gpu(spec, layout)),
            parallel.kv_cache_bytes_per_gpu(spec, layout, slots, w.kv_dtype),
            parallel.kv_cache_bytes_per_gpu(spec, layout, w.tokens, w.kv_dtype))


def caps(device: roofline.GPU, w: Workload) -> tuple[int, int]:
    """The scheduler's caps for ``w`` on ``device``: (max_num_seqs, max_num_batched_tokens)."""
    limits = batching.vllm_limits(device)
    return (w.max_num_seqs or limits.max_num_seqs, w.max_num_batched_tokens or limits.max_num_batched_tokens)


def _prefill(spec: ModelSpec, device: roofline.GPU, w: Workload, batch: int,
             budget: int) -> tuple[roofline.Bound, float]:
    """A wave's prefill under a token budget per step: the bound of its first step, and its seconds.

    Whole prompts are packed into steps of at most ``budget`` tokens; a prompt
    longer than the budget is computed in chunks, one step each (chunked prefill).
    """
    recipe, shape = roofline.scheme(w.weights), _shape(spec, device, w)

    def step(n: int, tokens: int, cached: int = 0) -> roofline.Bound:
        cost = roofline.prefill_step(spec, n, tokens, recipe, w.kv_dtype, cached_tokens=cached, shape=shape)
        return roofline.bound(cost, device)

    if w.prompt_len <= budget:
        per_step = min(batch, budget // w.prompt_len)
        full, rest = divmod(batch, per_step)
        first = step(per_step, w.prompt_len)
        return first, full * first.time + (step(rest, w.prompt_len).time if rest else 0.0)
    chunks = [step(1, min(budget, w.prompt_len - start), start) for start in range(0, w.prompt_len, budget)]
    return chunks[0], batch * sum(c.time for c in chunks)


def _wave(spec: ModelSpec, device: roofline.GPU, w: Workload,
          batch: int) -> tuple[roofline.Bound, float, float, roofline.Bound]:
    """One wave of ``batch`` requests on one replica: its first prefill step's bound, the prefill's
    and the decode's seconds, and its decode step half-way."""
    recipe, steps, shape = roofline.scheme(w.weights), _decode_steps(w), _shape(spec, device, w)
    prefill, prefill_s = _prefill(spec, device, w, batch, caps(device, w)[1])
    decode_s = roofline.decode_time(spec, device, batch, w.prompt_len, steps, recipe, w.kv_dtype, shape)
    mid = roofline.bound(roofline.decode_step(spec, batch, w.prompt_len + steps // 2, recipe, w.kv_dtype, shape),
                         device)
    return prefill, prefill_s, decode_s, mid


def _serve(spec: ModelSpec, device: roofline.GPU, w: Workload, label: str, change: str) -> Served:
    slots = paging.paged_slots(w.tokens, w.block_size) if w.paged else w.max_len
    weights, reserved, used = _sizes(spec, w, slots)
    kv_pool = device.memory - weights - w.overhead
    fits = 0 if kv_pool < 0 else memory.capacity_plan(device.memory, weights, reserved, w.overhead).requests
    fits *= w.replicas  # each replica holds its own requests
    requests = w.batch if w.batch is not None else fits
    if fits == 0 or requests == 0:
        nan = float("nan")
        return Served(label, change, weights, kv_pool, reserved, used, fits, requests, 0, nan, nan,
                      math.inf, math.inf, 0.0, "-", "-", w.gpus)
    # A wave is what runs at once: what fits, capped by the scheduler's max_num_seqs on each replica.
    wave = min(fits, requests, caps(device, w)[0] * w.replicas)
    full, rest = divmod(requests, wave)
    prefill, prefill_s, decode_s, mid = _wave(spec, device, w, ceil_div(wave, w.replicas))  # the busiest share
    wave_s = prefill_s + decode_s
    # Waves run one after another; a request's first token ends its wave's prefill, its last the wave.
    latency_sum = wave * sum(wave_s * (k + 1) for k in range(full))
    ttft_sum = wave * sum(wave_s * k + prefill_s for k in range(full))
    makespan = wave_s * full
    if rest:
        _, p, d, _ = _wave(spec, device, w, ceil_div(rest, w.replicas))
        ttft_sum += rest * (makespan + p)
        makespan += p + d
        latency_sum += rest * makespan
    steps = _decode_steps(w)
    return Served(label, change, weights, kv_pool, reserved, used, fits, requests, wave, prefill_s, decode_s,
                  makespan, latency_sum / requests, requests * w.output_len / makespan, prefill.bound, mid.bound,
                  w.gpus, ttft_sum / requests, decode_s / steps if steps else float("nan"))


def _ratio(new: float, old: float) -> float:
    if old == 0:
        return math.inf if new > 0 else 1.0
    if math.isinf(old):
        return 1.0 if math.isinf(new) else math.inf
    return new / old


def _lever_workload(w: Workload, lever: str) -> tuple[Workload, str]:
    """The workload served with one lever pulled, and what that changes."""
    if lever == "PagedAttention":
        if w.paged:
            return w, "already paged"
        return replace(w, max_len=None), f"reserve blocks of {w.block_size} instead of {w.max_len} slots"
    if lever == "continuous batching":
        if w.batching == "continuous":
            return w, "already continuous"
        return replace(w, batching="continuous"), "refill a finished request's slot at once"
    if lever == "add a GPU (TP 2)":
        tensor = 2 * (w.tensor_parallel or 1)
        return replace(w, tensor_parallel=tensor), f"the model split over {tensor} GPUs (tensor parallelism)"
    if lever == "a second replica":
        return replace(w, replicas=2 * w.replicas), f"{2 * w.replicas} replicas, each serving its share"
    if w.weights == lever:
        return w, f"already {lever}"
    return replace(w, weights=lever), f"weights {w.weights} -> {lever}"


def _note(lever: str, base: Served, new: Served, w: Workload) -> str:
    if new.change.startswith("already"):
        return new.change
    if lever in PARALLEL_LEVERS:
        return (f"{base.gpus} -> {new.gpus} GPUs, fits {base.fits} -> {new.fits}; tokens/s per GPU "
                f"{base.throughput_per_gpu:,.0f} -> {new.throughput_per_gpu:,.0f}")
    if lever == "PagedAttention":
        return (f"KV per request {base.reserved_per_request / MiB:,.0f} -> {new.reserved_per_request / MiB:,.0f} MiB;"
                f" fits {base.fits} -> {new.fits}")
    if lever == "continuous batching":
        if not w.output_len_max or w.output_len_max == w.output_len:
            return "outputs all the same length: no idle slots to reclaim"
        return f"static batches idle {1 - w.output_len / w.output_len_max:.0%} of decode slots; reclaims them"
    if new.fits == 0:
        return f"weights {base.weights / GiB:,.1f} -> {new.weights / GiB:,.1f} GiB: still no room for one request"
    change = f"weights {base.weights / GiB:,.1f} -> {new.weights / GiB:,.1f} GiB, fits {base.fits} -> {new.fits}"
    if base.fits == 0:
        return change
    # Per request (a wave's time shared by its requests): what throughput depends on.
    prefill_x = _ratio(base.prefill_s / base.wave, new.prefill_s / new.wave)
    decode_x = _ratio(base.decode_s / base.wave, new.decode_s / new.wave)
    change += f"; per request: prefill x{prefill_x:,.2f}, decode x{decode_x:,.2f} faster"
    if roofline.scheme(lever).dequant_flops_per_weight:  # an assumption of the model, not a measurement
        change += " (dequantizing assumed to add to the tensor cores' time)"
    return change


def advise(model: ModelSpec | str, gpu: roofline.GPU | str, workload: Workload,
           levers: tuple[str, ...] = LEVERS) -> Advice:
    """Diagnose ``workload`` on ``model`` + ``gpu`` and rank ``levers`` (the four the lever chapter compares, or
    :data:`ALL_LEVERS` with the two that cost GPUs) by the workload's goal."""
    spec = models.resolve(model)
    if spec.n_params is None:
        raise ValueError(f"{spec.name}: the advisor needs the model's parameter count (n_params)")
    device = roofline.gpu(gpu)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    if workload.overhead >= device.memory:
        raise ValueError(f"overhead ({workload.overhead / GiB:,.2f} GiB) is not smaller than the GPU's memory "
                         f"({device.memory / GiB:,.2f} GiB on {device.name})")
    base = _serve(spec, device, workload, "baseline",
                  f"{workload.weights}, {'paged' if workload.paged else f'reserve {workload.max_len}'}, "
                  f"{workload.batching} batching")

    results = []
    for lever in names("levers", levers, ALL_LEVERS):
        changed, change = _lever_workload(workload, lever)
        served = _serve(spec, device, changed, lever, change)
        results.append(LeverResult(
            lever=lever, served=served,
            throughput_gain=_ratio(served.throughput, base.throughput),
            latency_gain=_ratio(base.mean_latency_s, served.mean_latency_s),
            fits_gain=_ratio(served.fits, base.fits),
            note=_note(lever, base, served, workload),
            per_gpu_gain=_ratio(served.throughput_per_gpu, base.throughput_per_gpu)))
    # Rank on the goal's own metric, not on the ratio: the ratio is infinite for every lever when
    # the baseline serves nothing at all, and the metric still tells those levers apart.
    if workload.goal == "throughput":
        ranking = sorted(results, key=lambda r: (r.served.throughput, r.served.fits), reverse=True)
    elif workload.goal == "throughput per GPU":
        ranking = sorted(results, key=lambda r: (r.served.throughput_per_gpu, r.served.fits), reverse=True)
    else:
        ranking = sorted(results, key=lambda r: (-r.served.mean_latency_s, r.served.fits), reverse=True)
    ranking = tuple(ranking)

    dominant, diagnosis, numbers = _diagnose(spec, device, workload, base)
    return Advice(model=spec.name, gpu=device.name, workload=workload, baseline=base, ranking=ranking,
                  dominant=dominant, diagnosis=diagnosis, numbers=numbers)


def _diagnose(spec: ModelSpec, device: roofline.GPU, w: Workload, base: Served):
    """Memory wall first, then time wall: the numbers and the one-line verdict."""
    weights_share = base.weights / device.memory
    waste = 1 - base.used_per_request / base.reserved_per_request
    requested = w.batch if w.batch is not None else max(base.fits, 1)
    memory_line = (f"memory: weights {base.weights / GiB:,.1f} GiB ({weights_share:.0%} of "
                   f"{device.memory / GiB:,.1f} GiB) + overhead {w.overhead / GiB:,.1f} GiB "
                   f"leave a KV pool of {base.kv_pool / GiB:,.1f} GiB; "
                   f"each request reserves {base.reserved_per_request / MiB:,.0f} MiB and uses "
                   f"{base.used_per_request / MiB:,.0f} MiB ({waste:.0%} empty): {base.fits} fit at once"
                   + (f", {requested} asked for" if w.batch is not None else ""))

    # Time at the batch the workload asks for, as if it fitted: which phase, which roof.
    pre, pre_s, dec_s, mid = _wave(spec, device, w, requested)
    total = pre_s + dec_s
    prefill_share = pre_s / total
    time_line = (f"time at batch {requested}: prefill {pre_s:,.3g} s ({prefill_share:.0%}, {pre.bound}-bound: "
                 f"{pre.step.intensity:,.0f} FLOP/B vs ridge {pre.ridge:,.0f}), decode {dec_s:,.3g} s "
                 f"({1 - prefill_share:.0%}, {mid.bound}-bound: {mid.step.intensity:,.1f} FLOP/B mid-way)")

    if base.fits < requested:
        if base.kv_pool < 0 or weights_share >= 0.5:
            dominant = (f"memory capacity: the weights ({weights_share:.0%} of the GPU) leave room for "
                        f"{base.fits} of {requested} requests")
        elif waste >= 0.5:
            dominant = (f"memory capacity: the KV cache, {waste:.0%} of each reservation empty; "
                        f"{base.fits} of {requested} requests fit")
        else:
            dominant = f"memory capacity: the KV cache itself; {base.fits} of {requested} requests fit"
    elif prefill_share >= 0.5:
        dominant = f"prefill, {pre.bound}-bound ({prefill_share:.0%} of the time)"
    else:
        dominant = f"decode, {mid.bound}-bound ({1 - prefill_share:.0%} of the time)"
    numbers = {
        "weights_bytes": base.weights, "kv_pool_bytes": base.kv_pool, "fits": base.fits,
        "requested": requested, "weights_share": weights_share, "reservation_waste": waste,
        "prefill_share": prefill_share, "prefill_intensity": pre.step.intensity, "prefill_ridge": pre.ridge,
        "decode_intensity": mid.step.intensity, "decode_ridge": mid.ridge,
    }
    return dominant, (memory_line, time_line), numbers
