"""A step-by-step simulator of an LLM server's scheduler: static vs continuous batching.

The server runs in *iterations*.  In each one every running request either
prefills its prompt (and emits its first token) or decodes one more token.
What changes between schedulers is *when requests may join and leave*:

- **static batching** forms a batch, runs it until its longest member has
  finished, and only then forms the next one; members that finish early sit
  idle, and their KV memory stays reserved until the batch ends;
- **continuous batching** (iteration-level scheduling, Orca; Yu et al., 2022)
  removes a request the iteration it finishes and admits waiting requests
  into every iteration, as long as their KV cache fits.

The KV cache is held by an allocator from :mod:`servebook.paging`: the paged
one (blocks on demand) or the naive one (``max_len`` reserved per request).
When a running request needs a new block and none is free, the most recently
admitted request is *preempted by recomputation*: its blocks are freed, it
goes back to the front of the queue, and when readmitted it prefills its
prompt plus the tokens it had already generated.

Time comes from the library's one step model, :class:`servebook.roofline.StepModel`:
an iteration is one step whose prefill and decode work add up (weights read
once, every stored token's KV read or written, the matmul and attention
FLOPs), bounded by the roofline.  The simulator counts tokens exactly; only
the seconds are modelled.
"""

from __future__ import annotations

import csv
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path

import numpy as np

from .checks import positive, whole
from .paging import NaiveAllocator, OutOfBlocks, PagedAllocator
from .roofline import StepModel, attention_pairs

__all__ = [
    "Request", "Summary", "SimulationResult",
    "sample_trace", "lognormal_lengths", "load_trace", "save_trace", "simulate",
]

POLICIES = ("static", "continuous")
ALLOCATORS = ("paged", "naive")


# ---------------------------------------------------------------------------
# Requests and traces

_GROUP_BASE = 1 << 60  # token ids of shared prefixes live above every request's own ids


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, how long its prompt is, and how many tokens it will generate.

    Requests with the same ``prefix_group`` (>= 0) share their first
    ``prefix_len`` prompt tokens (a common system prompt), which only matters
    with prefix caching.  Token ids are synthetic but deterministic.
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prefix_group: int = -1
    prefix_len: int = 0

    def __post_init__(self) -> None:
        whole("request_id", self.request_id, 0)
        positive("arrival_s", self.arrival_s, allow_zero=True)
        whole("prompt_len", self.prompt_len, 1)
        whole("output_len", self.output_len, 1)
        whole("prefix_len", self.prefix_len, 0)
        if self.prefix_len > self.prompt_len:
            raise ValueError(f"prefix_len ({self.prefix_len}) exceeds prompt_len ({self.prompt_len})")
        if self.request_id >= 1 << 36:
            raise ValueError(f"request_id must be < 2**36, got {self.request_id}")

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len

    def tokens(self, n: int) -> list[int]:
        """The first ``n`` token ids of this request's stream (prompt, then generated)."""
        shared = min(n, self.prefix_len) if self.prefix_group >= 0 else 0
        group_base = _GROUP_BASE + (self.prefix_group << 24)
        own_base = (self.request_id + 1) << 24
        return [group_base + i for i in range(shared)] + [own_base + i for i in range(shared, n)]

    def token(self, position: int) -> int:
        if self.prefix_group >= 0 and position < self.prefix_len:
            return _GROUP_BASE + (self.prefix_group << 24) + position
        return ((self.request_id + 1) << 24) + position


def _lognormal_lengths(rng: np.random.Generator, n: int, mean: float, sigma: float) -> np.ndarray:
    # mu chosen so that the distribution's mean (not its median) is `mean`: exp(mu + sigma^2 / 2).
    mu = math.log(mean) - sigma**2 / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)


