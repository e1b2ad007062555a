"""One reader per ``model_type``: the fields each transformers config class reads, and what they mean.

Every reader returns the keyword arguments of a
:class:`~servebook.models.spec.ModelSpec`.  Field names, defaults and layer
rules are those of transformers 5.x's ``configuration_*.py`` (class defaults,
``__post_init__`` rules) and ``modeling_*.py`` (which layer has which
tensors), cited per reader.  An absent field takes the class default, recorded
in the spec's notes (see :mod:`.hf`).
"""

from __future__ import annotations

from typing import Any

from .hf import Fields
from .spec import CHUNKED, GLOBAL, MLA, SLIDING, Biases, MoE, Norms

HF_LAYER_KINDS = {"full_attention": GLOBAL, "sliding_attention": SLIDING, "chunked_attention": CHUNKED}
"""transformers' names in ``layer_types`` for the layer kinds servebook models."""


def _shape(f: Fields, *, vocab: int, context: int, tie: bool, kv: int | None = None,
           head_dim: int | None = None) -> dict[str, Any]:
    """Layers, width, heads, vocabulary, context and tying, read the Llama way.

    ``kv`` and ``head_dim`` are the class defaults when it has numbers for
    them; ``None`` means transformers' rule (one key/value head per query
    head; head_dim = hidden / heads).
    """
    n_heads = f.need("num_attention_heads")
    n_kv = f.get("num_key_value_heads", default=kv)
    if n_kv is not None and n_heads % n_kv:
        raise ValueError(f"config.json field {f.label('num_attention_heads')!r} ({n_heads}) must be divisible by "
                         f"{f.label('num_key_value_heads')!r} ({n_kv}): each key/value head serves whole query heads")
    return dict(
        n_layers=f.need("num_hidden_layers"), d_model=f.need("hidden_size"), n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=f.get("head_dim", default=head_dim), vocab_size=f.get("vocab_size", default=vocab),
        max_seq_len=f.get("max_position_embeddings", default=context),
        tied_embeddings=f.switch("tie_word_embeddings", tie),
    )


def _layer_types(f: Fields, n_layers: int) -> tuple[str, ...] | None:
    """The config's own ``layer_types`` list, mapped to servebook's kinds, or ``None`` if it has none."""
    value = f.cfg.get("layer_types")
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"config.json field {f.label('layer_types')!r} must be a list, got {value!r}")
    if len(value) != n_layers:
        raise ValueError(f"config.json field {f.label('layer_types')!r} has {len(value)} entries for "
                         f"num_hidden_layers = {n_layers}")
    for i, kind in enumerate(value):
        if kind not in HF_LAYER_KINDS:
            raise ValueError(f"config.json field {f.label(f'layer_types[{i}]')!r} = {kind!r} is not supported: "
                             f"servebook models {', '.join(HF_LAYER_KINDS)} layers")
    return tuple(HF_LAYER_KINDS[kind] for kind in value)


def _pattern(kinds: tuple[str, ...], window: int | None = None, chunk: int | None = None) -> dict[str, Any]:
    """ModelSpec's pattern fields, each span kept only when some layer uses it."""
    return dict(layer_types=kinds, sliding_window=window if SLIDING in kinds else None,
                attention_chunk=chunk if CHUNKED in kinds else None)


def _experts(f: Fields, experts_key: str, top_k_key: str, experts: int | None,
             top_k: int | None) -> tuple[int, int]:
    """Routed experts and top-k (class defaults given; ``None``: the field is required)."""
    n = f.need(experts_key, why="the number of routed experts") if experts is None else f.get(
        experts_key, default=experts)
    k = f.need(top_k_key, why="the experts each token is routed to") if top_k is None else f.get(
        top_k_key, default=top_k)
    if k > n:
        raise ValueError(f"config.json field {f.label(top_k_key)!r} ({k}) must be <= {f.label(experts_key)!r} "
                         f"({n}): a token cannot use more experts than exist")
    return n, k


def _llama_biases(f: Fields) -> Biases:
    bias = f.switch("attention_bias", False)  # q, k, v and o together (LlamaAttention, GemmaAttention, ...)
    return Biases(qkv=bias, o=bias, mlp=f.switch("mlp_bias", False))


# --- Llama, Mistral, Mixtral, Phi-3, Gemma ------------------------------------------------------


