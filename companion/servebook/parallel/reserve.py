"""What a vLLM server holds on each GPU besides the weights and the KV cache, modelled instead of guessed.

The first edition kept a flat 4 GiB back on every GPU.  vLLM 0.33.0 sizes its
cache per GPU in four moves (``v1/worker/gpu_worker.py``, ``init_device`` and
``determine_available_memory``):

1. it starts the CUDA context, the communication library (NCCL's buffers)
   and cuBLAS's handles, and only then measures: those live *outside* its
   budget;
2. its budget is ``ceil(gpu_memory_utilization * total memory)``
   (``v1/worker/utils.py``, ``request_memory``; the default 0.92 is
   ``CacheConfig``'s), and it refuses to start when less than that is free:
   the headroom ``total - budget`` must hold step 1;
3. it loads the weights and runs a profiling forward pass of
   ``max_num_batched_tokens`` tokens, then the sampler on one row per request
   of up to ``max_num_seqs`` (``gpu_model_runner.py``, ``profile_run``): the
   activation peak of that pass is kept back;
4. it captures CUDA graphs for a profile and keeps back their memory
   (``profile_cudagraph_memory``, on by default since v0.21.0); what is left
   of the budget becomes KV blocks.

So per GPU: G = headroom + weights + activation peak + CUDA graphs + KV pool.
The activation peak here is modelled from the shapes (:func:`forward_peak`,
:func:`sampler_peak`); vLLM measures it.  The CUDA graphs' memory is modelled
as vLLM estimates it, from the pool of the largest graph and a floor per
further graph.  The communication library's buffers are an estimate from one
NCCL log (:func:`nccl_reserve`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import gpus
from ..checks import flag, interval, whole
from ..models import ModelSpec
from ..units import MiB, bytes_per_element, canonical_dtype
from .kv import kv_width_per_gpu
from .layout import VOCAB_PADDING, Layout, check, padded_vocab, stage_layers, tensor_link

GPU_MEMORY_UTILIZATION = 0.92
"""vLLM 0.33.0's default share of each GPU's *total* memory it may use (``CacheConfig.gpu_memory_utilization``)."""

MAX_CUDAGRAPH_CAPTURE = 512
"""The largest batch vLLM captures a CUDA graph for by default (``CompilationConfig.max_cudagraph_capture_size``)."""

CUDAGRAPH_MODES = 2
"""FULL graphs for uniform decode batches and PIECEWISE ones for the rest (``FULL_AND_PIECEWISE``)."""

CUDAGRAPH_FLOOR = MiB
"""vLLM counts at least 1 MiB for each graph after a mode's first (``profile_cudagraph_memory``)."""

SAMPLER_BYTES_PER_LOGIT = 12
"""float32 logits, probabilities and exponential noise for the draw (``sampler.py``, ``topk_topp_sampler.py``)."""

NCCL_BUFFSIZE = 4 * MiB
"""NCCL's buffer per channel and peer (``NCCL_BUFFSIZE``; ``buffSize 4194304`` in the log of vLLM issue 9699)."""

NCCL_CHANNELS = 24
"""Channels NCCL opened on 8 H200 in that log (its nvlsPerRankSize, 301,989,888 bytes = 24 x 2 x (4 + 2) MiB)."""

NVLS_MEMSIZE = 2 * MiB
"""NCCL's extra memory per NVLS channel buffer (``memSize 2097152`` in the same log)."""


