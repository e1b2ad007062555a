"""The lab and modern shapes: reduced shapes keep what each layer is, a Llama is never built for a shape it
cannot have, and a config servebook cannot model is a clean skip before any weight is loaded."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from servebook import lab, memory, models  # noqa: E402
from servebook.lab import load  # noqa: E402
from servebook.models import Biases, ModelSpec  # noqa: E402


def test_a_reduced_hybrid_keeps_its_alternation_window_and_norms():
    full, small = models.get("gemma-2-9b"), lab.reduced_spec("gemma-2-9b", 8)
    assert small.layer_types == ("sliding", "global", "sliding", "global", "sliding") == full.layer_types[:5]
    assert (small.sliding_window, small.norms, small.tied_embeddings) == (4096, full.norms, True)
    assert (small.head_dim, small.group_size) == (full.head_dim, full.group_size)
    assert small.n_params == small.count_params()
    # Past the window only the global layers grow, at the reduced size too.
    grow = memory.kv_cache_bytes(small, 8193) - memory.kv_cache_bytes(small, 8192)
    assert grow == small.layers_of("global") * memory.kv_bytes_per_token_per_layer(small)


def test_a_reduced_mixture_of_experts_keeps_its_experts_and_top_k():
    small = lab.reduced_spec("mixtral-8x7b", 8)
    assert (small.moe.n_experts, small.moe.top_k, small.moe.expert_size) == (8, 2, 14336 // 8)
    assert small.count_active_params() < small.n_params == small.count_params()


def test_a_reduced_mla_model_keeps_its_latent_shape_and_dense_first_layers():
    full, small = models.get("deepseek-v3"), lab.reduced_spec("deepseek-v3", 8)
    assert small.attention == "MLA" and small.n_layers == 7
    assert (small.mla.kv_rank, small.mla.rope_dim, small.mla.nope_dim) == (512 // 8, 64, 128)
    assert small.moe.dense_layers == full.moe.dense_layers == (0, 1, 2)
    assert memory.kv_bytes_per_token(small) == 7 * (64 + 64) * 2  # one latent and one rope key, stored once


@pytest.mark.parametrize("name, what", [
    ("gemma-2-9b", "sliding-window or chunked layers"), ("deepseek-v3", "multi-head latent attention"),
    ("mixtral-8x7b", "a mixture of experts"), ("qwen2.5-7b", "biases on q, k and v without one on the output"),
    ("gpt2", "a learned position table"), ("qwen3-8b", "query and key norms"),
])
def test_a_shape_a_llama_cannot_have_is_refused_not_built(name, what):
    with pytest.raises(ValueError, match=f"cannot have .*{what}"):
        lab.llama_config(lab.reduced_spec(name, 8))


def test_a_llama_shape_is_built_with_its_biases():
    config = lab.llama_config(lab.reduced_spec("llama-3-8b", 8))
    assert (config.num_hidden_layers, config.num_key_value_heads, config.attention_bias) == (4, 1, False)
    biased = ModelSpec("biased", n_layers=1, d_model=64, n_heads=2, vocab_size=256, intermediate_size=128,
                       biases=Biases(qkv=True, o=True, mlp=True))
    config = lab.llama_config(biased)
    assert (config.attention_bias, config.mlp_bias) == (True, True)


def test_load_random_skips_a_mixture_of_experts_before_building_it():
    with pytest.raises(ValueError, match="a mixture of experts"):
        lab.load_random("qwen3-30b-a3b", lab.detect_device("cpu"), "fp32", reduce=16)


def test_a_counted_shape_says_its_biases_are_counted():
    qwen_like = ModelSpec("qwen-like", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, vocab_size=256,
                          intermediate_size=128, biases=Biases(qkv=True))
    spec, basis = load._with_parameter_count(qwen_like, "someone/qwen-like")
    assert spec.n_params == qwen_like.count_params() and "biases and norms included" in basis


def test_a_config_servebook_cannot_model_is_a_clean_skip(tmp_path):
    config = {"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps(config))
    # No weights, no tokenizer: the refusal comes from the config alone, before anything is loaded.
    with pytest.raises(lab.ModelUnavailable, match="servebook cannot model .*model_type.*mamba"):
        lab.load_hub(str(tmp_path), lab.detect_device("cpu"), online=False)
