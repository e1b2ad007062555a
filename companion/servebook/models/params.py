"""Parameter counts from a shape: every tensor a :class:`~servebook.models.spec.ModelSpec` describes.

The count is exact for the tensors the shape names: the embedding table (and
the LM head unless it is tied), a learned position table, and per layer the
attention projections (with their biases), the MLP or the experts and their
router, and the norms.  It is what ``sum(p.numel() for p in
model.parameters())`` gives for the same config built by transformers;
``scripts/count_params_oracle.py`` checks that for every registry model.

**Active parameters** (a mixture of experts): everything but the routed
experts a token does not use, so per MoE layer ``n_experts - top_k`` experts
are left out.  The embedding table and the LM head are included, as Mixtral's
12.9 B and DeepSeek-V3's 37 B are usually quoted (DeepSeek's README_WEIGHTS
quotes 36.6 B without the input embedding); a dense model's active count is
its total.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import ModelSpec


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def attention_params(spec: ModelSpec) -> int:
    """One layer's attention: q, k, v and output projections (or MLA's), their biases, q/k norms."""
    d, heads = spec.d_model, spec.n_heads
    if spec.mla is not None:
        # DeepSeek's attention_bias puts biases on the two down-projections and the output only.
        mla, down_bias = spec.mla, spec.biases.qkv
        q_width = heads * spec.head_dim
        if mla.q_rank is None:
            query = _linear(d, q_width, False)
        else:  # down-projection, its norm, up-projection
            query = _linear(d, mla.q_rank, down_bias) + mla.q_rank + _linear(mla.q_rank, q_width, False)
        latent = _linear(d, mla.cache_width, down_bias) + mla.kv_rank  # down-projection and its norm
        up = _linear(mla.kv_rank, heads * (mla.nope_dim + spec.v_head_dim), False)
        return query + latent + up + _linear(heads * spec.v_head_dim, d, spec.biases.o)
    qkv = spec.biases.qkv
    q = _linear(d, heads * spec.head_dim, qkv)
    k = _linear(d, spec.n_kv_heads * spec.head_dim, qkv)
    v = _linear(d, spec.n_kv_heads * spec.v_head_dim, qkv)
    o = _linear(heads * spec.v_head_dim, d, spec.biases.o)
    qk_norms = 2 * spec.norms.params(spec.head_dim) if spec.norms.qk else 0
    return q + k + v + o + qk_norms


def mlp_params(spec: ModelSpec, width: int, gated: bool | None = None) -> int:
    """A dense MLP of intermediate ``width``: gate, up, down (or up, down when not gated), with biases."""
    gated = spec.gated_mlp if gated is None else gated
    bias = spec.biases.mlp
    return (2 if gated else 1) * _linear(spec.d_model, width, bias) + _linear(width, spec.d_model, bias)


def expert_params(spec: ModelSpec) -> int:
    """One routed expert: a gated MLP of ``moe.expert_size`` (routed experts carry no biases in any family)."""
    return 3 * spec.d_model * spec.moe.expert_size


def moe_block_params(spec: ModelSpec) -> int:
    """One MoE layer's MLP: the router, every routed expert, the shared experts and their gate."""
    moe, d = spec.moe, spec.d_model
    shared = mlp_params(spec, moe.shared_size, gated=True) if moe.n_shared else 0
    return d * moe.n_experts + moe.n_experts * expert_params(spec) + shared + (d if moe.shared_gate else 0)


def _needs(spec: ModelSpec, *names: str) -> None:
    missing = [n for n in names if getattr(spec, n) is None]
    if missing:
        raise ValueError(f"{spec.name}: count_params needs {' and '.join(missing)}")


def embedding_params(spec: ModelSpec) -> int:
    """The token embedding table, the LM head unless tied, and a learned position table."""
    _needs(spec, "vocab_size")
    tables = 1 if spec.tied_embeddings else 2
    return tables * spec.vocab_size * spec.d_model + spec.learned_positions * spec.d_model


def count_params(spec: ModelSpec) -> int:
    """Every parameter of the shape: embeddings, each layer's attention, MLP or experts, and norms."""
    _needs(spec, "vocab_size")
    if spec.dense_mlp_layers:
        _needs(spec, "intermediate_size")
    norms = spec.norms
    per_layer = attention_params(spec) + norms.per_layer * norms.params(spec.d_model)
    dense = spec.dense_mlp_layers * mlp_params(spec, spec.intermediate_size) if spec.dense_mlp_layers else 0
    experts = spec.moe_layers * moe_block_params(spec) if spec.moe is not None else 0
    final = norms.params(spec.d_model) if norms.final else 0
    return embedding_params(spec) + spec.n_layers * per_layer + dense + experts + final


def routed_params(spec: ModelSpec) -> int:
    """Parameters of all routed experts over all MoE layers (0 for a dense model)."""
    return spec.moe_layers * spec.moe.n_experts * expert_params(spec) if spec.moe is not None else 0


def unused_expert_params(spec: ModelSpec) -> int:
    """Parameters of the routed experts one token does not use: (n_experts - top_k) per MoE layer."""
    if spec.moe is None:
        return 0
    return spec.moe_layers * (spec.moe.n_experts - spec.moe.top_k) * expert_params(spec)


def active_params(spec: ModelSpec) -> int:
    """Parameters one token uses: the total less the routed experts it is not sent to."""
    return count_params(spec) - unused_expert_params(spec)
