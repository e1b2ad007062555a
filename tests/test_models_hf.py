"""Reading config.json: the numbers of issue 11's "Why" list, every family, and a clear refusal of the rest.

The configs are the registry's transcriptions of the Hub files
(``servebook/data/models/<id>.json``, each naming its source); the expected
numbers cite where they come from.
"""

import copy

import pytest

from servebook import memory, models
from servebook.models import ModelSpec, from_hf_config
from servebook.units import GiB


def config(model_id: str) -> dict:
    """A fresh copy of the registry's transcribed config.json of ``model_id``."""
    return copy.deepcopy(models.record(model_id)["config"])


# --- the "Why" list -------------------------------------------------------------------------------


def test_deepseek_v3_mla_caches_the_latent_and_rope_key_once():
    # DeepSeek-V3 config.json: kv_lora_rank 512, qk_rope_head_dim 64, 61 layers. DeepSeek-V2 paper
    # (arXiv:2405.04434), section 2.1: the cache is the latent c^KV and the decoupled rope key, once per layer.
    spec = from_hf_config(config("deepseek-v3"))
    assert spec.attention == "MLA" and spec.mla.kv_rank == 512 and spec.mla.rope_dim == 64
    assert memory.kv_bytes_per_token(spec, "bf16") == (512 + 64) * 61 * 2 == 70_272
    # What counting it as MHA (128 heads of 7168 / 128) gave: 1,748,992 bytes, 24.9 times too much.
    assert round(2 * 61 * 7168 * 2 / 70_272, 1) == 24.9


def test_gemma_2_9b_slides_half_its_layers_over_4096_tokens():
    # Gemma-2-9B config.json: 42 layers, sliding_window 4096; Gemma2Config alternates them, the first sliding.
    spec = from_hf_config(config("gemma-2-9b"))
    assert (spec.layers_of("sliding"), spec.layers_of("global"), spec.sliding_window) == (21, 21, 4096)
    per_request = memory.kv_cache_bytes(spec, seq_len=8192)
    assert per_request == 2_113_929_216 and per_request / GiB == 1.96875  # 1.969 GiB
    assert memory.kv_bytes_by_layer_kind(spec, 8192) == {"global": 21 * 8192 * 8192, "sliding": 21 * 4096 * 8192}
    all_global = 42 * 8192 * spec.cached_width * 2
    assert all_global / GiB == 2.625  # what dropping sliding_window gave


def test_mixtral_counts_its_experts_total_and_active():
    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total parameters, 12.9B used per token.
    spec = from_hf_config(config("mixtral-8x7b"))
    assert spec.count_params() == 46_702_792_704 and round(spec.count_params() / 1e9, 2) == 46.70
    assert spec.count_active_params() == 12_879_925_248 and round(spec.count_active_params() / 1e9, 1) == 12.9
    dense_only = replace_moe_with_one_expert(spec)
    assert round(dense_only.count_params() / 1e9, 2) == 7.24  # the experts ignored, as before


def replace_moe_with_one_expert(spec: ModelSpec) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, moe=models.MoE(1, 1, spec.moe.expert_size))


def test_deepseek_v3_is_671b_with_about_37_5b_active():
    # DeepSeek-V3 README_WEIGHTS.md: main model 671B; 36.6B activated including the 0.9B output head.
    spec = from_hf_config(config("deepseek-v3"))
    assert spec.count_params() == 671_026_404_352 and round(spec.count_params() / 1e9, 1) == 671.0
    active = spec.count_active_params()
    assert round(active / 1e9, 1) == 37.6 and 37.5e9 < active < 37.6e9
    input_embedding = spec.vocab_size * spec.d_model
    assert round((active - input_embedding) / 1e9, 1) == 36.6


