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

import torch

from .. import advisor, batching, gpus, memory, models, paging, quant, roofline
from ..advisor import Workload
from ..checks import choice
from ..units import GB, GiB

# ---------------------------------------------------------------------------
# Chapter 01: one model on one GPU, the steps on its roofline, and the two memory buckets.


@dataclass(frozen=True)
class RooflineCase:
    """A model on a GPU, with the decode and prefill steps chapter 01 places on the GPU's roofline.

    ``context_len`` is the cache every decode step of the chapter reads; ``max_step_tokens`` the
    largest step whose speed under each weight scheme the chapter plots.
    """

    model: str = "llama-2-13b"
    gpu: str = "a100-80gb-sxm"
    context_len: int = 512
    decode_batches: tuple[int, ...] = (1, 16, 64, 256)
    prefills: tuple[tuple[int, int], ...] = ((1, 512), (8, 2048))   # (batch, prompt_len)
    max_step_tokens: int = 16_384

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @cached_property
    def device(self) -> gpus.GPU:
        return gpus.get(self.gpu)

    def decode_bounds(self) -> list[roofline.Bound]:
        """One decode step per batch size of ``decode_batches``, at ``context_len`` tokens cached."""
        return [roofline.bound(roofline.decode_step(self.spec, batch, self.context_len), self.device)
                for batch in self.decode_batches]

    def prefill_bounds(self) -> list[roofline.Bound]:
        """One prefill step per ``(batch, prompt_len)`` of ``prefills``."""
        return [roofline.bound(roofline.prefill_step(self.spec, batch, prompt), self.device)
                for batch, prompt in self.prefills]


PREFILL_DECODE = RooflineCase()
"""Chapter 01's pair: Llama-2-13B on an A100 80GB SXM, decode at 512 tokens cached (its exercises reuse it)."""


@dataclass(frozen=True)
class MemoryBuckets:
    """A model's weights and a batch's KV cache on one GPU of ``gpu_gb`` GB, for each weight precision."""

    n_params: int = 13 * 10**9
    model: str = "llama-2-13b"     # whose FP16 KV cache
    seq_len: int = 4096
    batch: int = 16
    gpu_gb: int = 80

    @property
    def gpu(self) -> int:
        return self.gpu_gb * GB

    @property
    def kv(self) -> int:
        return memory.kv_cache_bytes(self.model, seq_len=self.seq_len, batch=self.batch)

    def weights(self, dtype: str = "fp16") -> int:
        return memory.weight_bytes(self.n_params, dtype)

    def free(self, dtype: str = "fp16") -> int:
        """Bytes of the GPU neither bucket fills."""
        return self.gpu - self.weights(dtype) - self.kv


MEMORY_BUCKETS = MemoryBuckets()
"""Chapter 01's two buckets: a 13B model serving 16 requests of 4,096 tokens on an 80 GB GPU."""


# ---------------------------------------------------------------------------
# Chapter 02: a KV cache in a memory budget.


@dataclass(frozen=True)
class KVBudget:
    """Requests of ``seq_len`` tokens whose KV cache must fit ``budget_gib`` GiB.

    ``growth_batches`` are the batch sizes whose growth in sequence length the chapter draws.
    """

    model: str = "llama-2-13b"
    seq_len: int = 4096
    budget_gib: int = 40
    dtype: str = "fp16"
    growth_batches: tuple[int, ...] = (1, 4, 8, 16)

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @property
    def budget(self) -> int:
        return self.budget_gib * GiB

    @property
    def per_token(self) -> int:
        return memory.kv_bytes_per_token(self.spec, self.dtype)

    @property
    def per_request(self) -> int:
        return memory.kv_cache_bytes(self.spec, seq_len=self.seq_len, dtype=self.dtype)

    @property
    def fits(self) -> int:
        """Requests of ``seq_len`` tokens that fit the budget (floor)."""
        return memory.max_batch(self.budget, self.per_request)

    def longest(self, batch: int) -> int:
        """The most tokens each of ``batch`` requests can hold within the budget."""
        return memory.max_batch(self.budget, batch * self.per_token)


KV_BUDGET = KVBudget()
"""Chapter 02's worked example 2: Llama-2-13B in FP16, requests of 4,096 tokens, 40 GiB for the KV cache."""

KV_TOY = models.ModelSpec("6-layer toy", n_layers=6, d_model=512, n_heads=8)
"""Chapter 02's worked example 1: a small multi-head model (6 layers, d_model 512, 8 heads)."""

KV_7B_CLASS = models.ModelSpec("7B-class", n_layers=32, d_model=4096, n_heads=32)
"""Chapter 02's exercise 2: a 7B-class model with multi-head attention (32 layers, d_model 4096)."""