def lognormal_lengths(n: int, *, mean: float, sigma: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` seeded token counts (>= 1) from a log-normal whose mean, before rounding, is ``mean``.

    The length distribution of :func:`sample_trace`, on its own, for questions about
    one length at a time (tail waste against block size, for instance).
    """
    rng = np.random.default_rng(whole("seed", seed, 0))
    return _lognormal_lengths(rng, whole("n", n, 1), positive("mean", mean), positive("sigma", sigma, allow_zero=True))


def sample_trace(n_requests: int, *, seed: int = 0, prompt_mean: float = 160.0, output_mean: float = 340.0,
                 sigma: float = 1.0, max_len: int = 2048, arrival_rate: float | None = None,
                 shared_prefix_len: int = 0, n_prefix_groups: int = 1) -> list[Request]:
    """A seeded synthetic trace: log-normal prompt and output lengths, Poisson arrivals.

    Chat traffic has a long right tail: most answers are short, a few run to the
    context limit.  A log-normal with the given means and shape ``sigma`` has that
    shape; lengths are clipped so that ``prompt + output <= max_len``.
    ``arrival_rate`` (requests per second) draws Poisson arrivals; ``None`` puts
    every request in the queue at time 0 (an offline batch job).
    ``shared_prefix_len > 0`` gives each request one of ``n_prefix_groups`` common
    prompt prefixes of that length.
    """
    n_requests = whole("n_requests", n_requests, 1)
    max_len = whole("max_len", max_len, 2)
    prompt_mean = positive("prompt_mean", prompt_mean)
    output_mean = positive("output_mean", output_mean)
    sigma = positive("sigma", sigma, allow_zero=True)
    shared_prefix_len = whole("shared_prefix_len", shared_prefix_len, 0)
    n_prefix_groups = whole("n_prefix_groups", n_prefix_groups, 1)
    rng = np.random.default_rng(whole("seed", seed, 0))
    prompts = _lognormal_lengths(rng, n_requests, prompt_mean, sigma)
    outputs = _lognormal_lengths(rng, n_requests, output_mean, sigma)
    prompts = np.clip(prompts + shared_prefix_len, 1, max_len - 1)
    outputs = np.minimum(outputs, max_len - prompts)
    if arrival_rate is None:
        arrivals = np.zeros(n_requests)
    else:
        gaps = rng.exponential(1.0 / positive("arrival_rate", arrival_rate), n_requests)
        arrivals = np.cumsum(gaps) - gaps[0]
    groups = rng.integers(0, n_prefix_groups, n_requests) if shared_prefix_len else np.full(n_requests, -1)
    return [
        Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]),
                prefix_group=int(groups[i]), prefix_len=min(shared_prefix_len, int(prompts[i])))
        for i in range(n_requests)
    ]


_TRACE_FIELDS = ("request_id", "arrival_s", "prompt_len", "output_len", "prefix_group", "prefix_len")


def save_trace(requests: Iterable[Request], path: str | Path) -> Path:
    """Write requests as CSV (``request_id,arrival_s,prompt_len,output_len,prefix_group,prefix_len``)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_TRACE_FIELDS)
        for r in requests:
            writer.writerow([r.request_id, repr(r.arrival_s), r.prompt_len, r.output_len, r.prefix_group, r.prefix_len])
    return path


def load_trace(path: str | Path) -> list[Request]:
    """Read a CSV trace with at least ``arrival_s,prompt_len,output_len`` columns.

    ``request_id`` defaults to the row number; ``prefix_group``/``prefix_len`` to none.
    """
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"arrival_s", "prompt_len", "output_len"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"trace {path} lacks column(s) {sorted(missing)}")
        requests = []
        for row_number, row in enumerate(reader):
            try:
                requests.append(Request(
                    int(row.get("request_id") or row_number), float(row["arrival_s"]),
                    int(row["prompt_len"]), int(row["output_len"]),
                    int(row.get("prefix_group") or -1), int(row.get("prefix_len") or 0),
                ))
            except (TypeError, ValueError) as err:
                raise ValueError(f"trace {path}, data row {row_number + 1}: {err}") from None
    return requests


# ---------------------------------------------------------------------------
# Results

@dataclass(frozen=True)
class Summary:
    """What one simulated run achieved."""

    policy: str
    allocator: str
    n_requests: int
    iterations: int
    makespan_s: float
    output_tokens: int
    throughput_tokens_s: float
    requests_per_s: float
    mean_running: float        # time-weighted requests decoding or prefilling
    peak_running: int
    kv_token_share: float      # of reserved KV memory-time, the share holding tokens
    kv_reserved_share: float   # of the whole pool's memory-time, the share reserved
    kv_pool_token_share: float  # of the whole pool's memory-time, the share holding tokens
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    ttft_p50_s: float
    normalized_latency_s: float  # mean of latency / output tokens, as in the vLLM paper
    preemptions: int
    recomputed_tokens: int       # prompt and output tokens prefilled again after a preemption


@dataclass
class SimulationResult:
    """Per-iteration records (``steps``) and per-request records (``requests``), as numpy arrays.

    ``steps``, one entry per iteration: ``time_s`` (clock at its end), ``dt``,
    ``running`` (requests that prefilled or decoded, so also the tokens
    generated), ``waiting``, ``admitted``, ``preempted``, ``finished``,
    ``prefill_tokens``, ``decode_tokens``, ``tokens_stored`` and
    ``slots_reserved`` (whole blocks or whole regions; reserved minus stored is
    the waste, and reserved / block size the blocks in use).

    ``requests``, one entry per request in trace order: ``request_id``,
    ``arrival_s``, ``prompt_len``, ``output_len``, ``first_token_s``,
    ``finish_s``, ``preemptions``, ``recomputed_tokens``.
    """

    policy: str
    allocator: str
    slots_total: int
    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    config: dict = field(default_factory=dict)

    def kv_shares(self, *, while_queued: bool = False) -> tuple[float, float, float]:
        """Time-weighted KV shares: (tokens / reserved slots, reserved / pool, tokens / pool).

        ``while_queued`` keeps only the iterations after which requests were still
        waiting: the saturated server, without the drain at the end of a finite trace.
        """
        s = self.steps
        keep = s["waiting"] > 0 if while_queued else np.ones(len(s["dt"]), dtype=bool)
        dt = s["dt"][keep]
        if not dt.size:
            raise ValueError("no iteration had requests waiting (the server never saturated)")
        stored = float((s["tokens_stored"][keep] * dt).sum())
        reserved = float((s["slots_reserved"][keep] * dt).sum())
        pool = self.slots_total * float(dt.sum())
        return (stored / reserved if reserved else 1.0), reserved / pool, stored / pool

    def summary(self) -> Summary:
        s, r = self.steps, self.requests
        dt = s["dt"]
        total_time = float(dt.sum())
        token_share, reserved_share, pool_token_share = self.kv_shares()
        latency = r["finish_s"] - r["arrival_s"]
        makespan = float(r["finish_s"].max() - r["arrival_s"].min())
        out_tokens = int(r["output_len"].sum())
        return Summary(
            policy=self.policy, allocator=self.allocator, n_requests=len(latency), iterations=len(dt),
            makespan_s=makespan, output_tokens=out_tokens,
            throughput_tokens_s=out_tokens / makespan, requests_per_s=len(latency) / makespan,
            mean_running=float((s["running"] * dt).sum() / total_time), peak_running=int(s["running"].max()),
            kv_token_share=token_share, kv_reserved_share=reserved_share, kv_pool_token_share=pool_token_share,
            latency_p50_s=float(np.percentile(latency, 50)), latency_p90_s=float(np.percentile(latency, 90)),
            latency_p99_s=float(np.percentile(latency, 99)),
            ttft_p50_s=float(np.percentile(r["first_token_s"] - r["arrival_s"], 50)),
            normalized_latency_s=float(np.mean(latency / r["output_len"])),
            preemptions=int(r["preemptions"].sum()), recomputed_tokens=int(r["recomputed_tokens"].sum()),
        )


# ---------------------------------------------------------------------------
# The simulator

class _Live:
    """A request inside the server."""

    __slots__ = ("req", "generated", "stored", "fresh", "done", "first_token_s", "finish_s", "preemptions",
                 "prefilled", "recomputed")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.generated = 0        # output tokens emitted so far
        self.stored = 0           # tokens whose keys and values are in the cache
        self.fresh = False        # admitted (prefilled) in the current iteration
        self.done = False
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.preemptions = 0
        self.prefilled = 0        # tokens prefilled in the current iteration
        self.recomputed = 0       # tokens prefilled again after preemptions


_STEP_FIELDS = ("time_s", "dt", "running", "waiting", "admitted", "preempted", "finished",
                "prefill_tokens", "decode_tokens", "tokens_stored", "slots_reserved")


def simulate(requests: Sequence[Request], *, kv_slots: int, policy: str = "continuous",
             allocator: str = "paged", block_size: int = 16, max_len: int = 2048, max_num_seqs: int = 256,
             watermark: float = 0.01, prefix_caching: bool = False,
             cost: StepModel | None = None) -> SimulationResult:
    """Run ``requests`` through a scheduler and a KV allocator of ``kv_slots`` token slots.

    ``policy``: ``"static"`` or ``"continuous"``.  ``allocator``: ``"paged"``
    (``kv_slots // block_size`` blocks) or ``"naive"`` (``kv_slots // max_len``
    regions of ``max_len``).  ``max_num_seqs`` caps the running requests;
    ``watermark`` is the share of blocks a paged admission must leave free, so
    that running requests have room to grow.  ``cost``, a
    :class:`~servebook.roofline.StepModel` with a GPU, turns iterations into
    seconds (default: one second per iteration, i.e. time in iterations).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"allocator must be one of {ALLOCATORS}, got {allocator!r}")
    kv_slots = whole("kv_slots", kv_slots, 1)
    block_size = whole("block_size", block_size, 1)
    max_len = whole("max_len", max_len, 1)
    max_num_seqs = whole("max_num_seqs", max_num_seqs, 1)
    if isinstance(watermark, bool) or not isinstance(watermark, Real) or not 0 <= watermark < 1:
        raise ValueError(f"watermark must be a share in [0, 1), got {watermark!r}")
    requests = list(requests)
    if not requests:
        raise ValueError("requests must not be empty")
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"requests must hold Request objects, got {type(r).__name__}")
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("request_id values must be unique")

    if allocator == "paged":
        num_blocks = kv_slots // block_size
        if num_blocks == 0:
            raise ValueError(f"kv_slots ({kv_slots}) is smaller than one block ({block_size})")
        kv = PagedAllocator(num_blocks, block_size, prefix_caching=prefix_caching)
        reserve_blocks = int(watermark * num_blocks)
        longest = max(r.total_len - 1 for r in requests)
        if -(-longest // block_size) > num_blocks:
            raise ValueError(f"a request of {longest + 1} tokens can never fit {num_blocks} blocks of {block_size}")
    else:
        kv = NaiveAllocator(kv_slots, max_len)
        reserve_blocks = 0
    too_long = [r.request_id for r in requests if r.total_len > max_len]
    if too_long:
        raise ValueError(f"{len(too_long)} request(s) exceed max_len = {max_len} (first: id {too_long[0]})")

    def admissible(tokens: list[int]) -> bool:
        # The watermark only guards running requests; an empty server admits whatever fits.
        if reserve_blocks and running:
            return kv.can_allocate(tokens, keep_free=reserve_blocks)
        return kv.can_allocate(tokens)

    if cost is not None and (not isinstance(cost, StepModel) or cost.gpu is None):
        raise TypeError(f"cost must be a roofline.StepModel built with a device, got {cost!r}")
    cost_fn = cost.seconds if cost is not None else (lambda tokens, cached, pairs: 1.0)
    static = policy == "static"
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
    lives = {r.request_id: _Live(r) for r in requests}
    waiting: deque[_Live] = deque()
    running: list[_Live] = []
    records: dict[str, list] = {name: [] for name in _STEP_FIELDS}
    clock = pending[0].arrival_s

    def preempt(victim: _Live) -> None:
        kv.free(victim.req.request_id)
        running.remove(victim)
        victim.stored = 0
        victim.preemptions += 1
        if victim.fresh:
            victim.fresh = False
            victim.prefilled = 0
        waiting.appendleft(victim)

    while pending or waiting or running:
        while pending and pending[0].arrival_s <= clock:
            waiting.append(lives[pending.popleft().request_id])
        if not waiting and not running:
            clock = pending[0].arrival_s
            continue

        # 1. Admission: continuous admits every iteration, static only into an empty server.
        admitted = 0
        if not static or not running:
            while waiting and len(running) < max_num_seqs:
                live = waiting[0]
                # A preempted request recomputes its prompt and every token it had generated.
                tokens = live.req.tokens(live.req.prompt_len + live.generated)
                if not admissible(tokens):
                    break
                cached = kv.allocate(live.req.request_id, tokens)
                waiting.popleft()
                live.fresh, live.stored, live.prefilled = True, len(tokens), len(tokens) - cached
                if live.preemptions:
                    live.recomputed += len(tokens) - cached
                running.append(live)
                admitted += 1

        # 2. Decode: every running request that was not just prefilled writes the KV of
        #    its last token; when blocks run out, preempt the most recently admitted.
        preempted = 0
        i = 0
        while i < len(running):
            live = running[i]
            if live.done or live.fresh:
                i += 1
                continue
            while True:
                try:
                    kv.append(live.req.request_id, live.req.token(live.stored))
                    live.stored += 1
                    i += 1
                    break
                except OutOfBlocks:
                    victim = next(v for v in reversed(running) if not v.done)
                    preempt(victim)
                    preempted += 1
                    if victim is live:
                        break

        # 3. The iteration's time, then its outputs.
        prefill_tokens = decode_tokens = context = pairs = 0
        active = 0
        for live in running:
            if live.done:
                continue
            active += 1
            context += live.stored
            new = live.prefilled if live.fresh else 1
            pairs += attention_pairs(new, live.stored - new)
            if live.fresh:
                prefill_tokens += live.prefilled
            else:
                decode_tokens += 1
        if active == 0:
            if static and running:  # every unfinished member was preempted: the batch ends here
                for live in running:
                    kv.free(live.req.request_id)
                running.clear()
                continue
            raise RuntimeError("the scheduler made no progress")  # unreachable with a validated trace
        processed = prefill_tokens + decode_tokens
        dt = cost_fn(processed, context - processed, pairs)
        clock += dt
        finished = 0
        for live in running:
            if live.done:
                continue
            live.generated += 1
            if live.fresh:
                live.fresh = False
                live.prefilled = 0
                if math.isnan(live.first_token_s):
                    live.first_token_s = clock
            if live.generated >= live.req.output_len:
                live.done = True
                live.finish_s = clock
                finished += 1
        records["tokens_stored"].append(kv.tokens_stored)
        records["slots_reserved"].append(kv.slots_reserved)
        if static:
            if all(live.done for live in running):
                for live in running:
                    kv.free(live.req.request_id)
                running.clear()
        elif finished:
            for live in [v for v in running if v.done]:
                kv.free(live.req.request_id)
            running[:] = [v for v in running if not v.done]
        for name, value in (("time_s", clock), ("dt", dt), ("running", active), ("waiting", len(waiting)),
                            ("admitted", admitted), ("preempted", preempted), ("finished", finished),
                            ("prefill_tokens", prefill_tokens), ("decode_tokens", decode_tokens)):
            records[name].append(value)

    steps = {name: np.asarray(values) for name, values in records.items()}
    ordered = [lives[r.request_id] for r in requests]
    per_request = {
        "request_id": np.array([v.req.request_id for v in ordered]),
        "arrival_s": np.array([v.req.arrival_s for v in ordered]),
        "prompt_len": np.array([v.req.prompt_len for v in ordered]),
        "output_len": np.array([v.req.output_len for v in ordered]),
        "first_token_s": np.array([v.first_token_s for v in ordered]),
        "finish_s": np.array([v.finish_s for v in ordered]),
        "preemptions": np.array([v.preemptions for v in ordered]),
        "recomputed_tokens": np.array([v.recomputed for v in ordered]),
    }
    config = dict(kv_slots=kv_slots, block_size=block_size, max_len=max_len, max_num_seqs=max_num_seqs,
                  watermark=watermark, prefix_caching=prefix_caching)
    return SimulationResult(policy, allocator, kv.slots_total, steps, per_request, config)
