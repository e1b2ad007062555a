import json
from dataclasses import replace
from fractions import Fraction

import pytest

from servebook import models, units
from servebook.models import ModelSpec


def test_binary_and_decimal_units_differ():
    assert units.GiB == 2**30 and units.GB == 10**9
    assert units.MiB == 1_048_576 and units.MB == 1_000_000
    assert units.fmt_bytes(3_355_443_200, "GiB") == "3.125 GiB"
    assert units.fmt_both(3_355_443_200) == "3.125 GiB = 3.355 GB"


@pytest.mark.parametrize("dtype, expected", [("fp32", 4), ("fp16", 2), ("bf16", 2), ("fp8", 1), ("int8", 1),
                                             ("int4", Fraction(1, 2)), ("float16", 2), ("torch.bfloat16", 2)])
def test_bytes_per_element(dtype, expected):
    assert units.bytes_per_element(dtype) == expected


def test_unknown_dtype_and_unit_are_named():
    with pytest.raises(ValueError, match="unknown dtype 'int3'.*fp16"):
        units.bytes_per_element("int3")
    with pytest.raises(TypeError, match="dtype must be a string"):
        units.bytes_per_element(2)
    with pytest.raises(ValueError, match="unknown unit 'gib'"):
        units.to_unit(1, "gib")


@pytest.mark.parametrize("name", models.names())
def test_registry_parameter_counts_match_the_architecture(name):
    spec = models.get(name)
    assert spec.count_params() == spec.n_params


def test_qwen_biases_and_falcon_are_counted():
    # Qwen2's q/k/v biases: (896 + 2 * 128) * 24 layers, once missing from count_params.
    qwen = models.get("qwen2.5-0.5b")
    assert qwen.biases.qkv and qwen.count_params() == 494_032_768
    assert replace(qwen, biases=models.Biases()).count_params() == 494_032_768 - (896 + 2 * 128) * 24
    # Falcon-7B: MQA, one LayerNorm per parallel block, a non-gated MLP, tied embeddings.
    assert models.get("falcon-7b").count_params() == 6_921_720_704


@pytest.mark.parametrize("name, kind, kv_dim", [("llama-2-7b", "MHA", 4096), ("llama-2-13b", "MHA", 5120),
                                                ("llama-3-8b", "GQA", 1024), ("mistral-7b", "GQA", 1024),
                                                ("llama-2-70b", "GQA", 1024), ("falcon-7b", "MQA", 64)])
def test_attention_variant_and_kv_width(name, kind, kv_dim):
    spec = models.get(name)
    assert spec.attention == kind and spec.kv_dim == kv_dim


def test_registry_lookup_errors_list_known_models():
    assert models.get("Llama-2-13B") is models.get("llama-2-13b")
    with pytest.raises(ValueError, match="unknown model 'gpt-5'.*llama-2-7b"):
        models.get("gpt-5")


LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
}


def test_from_hf_config_dict_and_path(tmp_path):
    spec = ModelSpec.from_hf_config(LLAMA3_8B_CONFIG, name="llama-3-8b")
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (32, 4096, 32, 8, 128)
    assert spec.count_params() == models.get("llama-3-8b").n_params
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
    from_path = ModelSpec.from_hf_config(folder)
    assert from_path.name == "Meta-Llama-3-8B" and from_path.kv_dim == 1024


def test_from_hf_config_reads_gpt_style_and_multi_query_names():
    spec = ModelSpec.from_hf_config({"n_layer": 32, "hidden_size": 4544, "n_head": 71, "multi_query": True,
                                     "head_dim": 64}, name="falcon")
    assert spec.attention == "MQA" and spec.kv_dim == 64


def test_from_hf_config_names_the_missing_field():
    config = dict(LLAMA3_8B_CONFIG)
    del config["num_hidden_layers"]
    with pytest.raises(ValueError, match="missing 'num_hidden_layers'"):
        ModelSpec.from_hf_config(config)
    with pytest.raises(TypeError, match="config must be a dict, a path to config.json or a transformers"):
        ModelSpec.from_hf_config(42)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(n_layers=0, d_model=512, n_heads=8), ValueError, "n_layers must be >= 1"),
    (dict(n_layers=2, d_model=-512, n_heads=8), ValueError, "d_model must be >= 1"),
    (dict(n_layers=2.5, d_model=512, n_heads=8), TypeError, "n_layers must be a whole number"),
    (dict(n_layers=2, d_model=512, n_heads=8, n_kv_heads=3), ValueError, "divisible by n_kv_heads"),
    (dict(n_layers=2, d_model=500, n_heads=8), ValueError, "give head_dim explicitly"),
])
def test_bad_shapes_are_rejected_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        ModelSpec("bad", **kwargs)


def test_the_simple_case_stays_one_line():
    spec = ModelSpec("x", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8)
    assert (spec.attention, spec.kv_dim, spec.group_size, spec.head_dim) == ("GQA", 1024, 4, 128)
    assert spec.layer_types == ("global",) * 32 and spec.moe is None and spec.mla is None
    assert spec.cached_width == 2 * spec.kv_dim and spec.display_name == "x"


def test_display_names():
    assert models.display_name("llama-2-13b") == "Llama-2-13B" == models.get("llama-2-13b").display_name
    assert models.display_name("deepseek-v3") == "DeepSeek-V3"
    assert all(models.display_name(n) != n for n in models.names())  # every id has a name of its own