def llama(f: Fields) -> dict[str, Any]:
    """Llama 2, 3, 3.1, 3.2 (LlamaConfig): GQA, gated MLP, optional biases."""
    return {**_shape(f, vocab=32000, context=2048, tie=False),
            "intermediate_size": f.get("intermediate_size", default=11008), "biases": _llama_biases(f)}


def mistral(f: Fields) -> dict[str, Any]:
    """Mistral (MistralConfig): every layer slides over ``sliding_window`` tokens, or none (null)."""
    if f.present("layer_types"):
        f.refuse("layer_types", f.cfg["layer_types"], "MistralConfig applies sliding_window to every layer")
    return {**_shape(f, vocab=32000, context=131072, tie=False, kv=8),
            "intermediate_size": f.get("intermediate_size", default=14336),
            "sliding_window": f.nullable("sliding_window", 4096)}


def mixtral(f: Fields) -> dict[str, Any]:
    """Mixtral (MixtralConfig): Mistral's attention; every layer's MLP is ``num_local_experts`` experts."""
    shape = _shape(f, vocab=32000, context=131072, tie=False, kv=8)
    experts, top_k = _experts(f, "num_local_experts", "num_experts_per_tok", 8, 2)
    width = f.get("intermediate_size", default=14336)  # each expert's width
    return {**shape, "moe": MoE(experts, top_k, width), "sliding_window": f.nullable("sliding_window", None)}


def phi3(f: Fields) -> dict[str, Any]:
    """Phi-3 (Phi3Config): fused q/k/v and gate/up projections (the same parameters), an optional window."""
    return {**_shape(f, vocab=32064, context=4096, tie=False), "intermediate_size": f.get("intermediate_size",
                                                                                            default=8192),
            "sliding_window": f.nullable("sliding_window", None)}


def gemma(f: Fields) -> dict[str, Any]:
    """Gemma (GemmaConfig): tied embeddings by default, a head width of its own."""
    return {**_shape(f, vocab=256000, context=8192, tie=True, kv=16, head_dim=256),
            "intermediate_size": f.get("intermediate_size", default=24576), "biases": _llama_biases(f)}


def _gemma_hybrid(f: Fields, *, vocab: int, context: int, period: int, qk_norm: bool) -> dict[str, Any]:
    """Gemma 2 and 3: every ``period``-th layer global, the others sliding; four norms per layer."""
    shape = _shape(f, vocab=vocab, context=context, tie=True, kv=4, head_dim=256)
    n = shape["n_layers"]
    kinds = _layer_types(f, n) or tuple(SLIDING if (i + 1) % period else GLOBAL for i in range(n))
    return {**shape, "intermediate_size": f.get("intermediate_size", default=9216), "biases": _llama_biases(f),
            "norms": Norms(per_layer=4, qk=qk_norm), **_pattern(kinds, f.get("sliding_window", default=4096))}


def gemma2(f: Fields) -> dict[str, Any]:
    """Gemma 2 (Gemma2Config): sliding and global layers alternate, the first sliding."""
    return _gemma_hybrid(f, vocab=256000, context=8192, period=2, qk_norm=False)


def gemma3(f: Fields) -> dict[str, Any]:
    """Gemma 3 (Gemma3TextConfig): five sliding layers to one global (``sliding_window_pattern``), q/k norms."""
    if f.switch("use_bidirectional_attention", False):
        f.refuse("use_bidirectional_attention", True, "false (a causal model; the window is halved otherwise)")
    period = f.get("sliding_window_pattern", default=6) if not f.present("layer_types") else 1
    return _gemma_hybrid(f, vocab=262208, context=131072, period=period, qk_norm=True)


# --- Qwen ------------------------------------------------------------------------------------------


def _qwen_pattern(f: Fields, n: int, sliding_if) -> dict[str, Any]:
    """Qwen's window: off unless ``use_sliding_window``; then ``layer_types``, or the family's rule."""
    if not f.switch("use_sliding_window", False):
        return {}  # Qwen2Config sets sliding_window to None: every layer is global
    kinds = _layer_types(f, n)
    if kinds is None:
        first = f.get("max_window_layers", default=28, minimum=0)
        kinds = tuple(SLIDING if sliding_if(i, first) else GLOBAL for i in range(n))
    return _pattern(kinds, f.get("sliding_window", default=4096))


