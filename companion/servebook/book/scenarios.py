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

from .. import advisor, batching, gpus, memory, models, quant, roofline
from ..advisor import Workload
from ..checks import choice
from ..units import GiB

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


BATCHING_SERVER = BatchingServer()
"""Chapter 04's server: Llama-2-13B in FP16 on an A100 40GB, 4 GiB of overhead, 2,048-token reservations."""


@lru_cache(maxsize=8)
def batching_trace(n_requests: int = 1000, seed: int = 0) -> tuple[batching.Request, ...]:
    """Chapter 04's traffic: log-normal prompts and outputs (means 160 and 340 tokens), all queued at time 0."""
    return tuple(batching.sample_trace(n_requests, seed=seed, prompt_mean=160, output_mean=340,
                                       max_len=BATCHING_SERVER.max_len))


@lru_cache(maxsize=4)
def batching_runs(n_requests: int = 1000, seed: int = 0) -> dict[tuple[str, str], batching.SimulationResult]:
    """The four runs of chapter 04: static and continuous batching, naive and paged allocation."""
    server, trace = BATCHING_SERVER, batching_trace(n_requests, seed)
    return {(policy, allocator): batching.simulate(trace, kv_slots=server.kv_slots, policy=policy,
                                                   allocator=allocator, max_len=server.max_len, cost=server.cost)
            for policy in batching.POLICIES for allocator in batching.ALLOCATORS}


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