@dataclass(frozen=True)
class Server:
    """The engine settings that decide what a GPU keeps back: vLLM 0.33.0's defaults on an H100 or H200.

    ``max_num_batched_tokens`` (the profiling pass's tokens) and ``max_num_seqs``
    default to ``EngineArgs.get_batch_defaults`` for the OpenAI server on a GPU
    of 70 to 160 GiB that is not an A100 (8,192 and 1,024); ``cuda_graphs=False``
    is ``--enforce-eager``.
    """

    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    cuda_graphs: bool = True
    activation_dtype: str = "bf16"

    def __post_init__(self) -> None:
        interval("gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, include_low=False)
        whole("max_num_batched_tokens", self.max_num_batched_tokens)
        whole("max_num_seqs", self.max_num_seqs)
        flag("cuda_graphs", self.cuda_graphs)
        object.__setattr__(self, "activation_dtype", canonical_dtype(self.activation_dtype))

    def budget(self, gpu_memory: int) -> int:
        """Bytes vLLM may use on a GPU of ``gpu_memory`` bytes: ceil(utilization * total), as ``request_memory``."""
        return math.ceil(whole("gpu_memory", gpu_memory) * self.gpu_memory_utilization)

    def capture_sizes(self) -> list[int]:
        """Batch sizes vLLM captures graphs for: 1, 2, 4, every 8 to 256, every 16 past (``_set_cudagraph_sizes``)."""
        largest = min(2 * self.max_num_seqs, MAX_CUDAGRAPH_CAPTURE)
        sizes = [s for s in (1, 2, 4) if s <= largest] + list(range(8, min(largest + 1, 256), 8))
        sizes += list(range(256, largest + 1, 16))
        return [s for s in sizes if s <= self.max_num_batched_tokens]


def layer_transient(spec: ModelSpec, tensor: int, moe: bool = False) -> int:
    """Elements per token of the largest tensors a layer holds at once on one GPU, beyond the residual stream.

    The attention's q/k/v output and its result; a dense MLP's gate-and-up
    output (2 I / t) with its activation (I / t); FusedMoE's caches for k
    experts per token (``fused_moe.py``: max(2 I_e / t, d) + I_e / t each).
    """
    heads = spec.n_heads // tensor
    if spec.mla is not None:
        attention = heads * spec.head_dim + spec.mla.cache_width + heads * (spec.mla.nope_dim + 2 * spec.v_head_dim)
    else:
        attention = heads * (spec.head_dim + spec.v_head_dim) + kv_width_per_gpu(spec, tensor)
    if moe:
        width = spec.moe.expert_size // tensor
        mlp = spec.moe.top_k * (max(2 * width, spec.d_model) + width)
    else:
        width = spec.intermediate_size // tensor
        mlp = (3 if spec.gated_mlp else 2) * width
    return max(attention, mlp)


def forward_peak(spec: ModelSpec, layout: Layout, tokens: int, stage: int = 0, dtype: str = "bf16") -> int:
    """Activation bytes of a forward pass of ``tokens`` tokens on one GPU of ``stage``, at its largest layer.

    The residual stream and the hidden state (2 d per token) are whole on
    every GPU: tensor parallelism splits the weights and the heads, not the
    tokens' hidden states.
    """
    tokens = whole("tokens", tokens)
    layers = stage_layers(spec, check(spec, layout))[stage]
    kinds = {spec.moe is not None and i not in spec.moe.dense_layers for i in layers}  # True: an MoE layer
    transient = max(layer_transient(spec, layout.tensor, moe) for moe in kinds)
    return math.ceil(tokens * (2 * spec.d_model + transient) * bytes_per_element(dtype))


def sampler_peak(spec: ModelSpec, rows: int, dtype: str = "bf16", padding: int = VOCAB_PADDING) -> int:
    """Bytes of the profiling run's sampler: ``rows`` rows of the whole padded vocabulary's logits, on the last stage.

    The LM head's slices are gathered, so every GPU of the last stage holds
    whole rows: the logits in the model's dtype, then their float32 copies.
    """
    rows = whole("rows", rows)
    return math.ceil(rows * padded_vocab(spec, padding) * (bytes_per_element(dtype) + SAMPLER_BYTES_PER_LOGIT))


def profile_peak(spec: ModelSpec, layout: Layout, server: Server, stage: int = 0) -> int:
    """The activation peak vLLM keeps back on one GPU of ``stage``: the larger of its forward pass and its sampler."""
    forward = forward_peak(spec, layout, server.max_num_batched_tokens, stage, server.activation_dtype)
    if stage != layout.pipeline - 1:
        return forward
    rows = min(server.max_num_seqs, server.max_num_batched_tokens)
    return max(forward, sampler_peak(spec, rows, server.activation_dtype))


def cuda_graph_reserve(spec: ModelSpec, layout: Layout, server: Server, stage: int = 0) -> int:
    """Bytes vLLM keeps back for CUDA graphs: the pool of the largest graph, and the floor for each further one."""
    if not server.cuda_graphs:
        return 0
    sizes = server.capture_sizes()
    pool = forward_peak(spec, layout, max(sizes), stage, server.activation_dtype)
    return pool + CUDAGRAPH_MODES * (len(sizes) - 1) * CUDAGRAPH_FLOOR


def nccl_reserve(gpu: gpus.GPU | str, layout: Layout) -> int:
    """An estimate of NCCL's buffers on each GPU of ``layout``, allocated before vLLM measures (outside its budget).

    A buffer of ``NCCL_BUFFSIZE`` to each of the two ring neighbours per
    channel; and on an NVSwitch baseboard of Hopper or Blackwell GPUs with
    more than two GPUs in the group, NVLink SHARP's buffers, channels x 2 x
    (buffSize + memSize) for each GPU of the group (vLLM issue 9699: 2.25 GiB
    on each of 8 H200; ``NCCL_NVLS_ENABLE=0`` frees them).
    """
    device = gpus.get(gpu)
    if layout.gpus == 1:
        return 0
    ring = 2 * NCCL_CHANNELS * NCCL_BUFFSIZE
    link = tensor_link(device, layout.tensor)
    switched = link is not None and link is device.nvlink and (link.joins or 0) >= 8
    nvls = switched and layout.tensor > 2 and gpus.record(device.name)["architecture"] in ("Hopper", "Blackwell")
    return ring + (NCCL_CHANNELS * 2 * (NCCL_BUFFSIZE + NVLS_MEMSIZE) * layout.tensor if nvls else 0)
