"""The capacity plan of a parallel layout: every GPU's budget, the requests one replica holds, a node's users.

Each GPU of each pipeline stage splits its memory as the capacity-planning chapter's one GPU did,
with its own shares:

    G = reserve + weights on that GPU + KV pool on that GPU,

and a replica holds as many requests as its *tightest* GPU does (vLLM gives
every worker the smallest block count among them: ``get_kv_cache_configs``).
The reserve is vLLM's (:mod:`.reserve`) or, to compare with the first
edition, a flat overhead per GPU.  A node of N GPUs runs N / (t p) replicas
side by side; its users are the replicas' users added up.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import gpus, memory, models
from ..checks import byte_count, whole
from ..gpus import GPU
from ..models import ModelSpec
from ..units import GiB, ceil_div
from .kv import stage_kv_bytes, stage_kv_bytes_per_token
from .layout import VOCAB_PADDING, Layout, Node, check, stage_layers
from .reserve import Server, cuda_graph_reserve, nccl_reserve, profile_peak
from .weights import stage_params


@dataclass(frozen=True)
class StagePlan:
    """One GPU of one pipeline stage: its memory split into reserve, weights and KV pool."""

    stage: int
    layers: int
    gpu_memory: int
    budget: int         # what the server may use: ceil(utilization * G), or G - a flat overhead
    weights: int
    activations: int    # the profiling run's peak, kept back
    cuda_graphs: int
    per_request: int    # KV bytes of one request on this GPU
    per_token: int      # KV bytes one token adds on this GPU
    outside: int = 0    # allocated before vLLM measures (NCCL): must fit the headroom

    @property
    def headroom(self) -> int:
        """Bytes outside the server's budget: ``(1 - utilization) * G`` (or the flat overhead)."""
        return self.gpu_memory - self.budget

    @property
    def reserve(self) -> int:
        """Everything the server holds besides weights and KV cache: headroom, activation peak, CUDA graphs."""
        return self.headroom + self.activations + self.cuda_graphs

    @property
    def kv_pool(self) -> int:
        """Bytes left for KV blocks (negative: the weights and the reserve alone do not fit)."""
        return self.gpu_memory - self.reserve - self.weights

    @property
    def requests(self) -> int:
        """Requests whose cache fits this GPU's pool (floor; 0 if nothing fits)."""
        return memory.max_batch(self.kv_pool, self.per_request) if self.kv_pool > 0 else 0

    @property
    def starts(self) -> bool:
        """Whether what vLLM allocates before it measures fits outside its budget (else it refuses to start)."""
        return self.outside <= self.headroom

    def capacity_plan(self) -> memory.CapacityPlan:
        """This GPU as the capacity-planning chapter's :class:`~servebook.memory.CapacityPlan`,
        the reserve as its overhead."""
        return memory.capacity_plan(self.gpu_memory, self.weights, self.per_request, overhead=self.reserve)


@dataclass(frozen=True)
class ParallelPlan:
    """A model on ``layout`` of one kind of GPU: each stage's plan, a replica's requests, a node's users."""

    spec: ModelSpec
    gpu: GPU
    layout: Layout
    seq_len: int
    stages: tuple[StagePlan, ...]
    node_gpus: int | None = None

    @property
    def model(self) -> str:
        return self.spec.name

    @property
    def requests(self) -> int:
        """Requests of ``seq_len`` tokens one replica holds at once: its tightest GPU's."""
        return min(s.requests for s in self.stages)

    @property
    def fullest(self) -> StagePlan:
        """The GPU with the most weights (the first of equals): the one that decides whether the model fits."""
        return max(self.stages, key=lambda s: (s.weights, -s.stage))

    @property
    def replicas(self) -> int:
        """Replicas the node runs side by side (1 without a node)."""
        return 1 if self.node_gpus is None else self.node_gpus // self.layout.gpus

    @property
    def users(self) -> int:
        """Requests the node (or the one replica) holds at once."""
        return self.requests * self.replicas

    def describe(self, unit: int = GiB, name: str = "GiB") -> str:
        """One line per stage: G - reserve - weights = pool -> requests."""
        lines = []
        for s in self.stages:
            lines.append(f"stage {s.stage} ({s.layers} layers), per GPU: {s.gpu_memory / unit:,.1f} - reserve "
                         f"{s.reserve / unit:,.1f} - weights {s.weights / unit:,.1f} = KV pool "
                         f"{s.kv_pool / unit:,.1f} {name} -> {s.requests} requests")
        return "\n".join(lines)


