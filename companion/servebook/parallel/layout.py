"""A parallel layout: how many GPUs split each layer (tensor parallelism) and the layers (pipeline parallelism).

Tensor parallelism of size t splits every layer's weights over t GPUs, which
work on every token together; pipeline parallelism of size p gives each of p
stages a run of consecutive layers.  A replica uses t * p GPUs.

vLLM (0.33.0, the version the book describes) refuses what it cannot split
evenly, and so does :func:`check`: the query heads (``LlamaAttention``:
``total_num_heads % tp_size == 0``), the key/value heads (divided, or
replicated when there are fewer than t: ``tp_size % total_num_kv_heads == 0``),
every column-parallel width, the experts' widths (``FusedMoEConfig``:
``intermediate_size % tp_size == 0``) and the padded vocabulary
(``VocabParallelEmbedding``); a pipeline needs a layer per stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import gpus
from ..checks import whole
from ..gpus import GPU, Link
from ..models import ModelSpec
from ..units import ceil_div

VLLM_VERSION = "0.33.0"
VOCAB_PADDING = 64
"""vLLM pads the vocabulary to a multiple of 64 rows before it splits it (``DEFAULT_VOCAB_PADDING_SIZE``)."""


@dataclass(frozen=True)
class Layout:
    """``tensor`` GPUs per stage (``--tensor-parallel-size``), ``pipeline`` stages (``--pipeline-parallel-size``)."""

    tensor: int = 1
    pipeline: int = 1

    def __post_init__(self) -> None:
        whole("tensor", self.tensor)
        whole("pipeline", self.pipeline)

    @property
    def gpus(self) -> int:
        """GPUs one replica of the model uses: t * p."""
        return self.tensor * self.pipeline

    def __str__(self) -> str:
        return f"TP {self.tensor}" + (f" x PP {self.pipeline}" if self.pipeline > 1 else "")


def padded_vocab(spec: ModelSpec, padding: int = VOCAB_PADDING) -> int:
    """Rows of the embedding table and the LM head as vLLM allocates them: the vocabulary rounded up to ``padding``."""
    padding = whole("padding", padding)
    return ceil_div(spec.vocab_size, padding) * padding


def _divides(what: str, size: int, t: int, name: str, why: str) -> None:
    if size % t:
        raise ValueError(f"tensor-parallel size {t} must divide {what} ({size}) of {name}: {why}")


def check(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> Layout:
    """``layout`` if vLLM can split ``spec`` that way; a ``ValueError`` naming what does not divide otherwise."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a parallel.Layout, got {type(layout).__name__}")
    t, name = layout.tensor, spec.display_name
    if layout.pipeline > spec.n_layers:
        raise ValueError(f"pipeline-parallel size {layout.pipeline} is larger than the {spec.n_layers} layers of "
                         f"{name}: every stage needs at least one layer")
    _divides("the attention heads", spec.n_heads, t, name, "each GPU computes whole query heads")
    n_kv = spec.n_kv_heads
    if spec.mla is None and n_kv < t and t % n_kv:
        raise ValueError(f"tensor-parallel size {t} must be a multiple of the {n_kv} key/value heads of {name} "
                         "when it exceeds them: each head is then copied to t / n_kv GPUs")
    if spec.mla is None and n_kv >= t:
        _divides("the key/value heads", n_kv, t, name, "each GPU keeps whole key/value heads")
    if spec.dense_mlp_layers and spec.intermediate_size is not None:
        _divides("the MLP width", spec.intermediate_size, t, name, "each GPU computes a slice of the MLP")
    if spec.moe is not None:
        _divides("the expert width", spec.moe.expert_size, t, name, "each GPU holds a slice of every expert")
        if spec.moe.shared_size:
            _divides("the shared expert width", spec.moe.shared_size, t, name, "each GPU holds a slice of it")
    if spec.vocab_size is not None:
        _divides(f"the vocabulary padded to {padding}", padded_vocab(spec, padding), t, name,
                 "each GPU holds a slice of the embedding table and the LM head")
    return layout


def pipeline_stages(n_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per pipeline stage, as vLLM 0.33.0 splits them (``distributed/utils.py``, ``get_pp_indices``).

    Each stage gets n_layers // p layers; the r left over go one each to the
    stages before the last (the second to last first), because the last stage
    also holds the final norm and the LM head.  80 layers in 3 stages: 27, 27, 26.
    """
    n_layers, stages = whole("n_layers", n_layers), whole("stages", stages, 1, n_layers)
    split = [n_layers // stages] * stages
    for i in range(2, n_layers % stages + 2):
        split[-i] += 1
    return tuple(split)


def stage_layers(spec: ModelSpec, layout: Layout) -> list[range]:
    """The layer indices of each pipeline stage."""
    bounds, start = [], 0
    for count in pipeline_stages(spec.n_layers, layout.pipeline):
        bounds.append(range(start, start + count))
        start += count
    return bounds


@dataclass(frozen=True)
class Node:
    """A server: ``gpus`` GPUs of one kind (8 on an HGX baseboard), joined by the GPU's links."""

    gpu: GPU
    gpus: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu", gpus.get(self.gpu))
        whole("gpus", self.gpus)

    def holds(self, layout: Layout) -> Layout:
        """``layout`` if one replica fits the node; a ``ValueError`` otherwise (tensor parallelism stays in a node)."""
        if layout.gpus > self.gpus:
            raise ValueError(f"{layout} needs {layout.gpus} GPUs, more than the node's {self.gpus} "
                             f"{self.gpu.display_name}: split across nodes, it would run over the network")
        return layout

    def replicas(self, layout: Layout) -> int:
        """Whole replicas of ``layout`` the node runs side by side."""
        return self.gpus // self.holds(layout).gpus


def tensor_link(gpu: GPU | str, tensor: int) -> Link | None:
    """The link a tensor-parallel group of ``tensor`` GPUs all-reduces over: NVLink where it joins them all, else PCIe.

    ``None`` for one GPU.  A bridged pair of H100 PCIe cards is on NVLink at
    t = 2 and on PCIe at t = 4; an HGX baseboard is on NVLink up to 8.
    """
    gpu, tensor = gpus.get(gpu), whole("tensor", tensor)
    if tensor == 1:
        return None
    link = gpu.nvlink
    if link is not None and link.joins is not None and tensor <= link.joins:
        return link
    return gpu.pcie
