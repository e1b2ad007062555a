"""What splitting costs: the all-reduces of tensor parallelism, the sends and the bubble of a pipeline.

**Tensor parallelism** all-reduces the hidden state twice per layer of a Llama
block: after the attention output and after the MLP's down projection, both
row-parallel (each GPU holds a partial sum of the d_model outputs).  Per
token and layer that is 2 * d_model * p bytes of messages; the embedding's
vocabulary-parallel lookup adds one all-reduce per token and the LM head an
all-gather of the logits (vLLM 0.33.0: ``RowParallelLinear``,
``VocabParallelEmbedding``, ``LogitsProcessor``).  A mixture of experts
without expert parallelism reduces its experts' output like an MLP's; MLA's
output projection is row-parallel too.

A **ring all-reduce** of an M-byte message over t GPUs runs a reduce-scatter
and an all-gather, 2 (t - 1) steps each moving M / t bytes to the next GPU,
so every GPU sends (and receives) 2 (t - 1) / t * M bytes, at the link's
*one-way* rate (it sends to one neighbour while it receives from the other).
At decode the messages are small (a batch of 16 tokens of Llama-3-70B is
256 KiB), so the latency of the 2 (t - 1) steps matters as much as the bytes:

    time = base + 2 (t - 1) * hop + 2 (t - 1) / t * M / B

with the latencies of NCCL's own tuning model for its low-latency (LL) ring
protocol (``src/graph/tuning.cc``, the same in NCCL 2.20.3, 2.28.3 and
2.30.7: base 6.6 us; per hop 0.6 us on NVLink, 1.0 us on PCIe, 2.7 us
through the network; NCCL 2.7 had 3.6 and 0.47 us) and B the link's
bandwidth per direction.  Both are the best case (LL reaches only a part of
the bandwidth; the large-message protocol has larger latencies), so the time
is a lower bound, like the roofline.

A **pipeline** sends each token's hidden state and residual (2 * d_model * p
bytes) from stage to stage, and its stages wait for one another: with m
batches in flight on p stages, each stage is busy m of every p stage-times
(vLLM keeps up to p batches in flight), so a fraction (p - m) / p idles.
"""

from __future__ import annotations

from ..checks import whole
from ..gpus import Link
from ..models import ModelSpec
from ..units import bytes_per_element

ALLREDUCES_PER_LAYER = 2
"""Attention output and MLP down projection: the two row-parallel layers of a Llama block."""

NCCL_VERSION = "2.30.7"
"""The NCCL whose tuning model the latencies below are read from (the same as in 2.20.3 and 2.28.3)."""

NCCL_BASE_LATENCY = 6.6e-6
"""Seconds: NCCL's base latency of a ring all-reduce, LL protocol (``tuning.cc``, ``baseLat``)."""

NCCL_HOP_LATENCY = {"nvlink": 0.6e-6, "pcie": 1.0e-6}
"""Seconds per ring step on each kind of link, LL protocol (``tuning.cc``, ``hwLat``)."""

NCCL_NET_HOP_LATENCY = 2.7e-6
"""Seconds per ring step that crosses the network between nodes, LL protocol (``hwLat``, ``NET``)."""


def link_kind(link: Link) -> str:
    """``"pcie"`` for a PCIe link, ``"nvlink"`` for a GPU-to-GPU link (NVLink, NVLink bridge, Infinity Fabric)."""
    return "pcie" if link.name.startswith("PCIe") else "nvlink"


def allreduce_bytes_per_token_per_layer(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Bytes all-reduced per token per layer: two messages of the hidden state (2 * d_model * p)."""
    return int(ALLREDUCES_PER_LAYER * spec.d_model * bytes_per_element(dtype))


def ring_share(tensor: int) -> float:
    """Fraction of an all-reduced message each GPU sends in a ring of ``tensor`` GPUs: 2 (t - 1) / t."""
    tensor = whole("tensor", tensor)
    return 2 * (tensor - 1) / tensor


def allreduce_latency(tensor: int, link: Link) -> float:
    """Seconds a ring all-reduce of ``tensor`` GPUs costs before its bytes: NCCL's base and 2 (t - 1) hops."""
    tensor = whole("tensor", tensor)
    if tensor == 1:
        return 0.0
    return NCCL_BASE_LATENCY + 2 * (tensor - 1) * NCCL_HOP_LATENCY[link_kind(link)]


def allreduce_time(message: int, tensor: int, link: Link | None) -> float:
    """Lower bound on a ring all-reduce of ``message`` bytes over ``tensor`` GPUs joined by ``link``."""
    message, tensor = whole("message", message, 0), whole("tensor", tensor)
    if tensor == 1:
        return 0.0
    if link is None:
        raise ValueError(f"an all-reduce over {tensor} GPUs needs the link that joins them")
    return allreduce_latency(tensor, link) + ring_share(tensor) * message / link.per_direction


def stage_send_bytes_per_token(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Bytes one token sends from a pipeline stage to the next: its hidden state and residual."""
    return int(2 * spec.d_model * bytes_per_element(dtype))


def pipeline_idle(stages: int, in_flight: int) -> float:
    """Fraction of the time each stage idles with ``in_flight`` batches going round ``stages`` stages: (p - m) / p."""
    stages, in_flight = whole("stages", stages), whole("in_flight", in_flight)
    return max(0, stages - in_flight) / stages


def pipeline_bubble(stages: int, micro_batches: int) -> float:
    """Idle share of a pipeline that fills and drains once for ``micro_batches`` micro-batches: (p - 1) / (m + p - 1).

    A single batch (m = 1) leaves each of p stages idle (p - 1) / p of the time.
    """
    stages, micro_batches = whole("stages", stages), whole("micro_batches", micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)
