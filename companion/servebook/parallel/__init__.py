"""Several GPUs for one model: tensor and pipeline parallelism, counted tensor by tensor, as vLLM 0.33.0 splits them.

- :mod:`.layout`: :class:`Layout` (TP = t, PP = p), the checks vLLM makes,
  pipeline stages (``get_pp_indices``), a :class:`Node` and the link a group
  all-reduces over;
- :mod:`.weights`: every tensor's parallel kind and one GPU's shard of it;
- :mod:`.kv`: key/value heads per GPU, copied past n_kv GPUs; the cache per GPU;
- :mod:`.reserve`: what vLLM keeps back on each GPU (budget, activation
  peak, CUDA graphs, NCCL's buffers), replacing the flat 4 GiB;
- :mod:`.comm`: bytes all-reduced per token, the ring all-reduce's time, the pipeline bubble;
- :mod:`.step`: one GPU's step shape for the roofline, a step through a pipeline;
- :mod:`.plan`: the capacity plan per GPU, per replica and per node, and what vLLM logs.
"""

from .comm import (
    ALLREDUCES_PER_LAYER,
    allreduce_bytes_per_token_per_layer,
    allreduce_latency,
    allreduce_time,
    link_kind,
    pipeline_bubble,
    pipeline_idle,
    ring_share,
    stage_send_bytes_per_token,
)
from .kv import kv_bytes_per_token_per_gpu, kv_cache_bytes_per_gpu, kv_copies, kv_width_per_gpu
from .layout import VOCAB_PADDING, Layout, Node, check, padded_vocab, pipeline_stages, stage_layers, tensor_link
from .plan import ParallelPlan, StagePlan, VllmKVLog, plan, vllm_kv_log
from .reserve import (
    GPU_MEMORY_UTILIZATION,
    Server,
    cuda_graph_reserve,
    forward_peak,
    nccl_reserve,
    profile_peak,
    sampler_peak,
)
from .step import PipelineStep, fullest_stage, pipeline_step, step_shape
from .weights import (
    SPLITS,
    Shard,
    kv_heads_per_gpu,
    layer_tensors,
    params_per_gpu,
    replicated_excess,
    stage_params,
    stage_tensors,
    weight_bytes_per_gpu,
)

__all__ = [
    "ALLREDUCES_PER_LAYER", "GPU_MEMORY_UTILIZATION", "Layout", "Node", "ParallelPlan", "PipelineStep", "SPLITS",
    "Server", "Shard", "StagePlan", "VOCAB_PADDING", "VllmKVLog", "allreduce_bytes_per_token_per_layer",
    "allreduce_latency", "allreduce_time", "check", "cuda_graph_reserve", "forward_peak", "fullest_stage",
    "kv_bytes_per_token_per_gpu", "kv_cache_bytes_per_gpu", "kv_copies", "kv_heads_per_gpu", "kv_width_per_gpu",
    "layer_tensors", "link_kind", "nccl_reserve", "padded_vocab", "params_per_gpu", "pipeline_bubble",
    "pipeline_idle", "pipeline_stages", "pipeline_step", "plan", "profile_peak", "replicated_excess", "ring_share",
    "sampler_peak", "stage_layers", "stage_params", "stage_send_bytes_per_token", "stage_tensors", "step_shape",
    "tensor_link", "vllm_kv_log", "weight_bytes_per_gpu",
]
