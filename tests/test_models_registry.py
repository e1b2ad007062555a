"""The model registry: transcribed configs with sources, counts that match transformers and the published ones."""

import json
import re
from pathlib import Path

import pytest

from servebook import models
from servebook.models import from_hf_config

ROOT = Path(__file__).resolve().parents[1]
BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(encoding="utf-8"), re.M))
GOLDEN = json.loads((ROOT / "tests" / "golden" / "param-counts.json").read_text(encoding="utf-8"))["counts"]
IDS = models.names()

FIRST_EDITION = {  # the nine models of the first edition and their counts, unchanged
    "llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320, "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496, "llama-3.2-1b": 1_235_814_400,
    "mistral-7b": 7_241_732_096, "qwen2.5-0.5b": 494_032_768, "falcon-7b": 6_921_720_704,
}


def test_the_registry_holds_the_models_readers_serve():
    assert len(IDS) >= 25 and IDS[:9] == list(FIRST_EDITION)
    for model_id in ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-4-scout", "qwen2.5-7b", "qwen2.5-72b",
                     "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite", "deepseek-v3", "gemma-2-9b",
                     "gemma-2-27b", "gemma-3-27b", "phi-3-mini", "opt-13b", "gpt2", "falcon-7b"):
        assert model_id in IDS
    assert {models.get(n).attention for n in IDS} == {"MHA", "GQA", "MQA", "MLA"}


@pytest.mark.parametrize("model_id", list(FIRST_EDITION))
def test_the_first_editions_models_keep_their_numbers(model_id):
    assert models.get(model_id).n_params == FIRST_EDITION[model_id]


@pytest.mark.parametrize("model_id", IDS)
def test_every_entry_names_its_source(model_id):
    entry = models.record(model_id)
    source = entry["source"]
    assert entry["id"] == model_id == model_id.lower()
    assert source["url"] == f"https://huggingface.co/{source['repo']}/blob/main/config.json"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", source["read_on"]) and source["checked_against"]
    assert source.get("cite", "touvron2023llama2") in BIB_KEYS
    published = entry["published_params"]
    assert published["source"] and published["as_published"]
    assert published["kind"] in ("exact", "rounded", "truncated", "nominal")
    if published["kind"] in ("truncated", "nominal"):
        assert published["why"]


@pytest.mark.parametrize("model_id", IDS)
def test_count_params_agrees_with_the_registry_and_with_transformers(model_id):
    spec = models.get(model_id)
    assert spec.count_params() == spec.n_params == GOLDEN[model_id]["language_model"]
    assert spec.count_active_params() <= spec.n_params
    assert (spec.count_active_params() < spec.n_params) == (spec.moe is not None)


def _agrees(value: int, published: dict) -> bool:
    """``value`` printed as the published figure: exactly, rounded or truncated to ``precision``."""
    step = published.get("precision", 1)
    if published.get("kind") == "truncated":
        return value // step * step == published["value"]
    return abs(value - published["value"]) * 2 <= step


@pytest.mark.parametrize("model_id", IDS)
def test_every_count_equals_the_published_one_or_says_why_not(model_id):
    entry, spec = models.record(model_id), models.get(model_id)
    published = entry["published_params"]
    counted = GOLDEN[model_id]["whole_model"] if "describes" in published else spec.n_params
    if published["kind"] == "exact":
        assert counted == published["value"]
    elif published["kind"] in ("rounded", "truncated"):
        assert _agrees(counted, published), (counted, published)
    else:  # a size class ("7B"): close, and the entry says what the model really has
        assert abs(counted / published["value"] - 1) < 0.05 and f"{counted:,}" in published["why"]
    if "describes" in published:  # e.g. a vision encoder the language model does not have
        assert f"{spec.n_params:,}" in published["why"] and counted > spec.n_params


@pytest.mark.parametrize("model_id", [n for n in IDS if "non_embedding" in models.record(n)["published_params"]])
def test_published_non_embedding_counts(model_id):
    spec = models.get(model_id)
    tables = (1 if spec.tied_embeddings else 2) * spec.vocab_size * spec.d_model
    assert _agrees(spec.n_params - tables, models.record(model_id)["published_params"]["non_embedding"])


@pytest.mark.parametrize("model_id", [n for n in IDS if "active" in models.record(n)["published_params"]])
def test_published_active_counts(model_id):
    spec, active = models.get(model_id), models.record(model_id)["published_params"]["active"]
    counted = spec.count_active_params()
    if active.get("without") == "input_embedding":  # DeepSeek counts the LM head but not the input embedding
        counted -= spec.vocab_size * spec.d_model
    assert _agrees(counted, active), (counted, active)
    if active.get("kind") == "truncated" or "without" in active:
        assert active["why"]


def test_deepseek_v3_checkpoint_holds_more_than_the_model():
    # README_WEIGHTS.md: 671B main model; the Hub's 685B add the MTP module (11.5B unique) and FP8 scale tensors.
    checkpoint = models.record("deepseek-v3")["published_params"]["checkpoint"]
    assert checkpoint["as_published"] == "685B" and "multi-token-prediction" in checkpoint["why"]
    assert models.record("deepseek-v3")["config"]["num_nextn_predict_layers"] == 1
    assert round(models.get("deepseek-v3").n_params / 1e9) == 671 < 685


# --- the exact oracle, live ------------------------------------------------------------------------------


SMALL = {  # small configs of every family, to build with transformers in a second
    "llama": dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, attention_bias=True, mlp_bias=True),
    "qwen2": dict(model_type="qwen2", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, tie_word_embeddings=True),
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8,
                      num_experts_per_tok=2, vocab_size=128, mlp_only_layers=[1]),
    "qwen2_moe": dict(model_type="qwen2_moe", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, vocab_size=128),
    "gemma3_text": dict(model_type="gemma3_text", hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=32, vocab_size=128, sliding_window=16),
    "deepseek_v2": dict(model_type="deepseek_v2", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                        num_hidden_layers=3, num_attention_heads=4, kv_lora_rank=16, q_lora_rank=None,
                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4, n_shared_experts=2,
                        num_experts_per_tok=2, first_k_dense_replace=1, vocab_size=128),
    "deepseek_v3": dict(model_type="deepseek_v3", hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                        num_hidden_layers=3, num_attention_heads=4, kv_lora_rank=16, q_lora_rank=24,
                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=8, n_shared_experts=1,
                        num_experts_per_tok=2, first_k_dense_replace=1, n_group=2, topk_group=1, vocab_size=128),
    "llama4_text": dict(model_type="llama4_text", hidden_size=64, intermediate_size=32, intermediate_size_mlp=96,
                        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, vocab_size=128),
    "falcon": dict(model_type="falcon", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                   new_decoder_architecture=True, num_kv_heads=2, bias=True, vocab_size=128),
    "opt": dict(model_type="opt", hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=32, vocab_size=128, do_layer_norm_before=False),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, n_positions=32, vocab_size=128),
    "phi3": dict(model_type="phi3", hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=128, pad_token_id=0),
}


@pytest.mark.parametrize("family", list(SMALL))
def test_count_params_is_transformers_count_on_small_configs(family):
    pytest.importorskip("transformers")
    from scripts.count_params_oracle import transformers_count

    assert from_hf_config(SMALL[family]).count_params() == transformers_count(SMALL[family])
