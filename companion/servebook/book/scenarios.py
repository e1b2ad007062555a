"""Every scenario the book reuses, set up once: chapters, exercise pages, figures, widgets and tests read
them from here and never rebuild one.

A scenario is the set-up of a worked example or a simulation: a model on a
GPU with a memory budget, a trace of requests, a workload.  Where the source
documents leave a number open (which model, which GPU, how long the
prompts), the choice is made here once, and the chapter says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from .. import advisor, batching, gpus, memory, models, roofline
from ..advisor import Workload
from ..units import GB, GiB

# ---------------------------------------------------------------------------
# Chapter 04: one server under batched traffic.


@dataclass(frozen=True)
class BatchingServer:
    """A model in FP16 on a GPU: the weights and a flat overhead come off the top, the rest is the KV pool.

    ``kv_slots`` is the pool in tokens; ``cost`` the library's step model on this GPU, which turns
    the simulator's iterations into seconds.
    """

    model: str = "llama-2-13b"
    gpu: str = "a100-40gb-sxm"
    overhead: int = 4 * GiB      # activations, CUDA context and fragmentation: the first edition's flat guess
    max_len: int = 2048          # tokens a naive server reserves per request
    block_size: int = 16         # tokens per block of the paged allocator

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @cached_property
    def plan(self) -> memory.CapacityPlan:
        return memory.capacity_plan(gpu=gpus.get(self.gpu).memory, weights=memory.weight_bytes(self.spec.n_params),
                                    per_request=memory.kv_cache_bytes(self.spec, seq_len=self.max_len),
                                    overhead=self.overhead)

    @property
    def kv_slots(self) -> int:
        """Token slots in the KV pool."""
        return self.plan.kv_pool // memory.kv_bytes_per_token(self.spec)

    @cached_property
    def cost(self) -> roofline.StepModel:
        return roofline.StepModel(self.spec, device=self.gpu)

    def simulate(self, trace, **options) -> batching.SimulationResult:
        """Serve ``trace`` on this server: its KV pool, reservations, blocks and step model.

        ``options`` (``policy``, ``allocator``, ``watermark``, ...) go to :func:`servebook.batching.simulate`.
        """
        return batching.simulate(trace, kv_slots=self.kv_slots, max_len=self.max_len, block_size=self.block_size,
                                 cost=self.cost, **options)


BATCHING_SERVER = BatchingServer()
"""Chapter 04's server: Llama-2-13B in FP16 on an A100 40GB, 4 GiB of overhead, 2,048-token reservations."""


@lru_cache(maxsize=8)
def batching_trace(n_requests: int = 1000, seed: int = 0,
                   arrival_rate: float | None = None) -> tuple[batching.Request, ...]:
    """Chapter 04's traffic: log-normal prompts and outputs (means 160 and 340 tokens).

    All queued at time 0 (an offline batch job), or arriving as a Poisson process of ``arrival_rate``
    requests per second (a live service).
    """
    return tuple(batching.sample_trace(n_requests, seed=seed, prompt_mean=160, output_mean=340,
                                       max_len=BATCHING_SERVER.max_len, arrival_rate=arrival_rate))


@lru_cache(maxsize=4)
def batching_runs(n_requests: int = 1000, seed: int = 0) -> dict[tuple[str, str], batching.SimulationResult]:
    """The four runs of chapter 04: static and continuous batching, naive and paged allocation."""
    trace = batching_trace(n_requests, seed)
    return {(policy, allocator): BATCHING_SERVER.simulate(trace, policy=policy, allocator=allocator)
            for policy in batching.POLICIES for allocator in batching.ALLOCATORS}


# ---------------------------------------------------------------------------
# Chapter 05: the seeds' quantization examples, as decimal strings so that they compute exactly.

SEED_RANGE = ("-0.6", "0.9")
"""The weights' range of the seeds' worked examples (C5, C6, L3.2): ``r_min``, ``r_max``."""

SEED_WEIGHT = "0.35"
"""C5's weight inside the range: on the INT4 grid, ``r / s`` is exactly a tie."""

SEED_OUTLIER = "1.4"
"""C6's outlier, beyond ``r_max``."""

BINARY_TIE = ("0.3125", "-0.75", "1.125")
"""A tie exact in binary, ``r``, ``r_min``, ``r_max`` (step 0.125, zero point 6): only the rounding rule decides."""

UNIT_RANGE = (-1, 1)
"""C8's and C10's range, for comparing bit widths."""

ERROR_SAMPLES = 20_000
"""Uniform samples on :data:`UNIT_RANGE` whose largest rounding error is measured against the bound."""