def _qwen2_sliding(i: int, first: int) -> bool:
    return i >= first  # Qwen2Config: the layers from max_window_layers on


def qwen2(f: Fields) -> dict[str, Any]:
    """Qwen2 and Qwen2.5 (Qwen2Config): biases on q, k and v (Qwen2Attention hard-codes them)."""
    shape = _shape(f, vocab=151936, context=32768, tie=False, kv=32)
    return {**shape, "intermediate_size": f.get("intermediate_size", default=22016), "biases": Biases(qkv=True),
            **_qwen_pattern(f, shape["n_layers"], _qwen2_sliding)}


def qwen3(f: Fields) -> dict[str, Any]:
    """Qwen3 (Qwen3Config): q/k norms, a head width of its own, optional biases."""
    shape = _shape(f, vocab=151936, context=32768, tie=False, kv=32, head_dim=128)
    bias = f.switch("attention_bias", False)
    return {**shape, "intermediate_size": f.get("intermediate_size", default=22016),
            "biases": Biases(qkv=bias, o=bias), "norms": Norms(qk=True),
            **_qwen_pattern(f, shape["n_layers"], _qwen2_sliding)}


def _qwen_moe(f: Fields, n: int, *, experts: int, top_k: int, expert: int, dense_width: int,
              shared: int) -> tuple[MoE | None, int | None]:
    """Qwen's experts: layer i is MoE unless listed in mlp_only_layers or off the decoder_sparse_step."""
    n_experts, k = _experts(f, "num_experts", "num_experts_per_tok", experts, top_k)
    step = f.get("decoder_sparse_step", default=1)
    only = set(f.layer_list("mlp_only_layers", n))
    dense = tuple(i for i in range(n) if i in only or (i + 1) % step)
    width = f.get("intermediate_size", default=dense_width) if dense else None
    if len(dense) == n:
        return None, width
    moe = MoE(n_experts, k, f.get("moe_intermediate_size", default=expert), n_shared=1 if shared else 0,
              shared_size=shared, shared_gate=bool(shared), dense_layers=dense)
    return moe, width


def qwen2_moe(f: Fields) -> dict[str, Any]:
    """Qwen2-MoE (Qwen2MoeConfig): routed experts plus one gated shared expert per MoE layer."""
    shape = _shape(f, vocab=151936, context=32768, tie=False, kv=16)
    shared = f.get("shared_expert_intermediate_size", default=5632, minimum=0)
    moe, width = _qwen_moe(f, shape["n_layers"], experts=60, top_k=4, expert=1408, dense_width=5632, shared=shared)
    pattern = _qwen_pattern(f, shape["n_layers"], lambda i, first: bool((i + 1) % 2) and i < first)
    return {**shape, "intermediate_size": width, "moe": moe, "biases": Biases(qkv=f.switch("qkv_bias", True)),
            **pattern}


def qwen3_moe(f: Fields) -> dict[str, Any]:
    """Qwen3-MoE (Qwen3MoeConfig): Qwen3's attention, routed experts and no shared one."""
    shape = _shape(f, vocab=151936, context=32768, tie=False, kv=4)  # no head_dim in the class: the rule
    moe, width = _qwen_moe(f, shape["n_layers"], experts=128, top_k=8, expert=768, dense_width=6144, shared=0)
    bias = f.switch("attention_bias", False)
    # Qwen3MoeAttention gives every layer the window when use_sliding_window is set.
    window = f.get("sliding_window", default=4096) if f.switch("use_sliding_window", False) else None
    return {**shape, "intermediate_size": width, "moe": moe, "biases": Biases(qkv=bias, o=bias),
            "norms": Norms(qk=True), "sliding_window": window}


# --- Llama 4, DeepSeek -----------------------------------------------------------------------------