def test_qwen2_5_7b_counts_its_qkv_biases():
    # Qwen2.5-7B: 7,615,616,512 (its model card: 7.61B); the q/k/v biases are (3584 + 2 * 512) * 28 layers.
    spec = from_hf_config(config("qwen2.5-7b"))
    assert spec.biases.qkv and not spec.biases.o
    assert spec.count_params() == 7_615_616_512
    assert spec.count_params() - (3584 + 2 * 512) * 28 == 7_615_487_488  # the count without them


def test_gemma_2_9b_ties_embeddings_by_default_and_has_four_norms():
    # Its config.json has no tie_word_embeddings; Gemma2Config defaults it to True (transformers 5.x).
    cfg = config("gemma-2-9b")
    assert "tie_word_embeddings" not in cfg
    spec = from_hf_config(cfg)
    assert spec.tied_embeddings and "tie_word_embeddings=True" in spec.notes
    assert spec.norms.per_layer == 4  # input, post-attention, pre- and post-feedforward (Gemma2DecoderLayer)
    assert spec.count_params() == 9_241_705_984  # Gemma 2 report, Table 1: 8,324,201,984 + 917,504,000
    untied = from_hf_config({**cfg, "tie_word_embeddings": False})
    assert untied.count_params() - spec.count_params() == 256_000 * 3584 == 917_504_000


def test_opt_ffn_dim_and_gpt2_n_inner_are_read():
    opt = from_hf_config(config("opt-13b"))
    assert opt.intermediate_size == 20_480 and not opt.gated_mlp and opt.learned_positions == 2048 + 2
    assert opt.count_params() == 12_853_473_280
    gpt2 = from_hf_config(config("gpt2"))
    assert gpt2.intermediate_size == 4 * 768 and gpt2.count_params() == 124_439_808
    assert from_hf_config({**config("gpt2"), "n_inner": 1000}).intermediate_size == 1000


def test_a_pretrained_config_is_accepted():
    transformers = pytest.importorskip("transformers")
    llama = transformers.LlamaConfig(**{k: v for k, v in config("llama-3-8b").items() if k != "architectures"})
    spec = from_hf_config(llama, name="llama-3-8b")
    assert spec.count_params() == 8_030_261_248 and spec.kv_dim == 1024
    gemma = transformers.Gemma2Config(**{k: v for k, v in config("gemma-2-9b").items() if k != "architectures"})
    assert from_hf_config(gemma).layers_of("sliding") == 21  # to_dict() carries layer_types


# --- families -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id, attention, kinds", [
    ("llama-3.1-405b", "GQA", {"global": 126}),
    ("mistral-7b", "GQA", {"sliding": 32}),
    ("qwen2.5-72b", "GQA", {"global": 80}),           # use_sliding_window false
    ("qwen3-30b-a3b", "GQA", {"global": 48}),
    ("llama-4-scout", "GQA", {"chunked": 36, "global": 12}),
    ("gemma-3-27b", "GQA", {"sliding": 52, "global": 10}),
    ("phi-3-mini", "MHA", {"sliding": 32}),
    ("deepseek-v2-lite", "MLA", {"global": 27}),
    ("falcon-7b", "MQA", {"global": 32}),
])
def test_each_family_reads_its_attention_and_layer_pattern(model_id, attention, kinds):
    spec = from_hf_config(config(model_id))
    assert spec.attention == attention
    assert {k: spec.layers_of(k) for k in ("global", "sliding", "chunked") if spec.layers_of(k)} == kinds


def test_nested_text_config_is_the_language_model():
    spec = from_hf_config(config("gemma-3-27b"))
    # The text_config leaves these to Gemma3TextConfig's defaults, and the spec says so.
    assert spec.vocab_size == 262_208 and spec.sliding_window == 1024 and spec.norms.qk
    assert "vocab_size=262208" in spec.notes and "sliding_window_pattern=6" in spec.notes
    scout = from_hf_config(config("llama-4-scout"))
    assert scout.moe.n_experts == 16 and scout.moe.top_k == 1 and scout.moe.n_shared == 1
    assert scout.attention_chunk == 8192 and scout.layer_types[3] == "global"  # every fourth layer is NoPE