def _stage(spec: ModelSpec, device: GPU, layout: Layout, stage: int, seq_len: int, sizes: dict) -> StagePlan:
    server, overhead = sizes["server"], sizes["overhead"]
    weights = memory.weight_bytes(stage_params(spec, layout, sizes["padding"])[stage], sizes["weights_dtype"],
                                  group_size=sizes["group_size"])
    if overhead is not None:
        budget, activations, graphs, outside = device.memory - overhead, 0, 0, 0
    else:
        budget, outside = server.budget(device.memory), nccl_reserve(device, layout)
        activations, graphs = profile_peak(spec, layout, server, stage), cuda_graph_reserve(spec, layout, server, stage)
    kv_dtype = sizes["kv_dtype"]
    return StagePlan(stage, len(stage_layers(spec, layout)[stage]), device.memory, budget, weights, activations,
                     graphs, stage_kv_bytes(spec, layout, seq_len, stage, kv_dtype),
                     stage_kv_bytes_per_token(spec, layout, stage, kv_dtype), outside)


def plan(model: ModelSpec | str, gpu: GPU | Node | str, layout: Layout, seq_len: int, *,
         weights_dtype: str = "fp16", group_size: int | None = None, kv_dtype: str = "fp16",
         server: Server | None = None, overhead: int | None = None, padding: int = VOCAB_PADDING) -> ParallelPlan:
    """The capacity plan of ``model`` on ``layout``: per GPU the reserve, the weights, the pool; then requests.

    ``gpu`` is a GPU (one replica) or a :class:`Node` (its GPUs must hold the
    replica, and it runs as many as fit).  The reserve is vLLM's with
    ``server`` (default :class:`Server`), or a flat ``overhead`` per GPU, the
    first edition's way: at t = p = 1 that is the capacity-planning chapter's plan exactly.
    """
    spec = models.resolve(model)
    check(spec, layout, padding)
    node = gpu if isinstance(gpu, Node) else None
    device = node.gpu if node else gpus.get(gpu)
    if node:
        node.holds(layout)
    seq_len = whole("seq_len", seq_len)
    if overhead is not None and server is not None:
        raise ValueError("give either server (vLLM's reserve) or overhead (a flat reserve per GPU), not both")
    if overhead is not None:
        overhead = byte_count("overhead", overhead)
    sizes = dict(server=server or Server(), overhead=overhead, weights_dtype=weights_dtype, group_size=group_size,
                 kv_dtype=kv_dtype, padding=padding)
    stages = tuple(_stage(spec, device, layout, s, seq_len, sizes) for s in range(layout.pipeline))
    return ParallelPlan(spec, device, layout, seq_len, stages, node.gpus if node else None)


@dataclass(frozen=True)
class VllmKVLog:
    """What vLLM 0.33.0 logs about the KV cache of a replica: per worker its memory, for the engine its tokens."""

    available: tuple[int, ...]  # bytes of KV memory per stage's workers ("Available KV cache memory")
    blocks: int                 # blocks every worker allocates: the smallest count among them
    block_size: int
    max_model_len: int

    @property
    def tokens(self) -> int:
        """"GPU KV cache size": max concurrency x max_model_len, truncated (``get_kv_cache_capacity``)."""
        return int(self.max_concurrency * self.max_model_len)

    @property
    def max_concurrency(self) -> float:
        """Requests of ``max_model_len`` tokens the blocks hold (``get_max_concurrency_for_kv_cache_config``)."""
        return self.blocks / ceil_div(self.max_model_len, self.block_size)

    def lines(self) -> list[str]:
        """The log lines, worker by worker, then the engine's (vLLM prints GiB rounded to 2 places)."""
        workers = [f"(Worker stage {s}) Available KV cache memory: {round(b / GiB, 2)} GiB"
                   for s, b in enumerate(self.available)]
        return workers + [f"GPU KV cache size: {self.tokens:,} tokens, Maximum concurrency for "
                          f"{self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x"]


def vllm_kv_log(result: ParallelPlan, max_model_len: int, block_size: int = 16) -> VllmKVLog:
    """What vLLM would log for ``result``'s pools: blocks of ``block_size`` tokens of every layer on each GPU.

    One block holds ``block_size`` tokens of every layer a worker serves, at
    that worker's KV bytes per token; a model with sliding or chunked layers
    groups its layers differently, and is refused here.
    """
    spec = result.spec
    if spec.local_kind is not None:
        raise ValueError(f"{spec.display_name} has {spec.local_kind} layers: vLLM groups their pages apart, "
                         "which this log does not model")
    max_model_len, block_size = whole("max_model_len", max_model_len), whole("block_size", block_size)
    blocks = min(max(s.kv_pool, 0) // (block_size * s.per_token) for s in result.stages)
    return VllmKVLog(tuple(max(s.kv_pool, 0) for s in result.stages), blocks, block_size, max_model_len)
