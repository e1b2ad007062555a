"""The parallelism chapter's scenarios: chapter 08's summarisation job on 1 to 8 GPUs, and a model no GPU holds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ... import advisor, gpus, parallel
from ...advisor import Workload
from .choosing_the_lever import LEVER_SCENARIOS

TENSOR_SIZES = (1, 2, 4, 8)
"""The tensor-parallel sizes the chapter tries: every split of one 8-GPU node."""


@dataclass(frozen=True)
class SplitJob:
    """Chapter 08's scenario B (Llama-3-70B in BF16, 6,000-token prompts, 16 at once) on a node of ``gpu``.

    ``served(t)`` serves it on a TP-``t`` replica with chapter 08's server (a
    flat 4 GiB per GPU, 8,192 slots reserved per request); ``vllm=True`` keeps
    back vLLM's modelled reserve per GPU instead.  ``replicas`` copies of the
    server split the requests.
    """

    gpu: str = "h200"
    node_gpus: int = 8
    workload: Workload = field(default_factory=lambda: LEVER_SCENARIOS["B"].workload)
    model: str = LEVER_SCENARIOS["B"].model

    @property
    def node(self) -> parallel.Node:
        return parallel.Node(self.gpu, self.node_gpus)

    def plan(self, tensor: int) -> parallel.ParallelPlan:
        """vLLM's per-GPU plan of one TP-``tensor`` replica for requests of the workload's reservation."""
        return parallel.plan(self.model, self.node, parallel.Layout(tensor), self.workload.max_len)

    def job(self, tensor: int, replicas: int = 1, vllm: bool = False, **changes) -> Workload:
        """The workload on ``replicas`` TP-``tensor`` replicas (``changes``: any other Workload field)."""
        overhead = self.plan(tensor).fullest.reserve if vllm else self.workload.overhead
        return replace(self.workload, tensor_parallel=tensor, replicas=replicas, overhead=overhead, **changes)

    def served(self, tensor: int, replicas: int = 1, vllm: bool = False, **changes) -> advisor.Served:
        """The baseline server of :meth:`job`, served on paper."""
        self.node.holds(parallel.Layout(tensor * replicas))
        advice = advisor.advise(self.model, self.gpu, self.job(tensor, replicas, vllm, **changes))
        return advice.baseline

    @property
    def display(self) -> str:
        return gpus.display_name(self.gpu)


SPLIT_JOBS = {name: SplitJob(name) for name in ("h100-sxm", "h200")}
"""Chapter 08's job on a node of eight H100 SXM and on a node of eight H200 SXM."""

NODE_REQUESTS = 128
"""Requests in flight on a whole node for the replicas-or-split comparison: eight of chapter 08's jobs."""


@dataclass(frozen=True)
class BigModel:
    """A model that no single GPU holds, in two weight precisions, on the layouts that hold it."""

    model: str = "llama-3.1-405b"
    seq_len: int = 8192
    layouts: tuple[tuple[str, str, parallel.Layout], ...] = (
        ("bf16", "h100-sxm", parallel.Layout(8, 2)),  # two nodes: TP 8 in each, the two stages across them
        ("bf16", "h200", parallel.Layout(8)),
        ("fp8", "h100-sxm", parallel.Layout(8)),
        ("fp8", "h200", parallel.Layout(4)),
    )

    def plans(self) -> dict[tuple[str, str, parallel.Layout], parallel.ParallelPlan]:
        """(weights dtype, GPU, layout) -> vLLM's plan of one replica on those GPUs."""
        return {(dtype, gpu, layout): parallel.plan(self.model, gpu, layout, self.seq_len, weights_dtype=dtype)
                for dtype, gpu, layout in self.layouts}


BIG_MODEL = BigModel()
"""Llama-3.1-405B in BF16 and FP8 on H100 and H200 nodes, users of 8,192 tokens."""