def _llama4_pattern(f: Fields, n: int) -> dict[str, Any]:
    """Llama 4: the RoPE layers attend within chunks of attention_chunk_size, the NoPE layers globally."""
    chunk = f.nullable("attention_chunk_size", 8192)
    kinds = _layer_types(f, n)
    if kinds is None:
        rope = f.cfg.get("no_rope_layers") or None
        if rope is None:
            interval = f.get("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % interval != 0) for i in range(n)]
        elif len(rope) != n or any(r not in (0, 1) for r in rope):
            f.refuse("no_rope_layers", rope, f"a list of {n} zeros and ones (1: the layer uses RoPE)")
        kinds = tuple(CHUNKED if uses_rope and chunk is not None else GLOBAL for uses_rope in rope)
    if CHUNKED in kinds and chunk is None:
        f.refuse("attention_chunk_size", None, "a chunk size for the chunked layers of layer_types")
    return _pattern(kinds, chunk=chunk)


def llama4(f: Fields) -> dict[str, Any]:
    """Llama 4 (Llama4TextConfig): routed experts and one shared expert; dense layers between (Maverick)."""
    shape = _shape(f, vocab=202048, context=131072, tie=False, kv=8, head_dim=128)
    n = shape["n_layers"]
    experts, top_k = _experts(f, "num_local_experts", "num_experts_per_tok", 16, 1)
    expert = f.get("intermediate_size", default=8192)  # each expert's width, and the shared expert's
    if f.cfg.get("moe_layers") is not None:
        sparse = set(f.layer_list("moe_layers", n))
    else:
        step = f.get("interleave_moe_layer_step", default=1)
        sparse = set(range(step - 1, n, step))
    dense = tuple(i for i in range(n) if i not in sparse)
    moe = MoE(experts, top_k, expert, n_shared=1, shared_size=expert, dense_layers=dense) if sparse else None
    width = f.get("intermediate_size_mlp", default=16384) if dense else None
    # use_qk_norm is an L2 norm without weights (Llama4TextL2Norm): no parameters, no memory.
    return {**shape, "intermediate_size": width, "moe": moe, "biases": _llama_biases(f), **_llama4_pattern(f, n)}


DEEPSEEK_DEFAULTS = {
    "deepseek_v2": dict(vocab=102400, context=2048, dense=11008, expert=1407, experts=64, shared=2, first=0,
                        top_k=None, q_rank=1536),
    "deepseek_v3": dict(vocab=129280, context=4096, dense=18432, expert=2048, experts=256, shared=1, first=3,
                        top_k=8, q_rank=1536),
}
"""DeepseekV2Config and DeepseekV3Config defaults (both: kv_lora_rank 512, rope 64, nope 128, v 128)."""


def _deepseek_moe(f: Fields, n: int, d: dict[str, Any]) -> tuple[MoE | None, int | None]:
    """DeepSeek's experts: dense MLPs in the first ``first_k_dense_replace`` layers, MoE after."""
    if f.nullable("n_routed_experts", d["experts"]) is None:
        return None, f.get("intermediate_size", default=d["dense"])
    experts, top_k = _experts(f, "n_routed_experts", "num_experts_per_tok", d["experts"], d["top_k"])
    first = f.nullable("first_k_dense_replace", d["first"], minimum=0) or 0
    if first > n:
        raise ValueError(f"config.json field {f.label('first_k_dense_replace')!r} ({first}) must be <= "
                         f"num_hidden_layers ({n})")
    if f.get("moe_layer_freq", default=1) != 1:
        f.refuse("moe_layer_freq", f.cfg["moe_layer_freq"], "1 (transformers ignores it and DeepSeek's own "
                 "code does not: an interleave would be a guess)")
    shared = f.nullable("n_shared_experts", d["shared"], minimum=0) or 0
    expert = f.get("moe_intermediate_size", default=d["expert"])
    width = f.get("intermediate_size", default=d["dense"]) if first else None
    return MoE(experts, top_k, expert, n_shared=shared, dense_layers=tuple(range(first))), width


def deepseek(f: Fields) -> dict[str, Any]:
    """DeepSeek-V2 and V3 (DeepseekV2Config, DeepseekV3Config): multi-head latent attention and experts.

    The config's ``head_dim`` and ``num_key_value_heads`` are ignored: transformers
    sets head_dim to the rope width, and MLA caches no key/value heads.  The
    multi-token-prediction layers (``num_nextn_predict_layers``) are not part
    of the model transformers builds, and are not counted.
    """
    d = DEEPSEEK_DEFAULTS[f.family]
    n_layers = f.need("num_hidden_layers")
    mla = MLA(kv_rank=f.get("kv_lora_rank", default=512), rope_dim=f.get("qk_rope_head_dim", default=64),
              nope_dim=f.get("qk_nope_head_dim", default=128, minimum=0), q_rank=f.nullable("q_lora_rank", d["q_rank"]))
    moe, width = _deepseek_moe(f, n_layers, d)
    if f.switch("mlp_bias", False):
        f.refuse("mlp_bias", True, "false (its experts would carry no bias while its dense MLPs would)")
    bias = f.switch("attention_bias", False)
    return dict(n_layers=n_layers, d_model=f.need("hidden_size"), n_heads=f.need("num_attention_heads"),
                v_head_dim=f.get("v_head_dim", default=128), mla=mla,
                vocab_size=f.get("vocab_size", default=d["vocab"]),
                max_seq_len=f.get("max_position_embeddings", default=d["context"]),
                tied_embeddings=f.switch("tie_word_embeddings", False), intermediate_size=width, moe=moe,
                biases=Biases(qkv=bias, o=bias))


# --- OPT, GPT-2, Falcon: LayerNorm, biases, learned positions or a parallel block ---------------------


def opt(f: Fields) -> dict[str, Any]:
    """OPT (OPTConfig): MHA, a ReLU MLP of ``ffn_dim``, biases everywhere, positions learned with an offset of 2."""
    d, n_heads = f.need("hidden_size"), f.need("num_attention_heads")
    if f.get("word_embed_proj_dim", default=d) != d:
        f.refuse("word_embed_proj_dim", f.cfg["word_embed_proj_dim"], "equal to hidden_size (OPT-350m's "
                 "project_in/project_out are not modelled)")
    if not f.switch("layer_norm_elementwise_affine", True):
        f.refuse("layer_norm_elementwise_affine", False, "true (norms with weights and biases)")
    positions = f.get("max_position_embeddings", default=2048)
    final = f.switch("do_layer_norm_before", True) and not f.switch("_remove_final_layer_norm", False)
    bias = f.switch("enable_bias", True)
    return dict(n_layers=f.need("num_hidden_layers"), d_model=d, n_heads=n_heads,
                vocab_size=f.get("vocab_size", default=50272),
                intermediate_size=f.get("ffn_dim", default=3072), max_seq_len=positions,
                tied_embeddings=f.switch("tie_word_embeddings", True), gated_mlp=False,
                biases=Biases(qkv=bias, o=bias, mlp=bias), norms=Norms(kind="layer", final=final),
                learned_positions=positions + 2)  # OPTLearnedPositionalEmbedding keeps 2 extra rows


def gpt2(f: Fields) -> dict[str, Any]:
    """GPT-2 (GPT2Config): MHA, a GELU MLP of ``n_inner`` (default 4 x n_embd), biases, learned positions."""
    if f.switch("add_cross_attention", False):
        f.refuse("add_cross_attention", True, "false (a decoder without cross-attention)")
    d = f.need("n_embd", "hidden_size")
    positions = f.get("n_positions", "max_position_embeddings", default=1024)
    return dict(n_layers=f.need("n_layer", "num_hidden_layers"), d_model=d,
                n_heads=f.need("n_head", "num_attention_heads"), vocab_size=f.get("vocab_size", default=50257),
                intermediate_size=f.get("n_inner", default=4 * d), max_seq_len=positions,
                tied_embeddings=f.switch("tie_word_embeddings", True), gated_mlp=False,
                biases=Biases(qkv=True, o=True, mlp=True), norms=Norms(kind="layer"), learned_positions=positions)


def falcon(f: Fields) -> dict[str, Any]:
    """Falcon (FalconConfig): fused q/k/v, MQA or GQA, a GELU MLP, LayerNorm; the legacy RefinedWeb names too.

    Key/value heads follow FalconAttention: ``num_kv_heads`` with the new decoder
    architecture (Falcon-40B, 180B), one with ``multi_query`` (Falcon-7B),
    else one per query head.  Norms follow FalconDecoderLayer: two in a serial
    block, ``num_ln_in_parallel_attn`` (default 2 in the new architecture,
    else 1) in a parallel one.
    """
    d, n_heads = f.need("hidden_size", "n_embed"), f.need("num_attention_heads", "n_head")
    new = f.switch("new_decoder_architecture", False)
    if new:
        n_kv = f.get("num_kv_heads", "n_head_kv", default=n_heads)
    elif f.switch("multi_query", True):
        n_kv = 1
    else:
        n_kv = f.get("num_kv_heads", "n_head_kv", default=n_heads)
    if n_heads % n_kv:
        raise ValueError(f"config.json field {f.label('num_attention_heads')!r} ({n_heads}) must be divisible by "
                         f"{f.label('num_kv_heads')!r} ({n_kv})")
    if not f.switch("parallel_attn", True):
        per_layer = 2
    else:
        per_layer = f.get("num_ln_in_parallel_attn", default=2 if new else 1)
    bias = f.switch("bias", False)
    return dict(n_layers=f.need("num_hidden_layers", "n_layer"), d_model=d, n_heads=n_heads, n_kv_heads=n_kv,
                vocab_size=f.get("vocab_size", default=65024),
                intermediate_size=f.get("ffn_hidden_size", default=4 * d),
                max_seq_len=f.get("max_position_embeddings", default=2048),
                tied_embeddings=f.switch("tie_word_embeddings", True),
                gated_mlp=False, biases=Biases(qkv=bias, o=bias, mlp=bias),
                norms=Norms(kind="layer", per_layer=per_layer))


# --- no model_type -------------------------------------------------------------------------------------

FAMILY_ONLY_FIELDS = ("kv_lora_rank", "q_lora_rank", "num_local_experts", "num_experts", "n_routed_experts",
                      "moe_intermediate_size", "layer_types", "sliding_window", "attention_chunk_size", "ffn_dim",
                      "n_inner", "new_decoder_architecture", "attention_bias", "qkv_bias", "mlp_bias",
                      "use_sliding_window")
"""Fields that change the bytes and that only a family's reader interprets."""


def generic(f: Fields) -> dict[str, Any]:
    """A config without ``model_type``: the Llama field names and their GPT-style aliases, nothing else.

    A field of :data:`FAMILY_ONLY_FIELDS` that is set (not null, not false) is
    refused: what it means depends on the family, and the family is unknown.
    """
    for key in FAMILY_ONLY_FIELDS:
        if f.present(key) and f.cfg[key] is not False:
            raise ValueError(f"config.json field {f.label(key)!r} needs a family to be read, and the config has no "
                             f"'model_type': add it (one of {', '.join(FAMILIES)})")
    n_heads = f.need("num_attention_heads", "n_head", "num_heads")
    n_kv = f.get("num_key_value_heads", "n_head_kv", "num_kv_heads")
    if n_kv is None and f.switch("multi_query", False):
        n_kv = 1
    return dict(n_layers=f.need("num_hidden_layers", "n_layer", "num_layers"),
                d_model=f.need("hidden_size", "n_embd", "d_model"), n_heads=n_heads, n_kv_heads=n_kv,
                head_dim=f.get("head_dim"), vocab_size=f.get("vocab_size"),
                intermediate_size=f.get("intermediate_size", "ffn_hidden_size"),
                max_seq_len=f.get("max_position_embeddings", "n_positions"),
                tied_embeddings=f.switch("tie_word_embeddings", False))


CONFIG_CLASSES = {
    "llama": "LlamaConfig", "mistral": "MistralConfig", "mixtral": "MixtralConfig", "phi3": "Phi3Config",
    "gemma": "GemmaConfig", "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig", "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config", "qwen2_moe": "Qwen2MoeConfig", "qwen3_moe": "Qwen3MoeConfig",
    "llama4_text": "Llama4TextConfig", "deepseek_v2": "DeepseekV2Config", "deepseek_v3": "DeepseekV3Config",
    "opt": "OPTConfig", "gpt2": "GPT2Config", "falcon": "FalconConfig", "RefinedWeb": "FalconConfig",
    "RefinedWebModel": "FalconConfig",
}
"""The transformers 5.x config class whose defaults each reader uses."""

FAMILIES = {
    "llama": llama, "mistral": mistral, "mixtral": mixtral, "phi3": phi3,
    "gemma": gemma, "gemma2": gemma2, "gemma3_text": gemma3,
    "qwen2": qwen2, "qwen3": qwen3, "qwen2_moe": qwen2_moe, "qwen3_moe": qwen3_moe,
    "llama4_text": llama4, "deepseek_v2": deepseek, "deepseek_v3": deepseek,
    "opt": opt, "gpt2": gpt2, "falcon": falcon, "RefinedWeb": falcon, "RefinedWebModel": falcon,
}
"""``model_type`` -> reader.  Multimodal wrappers (``llama4``, ``gemma3``, ...) are read through their text_config."""