def test_a_window_switched_off_or_as_long_as_the_context_is_global():
    qwen = config("qwen2.5-7b")  # sliding_window 131072, use_sliding_window false
    assert from_hf_config(qwen).layers_of("global") == 28
    on = from_hf_config({**qwen, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert (on.layers_of("global"), on.layers_of("sliding")) == (20, 8)  # Qwen2Config: layers >= max_window_layers
    long = from_hf_config({**qwen, "use_sliding_window": True, "max_window_layers": 0})  # W = context
    assert long.layers_of("global") == 28 and long.sliding_window is None
    assert from_hf_config({**config("mistral-7b"), "sliding_window": None}).layers_of("global") == 32


def test_moe_placement_follows_each_family():
    v3 = from_hf_config(config("deepseek-v3"))
    assert v3.moe.dense_layers == (0, 1, 2) and v3.moe_layers == 58 and v3.intermediate_size == 18_432
    maverick_like = config("llama-4-scout")
    maverick_like["text_config"] = {**maverick_like["text_config"], "moe_layers": list(range(1, 48, 2))}
    spec = from_hf_config(maverick_like)
    assert spec.moe_layers == 24 and spec.moe.dense_layers == tuple(range(0, 48, 2))
    assert spec.intermediate_size == 16384  # intermediate_size_mlp: the dense layers' width
    qwen = from_hf_config({**config("qwen3-30b-a3b"), "mlp_only_layers": [0, 47]})
    assert qwen.moe.dense_layers == (0, 47) and qwen.intermediate_size == 6144


def test_configs_without_model_type_read_the_llama_names():
    spec = from_hf_config({"n_layer": 32, "hidden_size": 4544, "n_head": 71, "multi_query": True, "head_dim": 64})
    assert spec.attention == "MQA" and spec.kv_dim == 64


# --- bad input: refused, naming the field ------------------------------------------------------------------


def without(model_id: str, key: str, nested: bool = False) -> dict:
    cfg = config(model_id)
    del (cfg["text_config"] if nested else cfg)[key]
    return cfg


def with_(model_id: str, nested: bool = False, **fields) -> dict:
    cfg = config(model_id)
    (cfg["text_config"] if nested else cfg).update(fields)
    return cfg


BAD = [
    (without("llama-3-8b", "num_hidden_layers"), "missing 'num_hidden_layers'"),
    (without("llama-3-8b", "hidden_size"), "missing 'hidden_size'"),
    (without("qwen3-8b", "num_attention_heads"), "missing 'num_attention_heads'"),
    (without("gemma-3-27b", "num_hidden_layers", nested=True), "missing 'text_config.num_hidden_layers'"),
    (without("deepseek-v2-lite", "num_experts_per_tok"), "missing 'num_experts_per_tok'"),
    (with_("llama-3-8b", model_type="mamba"), "'model_type' = 'mamba' is not supported"),
    (with_("gemma-3-27b", nested=True, model_type="siglip_text"), "'text_config.model_type' = 'siglip_text'"),
    ({**without("gemma-3-27b", "model_type", nested=True), "model_type": "llava"}, "text_config.model_type"),
    ({**config("llama-3-8b"), "text_config": [1, 2]}, "'text_config' must be an object"),
    (with_("llama-3-8b", num_key_value_heads=5),
     "'num_attention_heads' \\(32\\) must be divisible by 'num_key_value_heads'"),
    (with_("mistral-7b", num_key_value_heads=64), "must be divisible by 'num_key_value_heads' \\(64\\)"),
    (with_("falcon-7b", new_decoder_architecture=True, num_kv_heads=7), "'num_kv_heads' \\(7\\)"),
    (with_("llama-3-8b", hidden_size=-4096), "hidden_size must be >= 1"),
    (with_("llama-3-8b", num_hidden_layers=0), "num_hidden_layers must be >= 1"),
    (with_("llama-3-8b", intermediate_size=-1), "intermediate_size must be >= 1"),
    (with_("llama-3-8b", num_hidden_layers="32"), "'num_hidden_layers' must be a whole number"),
    (with_("llama-3.2-1b", head_dim=64.5), "'head_dim' must be a whole number"),
    (with_("llama-3-8b", tie_word_embeddings="yes"), "'tie_word_embeddings' must be true or false"),
    (with_("mistral-7b", sliding_window=0), "sliding_window must be >= 1"),
    (with_("mistral-7b", sliding_window=-4096), "sliding_window must be >= 1"),
    (with_("gemma-2-9b", sliding_window=0), "sliding_window must be >= 1"),
    (with_("qwen2.5-7b", use_sliding_window=True, sliding_window=0), "sliding_window must be >= 1"),
    (with_("qwen2.5-7b", use_sliding_window=True, max_window_layers=-1), "max_window_layers must be >= 0"),
    (with_("llama-4-scout", nested=True, attention_chunk_size=0), "attention_chunk_size must be >= 1"),
    (with_("gemma-2-9b", layer_types=["sliding_attention", "linear_attention"] * 21),
     "'layer_types\\[1\\]' = 'linear_attention'"),
    (with_("gemma-2-9b", layer_types=["full_attention"] * 3), "'layer_types' has 3 entries"),
    (with_("gemma-2-9b", layer_types="full_attention"), "'layer_types' must be a list"),
    (with_("mistral-7b", layer_types=["full_attention"] * 32), "'layer_types'.*MistralConfig"),
    (with_("mixtral-8x7b", num_experts_per_tok=9),
     "'num_experts_per_tok' \\(9\\) must be <= 'num_local_experts' \\(8\\)"),
    (with_("qwen3-30b-a3b", num_experts_per_tok=129), "'num_experts_per_tok' \\(129\\) must be <= 'num_experts'"),
    (with_("deepseek-v3", num_experts_per_tok=300), "'num_experts_per_tok' \\(300\\) must be <= 'n_routed_experts'"),
    (with_("mixtral-8x7b", num_local_experts=0), "num_local_experts must be >= 1"),
    (with_("deepseek-v3", moe_layer_freq=2), "'moe_layer_freq' = 2 is not supported"),
    (with_("deepseek-v3", first_k_dense_replace=70), "'first_k_dense_replace' \\(70\\) must be <="),
    (with_("deepseek-v3", kv_lora_rank=0), "kv_lora_rank must be >= 1"),
    (with_("deepseek-v2-lite", mlp_bias=True), "'mlp_bias' = True is not supported"),
    (with_("qwen3-30b-a3b", mlp_only_layers=[99]), "mlp_only_layers must be <= 47"),
    (with_("llama-4-scout", nested=True, moe_layers=[0, 99]), "moe_layers must be <= 47"),
    (with_("llama-4-scout", nested=True, no_rope_layers=[1, 2, 3]), "'text_config.no_rope_layers'"),
    (with_("opt-13b", word_embed_proj_dim=512), "'word_embed_proj_dim' = 512 is not supported"),
    (with_("gpt2", add_cross_attention=True), "'add_cross_attention' = True is not supported"),
    (with_("gemma-3-27b", nested=True, use_bidirectional_attention=True), "'text_config.use_bidirectional_attention'"),
    ({**without("llama-3-8b", "model_type"), "kv_lora_rank": 512}, "'kv_lora_rank' needs a family"),
    ({**without("llama-3-8b", "model_type"), "num_local_experts": 8}, "'num_local_experts' needs a family"),
    ({**without("llama-3-8b", "model_type"), "sliding_window": 4096}, "'sliding_window' needs a family"),
]


@pytest.mark.parametrize("bad, match", BAD, ids=[m.replace("\\", "")[:60] for _, m in BAD])
def test_a_config_that_cannot_be_modelled_is_refused_with_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        from_hf_config(bad)


def test_there_are_at_least_thirty_refusals():
    assert len(BAD) >= 30
