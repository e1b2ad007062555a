"""What each layer of a model stores and computes: the shape every memory formula needs.

The teaching case, a dense Llama with grouped-query attention, is one line::

    ModelSpec("x", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8)

The models readers serve today differ from it in what changes the bytes, and
a spec says each of those things:

- the attention kind: MHA, GQA or MQA (``n_kv_heads``), or multi-head latent
  attention (:class:`MLA`), whose cache is one latent and one shared rope key
  per token per layer; keys and values of different widths (``v_head_dim``);
- the per-layer pattern (``layer_types``): a global layer caches every token,
  a sliding-window layer at most the last ``sliding_window`` tokens, a chunked
  layer (Llama 4) the tokens of its own chunk of ``attention_chunk``;
- the MLP: dense (gated or not), or a mixture of experts (:class:`MoE`);
- biases (:class:`Biases`), norms (:class:`Norms`), tied embeddings, a learned
  position table, the vocabulary.

Parameter counts live in :mod:`.params`; reading a ``config.json`` in :mod:`.hf`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..checks import choice, flag, whole

GLOBAL, SLIDING, CHUNKED = "global", "sliding", "chunked"
LAYER_KINDS = (GLOBAL, SLIDING, CHUNKED)
"""A layer attends to every earlier token (global), to the last W (sliding), or to its own chunk (chunked)."""

NORM_KINDS = ("rms", "layer")


def _optional_whole(name: str, value, minimum: int = 1) -> int | None:
    return None if value is None else whole(name, value, minimum)


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2 and V3).

    Per token and layer the cache holds one latent vector of ``kv_rank``
    elements, from which every head's key and value are projected, and one
    rope key of ``rope_dim`` elements shared by all heads: ``kv_rank +
    rope_dim`` elements, stored once (there is no separate K and V to double).
    A query head is ``nope_dim + rope_dim`` wide; ``q_rank`` is the rank of the
    low-rank query projection (``None``: queries are projected directly).
    """

    kv_rank: int
    rope_dim: int
    nope_dim: int
    q_rank: int | None = None

    def __post_init__(self) -> None:
        whole("mla.kv_rank", self.kv_rank)
        whole("mla.rope_dim", self.rope_dim)
        whole("mla.nope_dim", self.nope_dim, 0)
        _optional_whole("mla.q_rank", self.q_rank)

    @property
    def cache_width(self) -> int:
        """Elements one token stores per layer: the latent and the shared rope key."""
        return self.kv_rank + self.rope_dim


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts MLP: a router sends each token to ``top_k`` of ``n_experts`` routed experts.

    Every expert is a gated MLP of intermediate width ``expert_size``.  Shared
    experts (``n_shared``, together ``shared_size`` wide; by default
    ``n_shared * expert_size``) see every token.  ``shared_gate`` is
    Qwen2-MoE's one-output gate on its shared expert.  ``dense_layers`` lists
    the layers whose MLP is dense instead (of the spec's ``intermediate_size``):
    DeepSeek's first layers, Llama 4 Maverick's interleave, Qwen's ``mlp_only_layers``.
    """

    n_experts: int
    top_k: int
    expert_size: int
    n_shared: int = 0
    shared_size: int | None = None
    shared_gate: bool = False
    dense_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        whole("moe.n_experts", self.n_experts)
        whole("moe.top_k", self.top_k, 1, self.n_experts)
        whole("moe.expert_size", self.expert_size)
        whole("moe.n_shared", self.n_shared, 0)
        if self.shared_size is None:
            object.__setattr__(self, "shared_size", self.n_shared * self.expert_size)
        whole("moe.shared_size", self.shared_size, 0)
        if (self.n_shared == 0) != (self.shared_size == 0):
            raise ValueError(f"moe.shared_size ({self.shared_size}) must be 0 exactly when moe.n_shared "
                             f"({self.n_shared}) is 0")
        flag("moe.shared_gate", self.shared_gate)
        if self.shared_gate and not self.n_shared:
            raise ValueError("moe.shared_gate needs a shared expert (moe.n_shared >= 1)")
        layers = tuple(whole("moe.dense_layers", i, 0) for i in self.dense_layers)
        if len(set(layers)) != len(layers):
            raise ValueError(f"moe.dense_layers lists a layer twice: {list(layers)}")
        object.__setattr__(self, "dense_layers", tuple(sorted(layers)))


@dataclass(frozen=True)
class Norms:
    """The normalization layers: RMSNorm (a weight) or LayerNorm (a weight and a bias).

    ``per_layer`` norms of width d_model in each block (two in Llama, four in
    Gemma 2 and 3, one in Falcon-7B's parallel block), a final norm, and with
    ``qk`` a norm of head width on each query and key (Qwen3, Gemma 3).
    """

    kind: str = "rms"
    per_layer: int = 2
    qk: bool = False
    final: bool = True

    def __post_init__(self) -> None:
        choice("norms.kind", self.kind, NORM_KINDS)
        whole("norms.per_layer", self.per_layer, 0)
        flag("norms.qk", self.qk)
        flag("norms.final", self.final)

    def params(self, width: int) -> int:
        """Parameters of one norm over ``width`` features."""
        return width * (2 if self.kind == "layer" else 1)


@dataclass(frozen=True)
class Biases:
    """Which linear layers carry a bias: q/k/v (Qwen2), the attention output, the MLP (GPT-2, OPT)."""

    qkv: bool = False
    o: bool = False
    mlp: bool = False

    def __post_init__(self) -> None:
        for name in ("qkv", "o", "mlp"):
            flag(f"biases.{name}", getattr(self, name))


def _layer_pattern(spec: ModelSpec) -> tuple[str, ...]:
    """The spec's layer kinds, checked, with a window or chunk that spans the whole context made global."""
    kinds = spec.layer_types
    if kinds is None:
        if spec.sliding_window is not None and spec.attention_chunk is not None:
            raise ValueError("sliding_window and attention_chunk are both set: give layer_types to say "
                             "which layers slide and which are chunked")
        kind = SLIDING if spec.sliding_window is not None else CHUNKED if spec.attention_chunk is not None else GLOBAL
        kinds = (kind,) * spec.n_layers
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, (list, tuple)):
        raise TypeError(f"layer_types must be a list of layer kinds ({', '.join(LAYER_KINDS)}), got {kinds!r}")
    kinds = tuple(choice("layer_types", kind, LAYER_KINDS) for kind in kinds)
    if len(kinds) != spec.n_layers:
        raise ValueError(f"layer_types has {len(kinds)} entries for n_layers = {spec.n_layers}")
    for kind, span in ((SLIDING, "sliding_window"), (CHUNKED, "attention_chunk")):
        if (kind in kinds) != (getattr(spec, span) is not None):
            raise ValueError(f"{span} ({getattr(spec, span)}) must be given exactly when a layer is {kind} "
                             f"(layer_types has {kinds.count(kind)})")
        if spec.max_seq_len is not None and getattr(spec, span) is not None and getattr(spec, span) >= spec.max_seq_len:
            # A window as long as the context hides no token: such a layer is global.
            kinds = tuple(GLOBAL if k == kind else k for k in kinds)
            object.__setattr__(spec, span, None)
    if SLIDING in kinds and CHUNKED in kinds:
        raise ValueError("layer_types mixes sliding and chunked layers, which no supported model does "
                         "(vLLM 0.33.0's FullAttentionSpec.merge refuses it too)")
    return kinds


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder-only transformer, layer by layer.

    ``n_kv_heads`` separates the classic attention variants: equal to
    ``n_heads`` for multi-head attention (MHA), 1 for multi-query attention
    (MQA), anything in between that divides ``n_heads`` for grouped-query
    attention (GQA).  ``mla`` makes it multi-head latent attention.  The other
    fields after ``notes`` describe what a dense Llama does not have; their
    defaults are a dense Llama's.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    head_dim: int | None = None
    n_params: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    max_seq_len: int | None = None
    tied_embeddings: bool = False
    source: str = ""
    notes: str = field(default="", compare=False)
    display_name: str = field(default="", compare=False)
    v_head_dim: int | None = None
    mla: MLA | None = None
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    attention_chunk: int | None = None
    gated_mlp: bool = True
    moe: MoE | None = None
    biases: Biases = Biases()
    norms: Norms = Norms()
    learned_positions: int = 0

    def __post_init__(self) -> None:
        whole("n_layers", self.n_layers)
        whole("d_model", self.d_model)
        whole("n_heads", self.n_heads)
        self._check_heads()
        for name in ("n_params", "vocab_size", "intermediate_size", "max_seq_len", "sliding_window",
                     "attention_chunk"):
            _optional_whole(name, getattr(self, name))
        whole("learned_positions", self.learned_positions, 0)
        flag("tied_embeddings", self.tied_embeddings)
        flag("gated_mlp", self.gated_mlp)
        for name, part in (("mla", MLA), ("moe", MoE), ("biases", Biases), ("norms", Norms)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, part):
                raise TypeError(f"{name} must be a {part.__name__}, got {type(value).__name__}")
        if self.moe is not None and self.moe.dense_layers and self.moe.dense_layers[-1] >= self.n_layers:
            raise ValueError(f"moe.dense_layers names layer {self.moe.dense_layers[-1]}, but the model has "
                             f"{self.n_layers} layers (0..{self.n_layers - 1})")
        object.__setattr__(self, "layer_types", _layer_pattern(self))
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)

    def _check_heads(self) -> None:
        if self.mla is not None:
            # MLA caches no per-head keys or values; its query heads are nope + rope wide.
            object.__setattr__(self, "n_kv_heads", self.n_heads)
            if self.head_dim is None:
                object.__setattr__(self, "head_dim", self.mla.nope_dim + self.mla.rope_dim)
            if self.head_dim != self.mla.nope_dim + self.mla.rope_dim:
                raise ValueError(f"head_dim ({self.head_dim}) must be mla.nope_dim + mla.rope_dim "
                                 f"({self.mla.nope_dim} + {self.mla.rope_dim}) for multi-head latent attention")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        whole("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}): "
                "each key/value head serves a whole group of query heads"
            )
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads}); "
                    "give head_dim explicitly"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        whole("head_dim", self.head_dim)
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        whole("v_head_dim", self.v_head_dim)

    # --- attention ------------------------------------------------------------------------------

    @property
    def attention(self) -> str:
        """``"MHA"``, ``"GQA"``, ``"MQA"`` or ``"MLA"``."""
        if self.mla is not None:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def kv_dim(self) -> int:
        """Width of the stored K (or V) vector per token per layer: n_kv_heads * head_dim.

        For MHA this is d_model, the KV-cache chapter's formula; GQA and MQA shrink it.
        For MLA it is the one vector stored (latent + rope key), which is not
        doubled: use :attr:`cached_width` for what a layer stores.
        """
        return self.mla.cache_width if self.mla is not None else self.n_kv_heads * self.head_dim

    @property
    def cached_width(self) -> int:
        """Elements one token stores in one layer's cache: K and V of every KV head, or MLA's latent and rope key."""
        if self.mla is not None:
            return self.mla.cache_width
        return self.n_kv_heads * (self.head_dim + self.v_head_dim)

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head."""
        return self.n_heads // self.n_kv_heads

    # --- the layer pattern -----------------------------------------------------------------------

    def layers_of(self, kind: str) -> int:
        """How many layers are of ``kind`` (``"global"``, ``"sliding"`` or ``"chunked"``)."""
        return self.layer_types.count(choice("kind", kind, LAYER_KINDS))

    @property
    def local_kind(self) -> str | None:
        """``"sliding"`` or ``"chunked"`` if some layers see only part of the context, else ``None``."""
        return next((k for k in (SLIDING, CHUNKED) if k in self.layer_types), None)

    @property
    def local_span(self) -> int | None:
        """The window W of the sliding layers or the chunk of the chunked ones (``None`` if all are global)."""
        return {SLIDING: self.sliding_window, CHUNKED: self.attention_chunk, None: None}[self.local_kind]

    # --- the MLP ---------------------------------------------------------------------------------

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return 0 if self.moe is None else self.n_layers - len(self.moe.dense_layers)

    @property
    def dense_mlp_layers(self) -> int:
        """Layers whose MLP is dense."""
        return self.n_layers - self.moe_layers

    # --- counts ----------------------------------------------------------------------------------

    def count_params(self) -> int:
        """Parameters of the tensors this shape describes (see :func:`servebook.models.params.count_params`)."""
        from .params import count_params

        return count_params(self)

    def count_active_params(self) -> int:
        """Parameters one token uses (see :func:`servebook.models.params.active_params`)."""
        from .params import active_params

        return active_params(self)

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | os.PathLike | Any, name: str | None = None,
                       n_params: int | None = None) -> ModelSpec:
        """A spec from a Hugging Face ``config.json`` (see :func:`servebook.models.hf.from_hf_config`)."""
        from .hf import from_hf_config

        return from_hf_config(config, name=name, n_params=n_params)