# ---------------------------------------------------------------------------
# Chapter 07: one GPU's budget, in users (C9), and the seeds' 13B model in decimal units (L2.3, L4.1-L4.3).


@dataclass(frozen=True)
class CapacityCase:
    """A model on a GPU with an overhead, serving users of ``seq_len`` tokens each: the terms of the capacity plan.

    The GPU's memory is the GPU table's (what ``nvidia-smi`` reports), or ``gpu_bytes`` for a GPU the
    table does not have.
    """

    model: str | models.ModelSpec = "llama-2-13b"
    gpu: str = "a100-80gb-sxm"
    overhead: int = 4 * GiB
    seq_len: int = 4096
    kv_dtype: str = "fp16"
    gpu_bytes: int | None = None

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.resolve(self.model)

    @property
    def gpu_memory(self) -> int:
        return gpus.get(self.gpu).memory if self.gpu_bytes is None else self.gpu_bytes

    @property
    def per_user(self) -> int:
        """KV-cache bytes of one user of ``seq_len`` tokens."""
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, dtype=self.kv_dtype)

    def weights(self, dtype: str = "fp16", group_size: int | None = None) -> int:
        return memory.weight_bytes(self.spec.n_params, dtype, group_size=group_size)

    def plan(self, weights: int) -> memory.CapacityPlan | None:
        """The budget with ``weights`` bytes of weights; None where weights and overhead alone overflow the GPU."""
        if weights + self.overhead > self.gpu_memory:
            return None
        return memory.capacity_plan(self.gpu_memory, weights, self.per_user, overhead=self.overhead)

    def users(self, dtype: str = "fp16", group_size: int | None = None) -> int | None:
        """Users that fit with the weights in ``dtype``; None where the weights do not fit at all."""
        plan = self.plan(self.weights(dtype, group_size))
        return None if plan is None else plan.requests


CAPACITY = CapacityCase()
"""Chapter 07's budget (C9): Llama-2-13B on an A100 80GB (80 GiB), 4 GiB of overhead, users of 4,096 tokens."""

C9_SEED_WEIGHTS = {"fp16": 26 * GiB, "int4": int(6.5 * GiB)}
"""C9's weights as the seed gives them, "26 GiB" and "6.5 GiB": 26 GB and 6.5 GB mislabelled, kept to show the slip."""


@dataclass(frozen=True)
class SeedBudget:
    """The seeds' 13B model on one GPU, in decimal units: ``batch`` requests of ``seq_len`` tokens of FP16 KV.

    ``n_params`` is the round 13 x 10^9 of the seeds; the KV cache has ``model``'s shape.
    """

    gpu_memory: int = 80 * GB
    n_params: int = 13 * 10**9
    model: str = "llama-2-13b"
    seq_len: int = 4096
    batch: int = 16

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @property
    def kv(self) -> int:
        """KV-cache bytes of the whole batch."""
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, batch=self.batch)

    def weights(self, dtype: str = "fp16", group_size: int | None = None) -> int:
        return memory.weight_bytes(self.n_params, dtype, group_size=group_size)


SEED_BUDGET = SeedBudget()
"""L2.3 and L4.1-L4.3: 13 x 10^9 weights and 16 requests of 4,096 tokens on an 80 GB (10^9 bytes) GPU."""


# ---------------------------------------------------------------------------
# Chapter 08: the two workloads of the lever exercise, with the numbers the source leaves open filled in.


@dataclass(frozen=True)
class Scenario:
    """A model, a GPU and a workload, with the story they stand for."""

    name: str
    model: str
    gpu: str
    workload: Workload
    story: str

    def advise(self) -> advisor.Advice:
        return advisor.advise(self.model, self.gpu, self.workload)


LEVER_SCENARIOS: dict[str, Scenario] = {
    "A": Scenario(
        "A: a chatbot of short sessions", "llama-2-13b", "a100-80gb-sxm",
        Workload(prompt_len=30, output_len=30, batch=1000, max_len=2048, goal="throughput"),
        "Thousands of short chat sessions, 60 tokens each on average (read here as a 30-token prompt and a "
        "30-token answer, 1,000 sessions in flight), on a server that reserves max_len = 2,048 KV slots per "
        "request: it keeps running out of memory."),
    "B": Scenario(
        "B: batch summarisation", "llama-3-70b", "h200",
        Workload(prompt_len=6000, output_len=250, batch=16, max_len=8192, goal="throughput"),
        "A summarisation job: prompts of many thousands of tokens (read here as 6,000 in, 250 out) at a large "
        "batch (16), throughput is all that matters, and the model barely fits the GPU (a 70B model in BF16 on "
        "one 141 GB H200)."),
}
