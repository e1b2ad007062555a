"""Weights per GPU: every tensor of the model, split the way vLLM's parallel layers split it.

vLLM 0.33.0 builds each linear layer as one of a few parallel kinds
(``model_executor/layers/linear.py``, ``vocab_parallel_embedding.py``):

- **column-parallel** (q, k, v, gate and up projections; MLA's q_b and kv_b):
  the output features are split, each GPU holds out/t rows, and its bias slice;
- **row-parallel** (the attention output and the MLP's down projection): the
  input features are split, each GPU holds in/t columns and computes a partial
  sum that an all-reduce adds up; the bias is kept whole on every GPU
  (``RowParallelLinear`` adds it on rank 0 only);
- **key/value heads**: ``QKVParallelLinear`` gives each GPU max(1, n_kv / t)
  whole heads, so with fewer heads than GPUs every head's K and V projections
  are copied to t / n_kv GPUs;
- **vocabulary-parallel** (the embedding table and the LM head): the padded
  vocabulary is split in rows;
- **replicated**: norms, the MoE router (``GateLinear``), MLA's down-projections
  (``ReplicatedLinear``, and the fused q/kv down-projection built with
  ``disable_tp``), a learned position table (``nn.Embedding``).

A mixture of experts under tensor parallelism (no expert parallelism) holds a
slice of every expert: the expert width is split like an MLP's.  A pipeline
stage holds its layers; the first also the embedding, the last the final norm
and the LM head (and, for tied embeddings, its own copy of the table).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import memory
from ..models import ModelSpec
from .layout import VOCAB_PADDING, Layout, check, padded_vocab, stage_layers

COLUMN, ROW, KV_HEADS, VOCAB, REPLICATED = "column", "row", "key/value heads", "vocabulary", "replicated"
SPLITS = (COLUMN, ROW, KV_HEADS, VOCAB, REPLICATED)


@dataclass(frozen=True)
class Shard:
    """One kind of tensor of one layer (or of the model's ends): its parameters whole and on one GPU."""

    name: str
    split: str
    params: int      # the whole tensor, with its bias
    per_gpu: int     # what one GPU of a tensor-parallel group holds
    tensor: int = 1  # GPUs in the group

    @property
    def copies(self) -> float:
        """GPUs that hold each parameter: 1 if split evenly, t if replicated, t / n_kv for copied KV heads."""
        return self.per_gpu * self.tensor / self.params if self.params else 0.0


def _linear(name: str, split: str, n_in: int, n_out: int, bias: bool, t: int, kv_share: int = 0) -> Shard:
    """A linear layer of ``n_in`` -> ``n_out`` and its bias, and one GPU's part of it under ``split``."""
    whole_params = n_in * n_out + (n_out if bias else 0)
    if split == COLUMN:
        per_gpu = n_in * (n_out // t) + (n_out // t if bias else 0)
    elif split == ROW:
        per_gpu = (n_in // t) * n_out + (n_out if bias else 0)
    elif split == KV_HEADS:  # n_out is heads * width; kv_share is one GPU's heads * width
        per_gpu = n_in * kv_share + (kv_share if bias else 0)
    else:
        per_gpu = whole_params
    return Shard(name, split, whole_params, per_gpu, t)


def _replicated(name: str, params: int, t: int) -> Shard:
    return Shard(name, REPLICATED, params, params, t)


def kv_heads_per_gpu(spec: ModelSpec, tensor: int) -> int:
    """Key/value heads each GPU keeps: vLLM's max(1, n_kv // t); MLA keeps its one latent on every GPU."""
    if spec.mla is not None:
        return 1
    return max(1, spec.n_kv_heads // tensor)


def _attention(spec: ModelSpec, t: int) -> list[Shard]:
    d, heads, bias = spec.d_model, spec.n_heads, spec.biases
    if spec.mla is not None:
        return _mla(spec, t)
    kv = kv_heads_per_gpu(spec, t)
    found = [_linear("q projection", COLUMN, d, heads * spec.head_dim, bias.qkv, t),
             _linear("k projection", KV_HEADS, d, spec.n_kv_heads * spec.head_dim, bias.qkv, t, kv * spec.head_dim),
             _linear("v projection", KV_HEADS, d, spec.n_kv_heads * spec.v_head_dim, bias.qkv, t,
                     kv * spec.v_head_dim),
             _linear("attention output", ROW, heads * spec.v_head_dim, d, bias.o, t)]
    if spec.norms.qk:
        found.append(_replicated("q and k norms", 2 * spec.norms.params(spec.head_dim), t))
    return found


def _mla(spec: ModelSpec, t: int) -> list[Shard]:
    """MLA (DeepseekV2MLAAttention): the down-projections and their norms replicated, the rest split by heads."""
    mla, d, heads, down_bias = spec.mla, spec.d_model, spec.n_heads, spec.biases.qkv
    q_width = heads * spec.head_dim
    if mla.q_rank is None:
        query = [_linear("q projection", COLUMN, d, q_width, False, t)]
    else:
        query = [_linear("q down-projection", REPLICATED, d, mla.q_rank, down_bias, t),
                 _replicated("q down-projection norm", mla.q_rank, t),
                 _linear("q up-projection", COLUMN, mla.q_rank, q_width, False, t)]
    return query + [
        _linear("latent down-projection", REPLICATED, d, mla.cache_width, down_bias, t),
        _replicated("latent norm", mla.kv_rank, t),
        _linear("key/value up-projection", COLUMN, mla.kv_rank, heads * (mla.nope_dim + spec.v_head_dim), False, t),
        _linear("attention output", ROW, heads * spec.v_head_dim, d, spec.biases.o, t)]


def _mlp(spec: ModelSpec, width: int, t: int, label: str = "MLP", gated: bool | None = None) -> list[Shard]:
    d, bias = spec.d_model, spec.biases.mlp
    gated = spec.gated_mlp if gated is None else gated
    ups = [f"{label} gate", f"{label} up"] if gated else [f"{label} up"]
    return [_linear(name, COLUMN, d, width, bias, t) for name in ups] + [
        _linear(f"{label} down", ROW, width, d, bias, t)]


def _experts(spec: ModelSpec, t: int) -> list[Shard]:
    """One MoE layer (FusedMoE without expert parallelism): the router whole, a slice of every expert."""
    moe, d = spec.moe, spec.d_model
    per_expert = 3 * d * moe.expert_size
    found = [_replicated("router", d * moe.n_experts, t),
             Shard("routed experts", COLUMN, moe.n_experts * per_expert, moe.n_experts * per_expert // t, t)]
    if moe.n_shared:
        found += _mlp(spec, moe.shared_size, t, "shared expert", gated=True)
        if moe.shared_gate:
            found.append(_replicated("shared expert gate", d, t))
    return found


def layer_tensors(spec: ModelSpec, layout: Layout, layer: int = 0) -> list[Shard]:
    """The tensors of layer ``layer`` and one GPU's part of each, under ``layout``'s tensor parallelism."""
    t = check(spec, layout).tensor
    norms = _replicated("norms", spec.norms.per_layer * spec.norms.params(spec.d_model), t)
    moe = spec.moe is not None and layer not in spec.moe.dense_layers
    mlp = _experts(spec, t) if moe else _mlp(spec, spec.intermediate_size, t)
    return _attention(spec, t) + mlp + [norms]


def first_stage_tensors(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> list[Shard]:
    """What the first pipeline stage holds besides its layers: the embedding table, a learned position table."""
    t, d = check(spec, layout, padding).tensor, spec.d_model
    found = [Shard("embedding table", VOCAB, spec.vocab_size * d, padded_vocab(spec, padding) // t * d, t)]
    if spec.learned_positions:
        found.append(_replicated("position table", spec.learned_positions * d, t))
    return found


def last_stage_tensors(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> list[Shard]:
    """What the last stage holds besides its layers: the final norm and the LM head.

    A tied LM head is the embedding table itself: nothing more on one stage,
    a copy of the table on the last stage of a pipeline (vLLM builds
    ``embed_tokens`` there too).
    """
    t, d = check(spec, layout, padding).tensor, spec.d_model
    found = [_replicated("final norm", spec.norms.params(d), t)] if spec.norms.final else []
    if not spec.tied_embeddings or layout.pipeline > 1:
        found.append(Shard("LM head", VOCAB, spec.vocab_size * d, padded_vocab(spec, padding) // t * d, t))
    return found


def stage_tensors(spec: ModelSpec, layout: Layout, stage: int, padding: int = VOCAB_PADDING) -> list[Shard]:
    """Every tensor one GPU of pipeline stage ``stage`` (0-based) holds, layer by layer."""
    layers = stage_layers(spec, layout)[stage]
    found = first_stage_tensors(spec, layout, padding) if stage == 0 else []
    for layer in layers:
        found += layer_tensors(spec, layout, layer)
    if stage == layout.pipeline - 1:
        found += last_stage_tensors(spec, layout, padding)
    return found


def stage_params(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> tuple[int, ...]:
    """Parameters one GPU of each stage holds: the exact sum of its shards."""
    return tuple(sum(x.per_gpu for x in stage_tensors(spec, layout, s, padding)) for s in range(layout.pipeline))


def params_per_gpu(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> int:
    """Parameters on the fullest GPU of ``layout``: what decides whether the weights fit."""
    return max(stage_params(spec, layout, padding))


def weight_bytes_per_gpu(spec: ModelSpec, layout: Layout, dtype: str = "fp16", group_size: int | None = None,
                         padding: int = VOCAB_PADDING) -> int:
    """Bytes of weights on the fullest GPU: its parameters in ``dtype`` (with group scales, as memory.weight_bytes)."""
    return memory.weight_bytes(params_per_gpu(spec, layout, padding), dtype, group_size=group_size)


def replicated_excess(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> dict[str, int]:
    """Per tensor kind, summed over the fullest stage's layers: parameters one GPU holds beyond its 1/t share."""
    per_stage = stage_params(spec, layout, padding)
    stage = per_stage.index(max(per_stage))
    excess: dict[str, int] = {}
    for x in stage_tensors(spec, layout, stage, padding):
        extra = x.per_gpu * layout.tensor - x.params
        if extra > 0 and x.split != VOCAB:  # the vocabulary's padding is not a copy
            excess[x.name] = excess.get(x.name, 0) + extra // layout.tensor
    return excess