# ---------------------------------------------------------------------------
# Chapter 03: one request naive against paged, the walk-through, the chatbot, lengths for a block size.


@dataclass(frozen=True)
class PagedRequest:
    """One request of ``n_tokens`` on a naive server reserving ``max_len`` slots, or in blocks of ``block_size``."""

    n_tokens: int = 100
    max_len: int = 2048
    block_size: int = 16

    @property
    def naive_waste(self) -> int:
        return paging.naive_waste(self.n_tokens, self.max_len)

    @property
    def blocks(self) -> int:
        return paging.blocks_needed(self.n_tokens, self.block_size)

    @property
    def slots(self) -> int:
        return paging.paged_slots(self.n_tokens, self.block_size)

    @property
    def paged_waste(self) -> int:
        return paging.paged_waste(self.n_tokens, self.block_size)


PAGED_REQUEST = PagedRequest()
"""Chapter 03's worked example 2 (and chapter 01's paging lever): 100 tokens, ``max_len`` 2,048, blocks of 16."""


def paging_walkthrough() -> paging.PagedAllocator:
    """Chapter 03's walk-through: two samples of one prompt, then a second request with the same prefix."""
    kv = paging.PagedAllocator(num_blocks=12, block_size=4, prefix_caching=True)
    prompt = [101, 102, 103, 104, 105, 106, 107, 108, 109, 110]
    kv.allocate("A", prompt)
    kv.fork("A", "A'")
    kv.append("A", 201)
    kv.append("A'", 301)
    kv.allocate("B", prompt[:8] + [401, 402, 403, 404, 405])
    return kv


def chat_sessions(slots_per_session: int, weight_dtype: str = "fp16") -> memory.CapacityPlan:
    """Chapter 03's chatbot on chapter 04's server: sessions that each hold ``slots_per_session`` KV slots.

    The server (Llama-2-13B, a 40 GiB A100, 4 GiB of overhead) is :data:`BATCHING_SERVER`, with its
    weights stored in ``weight_dtype``.
    """
    server = BATCHING_SERVER
    return memory.capacity_plan(gpu=gpus.get(server.gpu).memory,
                                weights=memory.weight_bytes(server.spec.n_params, weight_dtype),
                                per_request=slots_per_session * memory.kv_bytes_per_token(server.spec),
                                overhead=server.overhead)


@dataclass(frozen=True)
class LengthMix:
    """Chat-like request lengths (log-normal, seeded) against which chapter 03 chooses a block size."""

    n_requests: int = 2000
    mean: int = 300
    sigma: float = 1.0
    seed: int = 0
    block_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)

    @cached_property
    def lengths(self) -> tuple[int, ...]:
        return tuple(int(n) for n in batching.lognormal_lengths(self.n_requests, mean=self.mean,
                                                                 sigma=self.sigma, seed=self.seed))


BLOCK_SIZE_MIX = LengthMix()
"""Chapter 03's lengths for choosing a block size: 2,000 requests, mean 300 tokens, seed 0."""


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
# Chapter 06: a weight matrix with planted outliers.

OUTLIER_KINDS = ("none", "rows", "columns")


def planted_outliers(kind: str = "columns", out_features: int = 256, in_features: int = 1024,
                     n_outliers: int = 4, factor: float = 20.0, seed: int = 0) -> torch.Tensor:
    """A Gaussian weight (std 0.02) with ``n_outliers`` output rows or input columns ``factor`` times larger.

    ``kind``: ``"none"`` (clean), ``"rows"`` (outlier output channels) or ``"columns"`` (outlier input
    channels, the pattern LLM weights and activations show).
    """
    choice("kind", kind, OUTLIER_KINDS)
    generator = torch.Generator().manual_seed(seed)
    W = torch.randn(out_features, in_features, generator=generator) * 0.02
    if kind == "rows":
        W[torch.randperm(out_features, generator=generator)[:n_outliers], :] *= factor
    elif kind == "columns":
        W[:, torch.randperm(in_features, generator=generator)[:n_outliers]] *= factor
    return W


def relative_error(weight: torch.Tensor, bits: int, granularity) -> float:
    """``||W - W_hat|| / ||W||`` (Frobenius) after round-to-nearest per tensor, per channel or per group."""
    if granularity == "tensor":
        qparams = quant.choose_qparams(weight, bits)
    elif granularity == "channel":
        qparams = quant.choose_qparams(weight, bits, axis=0)
    else:
        qparams = quant.choose_qparams(weight, bits, group_size=granularity)
    return quant.relative_error(weight, qparams)


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
