import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import memory, models
from servebook.models import ModelSpec
from servebook.units import GB, GiB, MiB

TOY = ModelSpec("toy", n_layers=6, d_model=512, n_heads=8)  # the seeds' C1 model
L21 = ModelSpec("l2.1", n_layers=32, d_model=4096, n_heads=32)  # the seeds' L2.1 model


def test_c1_small_model():
    assert memory.kv_cache_bytes(TOY, seq_len=128) == 1_572_864
    assert memory.kv_cache_bytes(TOY, seq_len=128) / MiB == 1.5
    assert memory.kv_cache_bytes(TOY, seq_len=128, dtype="int8") / MiB == 0.75


def test_c2_batch_until_oom():
    per_request = memory.kv_cache_bytes("llama-2-13b", seq_len=4096)
    assert per_request == 3_355_443_200
    assert per_request / GiB == 3.125
    assert round(per_request / GB, 3) == 3.355
    batch = memory.max_batch(40 * GiB, per_request)
    assert batch == 12
    assert 40 * GiB - batch * per_request == 2.5 * GiB
    assert 13 * per_request > 40 * GiB


def test_l21_l22_decimal_units():
    per_request = memory.kv_cache_bytes(L21, seq_len=2048)
    assert per_request == 1_073_741_824 == 1 * GiB  # "about 1.07 GB" is exactly one GiB
    assert round(per_request / GB, 2) == 1.07
    assert memory.max_batch(40 * GB, per_request) == 37


def test_gqa_stores_a_quarter_of_mha():
    assert memory.kv_bytes_per_token("llama-2-7b") == 4 * memory.kv_bytes_per_token("llama-3-8b")
    assert memory.kv_bytes_per_token("llama-2-7b") == 2 * 32 * 4096 * 2 == 524_288


def test_int4_kv_rounds_up_to_whole_bytes():
    odd = ModelSpec("odd", n_layers=1, d_model=1, n_heads=1)
    assert memory.kv_cache_bytes(odd, seq_len=1, dtype="int4") == 1  # 2 values x 1/2 byte
    assert memory.kv_cache_bytes(odd, seq_len=3, dtype="int4") == 3


def test_weight_bytes_by_precision():
    n = 13 * 10**9
    assert [memory.weight_bytes(n, d) for d in ("fp16", "int8", "int4")] == [26 * GB, 13 * GB, 6.5 * GB]
    # group-wise INT4: one fp16 scale and one 4-bit zero point per 128 weights
    assert memory.weight_bytes(128, "int4", group_size=128) == 64 + 2 + 1


def test_capacity_plan_c9():
    per_user = memory.kv_cache_bytes("llama-2-13b", seq_len=4096)
    fp16 = memory.capacity_plan(80 * GiB, 26 * GiB, per_user, overhead=4 * GiB)
    int4 = memory.capacity_plan(80 * GiB, 6.5 * GiB, per_user, overhead=4 * GiB)
    assert (fp16.kv_pool, fp16.requests, fp16.leftover) == (50 * GiB, 16, 0)
    assert (int4.kv_pool, int4.requests) == (69.5 * GiB, 22)
    assert "22 requests" in int4.describe("GiB")


@pytest.mark.parametrize("call, error, match", [
    (lambda: memory.kv_cache_bytes(TOY, seq_len=0), ValueError, "seq_len must be >= 1"),
    (lambda: memory.kv_cache_bytes(TOY, seq_len=12.5), TypeError, "seq_len must be a whole number"),
    (lambda: memory.kv_cache_bytes(TOY, seq_len=8, batch=-1), ValueError, "batch must be >= 1"),
    (lambda: memory.kv_cache_bytes(TOY, seq_len=8, dtype="fp12"), ValueError, "unknown dtype"),
    (lambda: memory.kv_cache_bytes(3, seq_len=8), TypeError, "model must be a ModelSpec"),
    (lambda: memory.max_batch(-1, 10), ValueError, "budget must be >= 0"),
    (lambda: memory.max_batch(10, 0), ValueError, "per_request must be > 0"),
    (lambda: memory.max_batch(float("nan"), 10), ValueError, "budget must be finite"),
    (lambda: memory.max_batch(10.5, 3), ValueError, "whole number of bytes"),
    (lambda: memory.capacity_plan(80 * GiB, 60 * GiB, GiB, overhead=30 * GiB), ValueError, "exceed the GPU"),
    (lambda: memory.weight_bytes(0), ValueError, "n_params must be >= 1"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 96), st.sampled_from([8, 16, 32, 64]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([64, 128]), st.integers(1, 32_768), st.integers(1, 256),
       st.sampled_from(["fp32", "fp16", "int8", "int4"]))
def test_kv_bytes_are_linear_in_batch_and_length(layers, heads, group, head_dim, seq_len, batch, dtype):
    spec = ModelSpec("h", n_layers=layers, d_model=heads * head_dim, n_heads=heads,
                     n_kv_heads=heads // group, head_dim=head_dim)
    one = memory.kv_cache_bytes(spec, seq_len=1, dtype=dtype)
    assert one == memory.kv_bytes_per_token(spec, dtype)
    assert memory.kv_cache_bytes(spec, seq_len=seq_len, batch=batch, dtype=dtype) == one * seq_len * batch
    assert group * memory.kv_bytes_per_token(spec, dtype) == memory.kv_bytes_per_token(
        ModelSpec("mha", n_layers=layers, d_model=heads * head_dim, n_heads=heads, head_dim=head_dim), dtype)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**12), st.integers(1, 10**11))
def test_max_batch_is_the_floor(budget, per_request):
    batch = memory.max_batch(budget, per_request)
    assert batch * per_request <= budget < (batch + 1) * per_request


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.integers(0, 100), st.integers(1, 20))
def test_capacity_plan_parts_add_up(gpu_gib, overhead_pct, per_request_gib):
    gpu = gpu_gib * GiB
    overhead = gpu * overhead_pct // 200
    weights = gpu // 3
    plan = memory.capacity_plan(gpu, weights, per_request_gib * GiB, overhead=overhead)
    assert plan.weights + plan.overhead + plan.kv_used + plan.leftover == gpu
    assert 0 <= plan.leftover < plan.per_request


# --- the layer pattern, latent attention, vLLM's pages ----------------------------------------------


def test_mla_stores_its_latent_once_per_layer():
    spec = models.get("deepseek-v3")
    assert memory.kv_bytes_per_token_per_layer(spec, "bf16") == (512 + 64) * 2
    assert memory.kv_bytes_per_token(spec, "bf16") == 70_272
    assert memory.kv_cache_bytes(spec, seq_len=4096, batch=2) == 2 * 4096 * 70_272


def test_keys_and_values_of_different_widths():
    spec = ModelSpec("kv", n_layers=2, d_model=512, n_heads=8, n_kv_heads=2, head_dim=64, v_head_dim=32)
    assert memory.kv_bytes_per_token(spec) == 2 * 2 * (64 + 32) * 2


@pytest.mark.parametrize("seq_len", [1, 1000, 4096, 4097, 8192, 32_768])
def test_sliding_layers_hold_at_most_their_window(seq_len):
    spec = models.get("gemma-2-9b")  # 21 sliding layers of W = 4096, 21 global
    per_layer = memory.kv_bytes_per_token_per_layer(spec)
    assert memory.tokens_held(spec, "sliding", seq_len) == min(seq_len, 4096)
    assert memory.kv_cache_bytes(spec, seq_len) == 21 * per_layer * (seq_len + min(seq_len, 4096))
    assert sum(memory.kv_bytes_by_layer_kind(spec, seq_len).values()) == memory.kv_cache_bytes(spec, seq_len)


def test_a_model_whose_layers_all_slide_stops_growing_at_its_window():
    one = memory.kv_cache_bytes("mistral-7b", 4096)
    assert memory.kv_cache_bytes("mistral-7b", 32_768) == one == 4096 * memory.kv_bytes_per_token("mistral-7b")


def test_chunked_layers_hold_their_chunk():
    spec = models.get("llama-4-scout")  # 36 chunked layers of C = 8192, 12 global
    per_layer = memory.kv_bytes_per_token_per_layer(spec)
    assert memory.kv_bytes_by_layer_kind(spec, 32_768) == {"global": 12 * 32_768 * per_layer,
                                                           "chunked": 36 * 8192 * per_layer}


def test_vllm_page_per_layer_for_each_kind():
    # vLLM 0.33.0 AttentionSpec.page_size_bytes: kv heads x block x (head_size + head_size_v) x dtype size.
    assert memory.vllm_page_bytes("llama-2-13b") == 40 * 16 * (128 + 128) * 2 == 327_680
    assert memory.vllm_page_bytes("llama-3-8b", block_size=32, dtype="fp8") == 8 * 32 * 256
    # MLAAttentionSpec: one head of kv_lora_rank + qk_rope_head_dim, no V.
    assert memory.vllm_page_bytes("deepseek-v3") == 16 * 576 * 2 == 18_432
    assert memory.vllm_page_bytes("gemma-2-9b") == 16 * memory.kv_bytes_per_token_per_layer("gemma-2-9b")


def test_vllm_reserves_a_few_blocks_more_than_the_window():
    # SlidingWindowSpec.max_admission_blocks_per_request: cdiv(min(W - 1 + in-flight, max_model_len), block) + 1.
    kw = dict(block_size=16, max_num_batched_tokens=2048, concurrent_batches=1)  # --no-async-scheduling
    assert memory.vllm_max_blocks("gemma-2-9b", "sliding", 8192, **kw) == (4095 + 2048 + 15) // 16 + 1 == 385
    assert memory.vllm_max_blocks("gemma-2-9b", "global", 8192, **kw) == 512
    assert 4096 // 16 < 385  # W alone would be 256 blocks
    # With async scheduling (2 batches in flight) the bound reaches max_model_len's blocks, plus one.
    assert memory.vllm_max_blocks("gemma-2-9b", "sliding", 8192, **(kw | dict(concurrent_batches=2))) == 513
    assert memory.VLLM_CONCURRENT_BATCHES == 2  # vLLM 0.33.0's default: async scheduling
    # ChunkedLocalAttentionSpec: cdiv(min(C + in-flight, max_model_len), block).
    assert memory.vllm_max_blocks("llama-4-scout", "chunked", 32_768, block_size=16,
                                  max_num_batched_tokens=8192, concurrent_batches=1) == 1024
    page = memory.vllm_page_bytes("gemma-2-9b")
    assert memory.vllm_max_request_bytes("gemma-2-9b", 8192, **kw) == 21 * page * (512 + 385)


def test_weights_total_and_active():
    assert memory.model_weight_bytes("mixtral-8x7b") == 2 * 46_702_792_704
    assert memory.model_weight_bytes("mixtral-8x7b", active=True) == 2 * 12_879_925_248
    assert memory.model_weight_bytes("llama-2-13b", "int4", group_size=128) == memory.weight_bytes(
        13_015_864_320, "int4", group_size=128)


def test_capacity_plan_follows_the_layers():
    # Gemma-2-9B on an H100 at 8k tokens: 1.969 GiB per request (not 2.625), 4 GiB reserved.
    gpu = 81_559 * MiB
    plan = memory.model_capacity_plan("gemma-2-9b", gpu, 8192, overhead=4 * GiB)
    assert plan.per_request == 2_113_929_216 and plan.weights == 2 * 9_241_705_984
    assert plan.requests == (gpu - 2 * 9_241_705_984 - 4 * GiB) // 2_113_929_216 == 29
    # DeepSeek-V2-Lite: MLA's 576 elements per token and layer let one H200 hold 451 requests of 8k tokens.
    lite = memory.model_capacity_plan("deepseek-v2-lite", 143_771 * MiB, 8192, overhead=4 * GiB)
    assert lite.per_request == 8192 * 27 * 576 * 2 and lite.requests == 451


@pytest.mark.parametrize(("call", "match"), [
    (lambda: memory.tokens_held("gemma-2-9b", "local", 10), "kind must be one of"),
    (lambda: memory.vllm_max_blocks("gemma-2-9b", "sliding", 8192), "max_num_batched_tokens"),
    (lambda: memory.vllm_page_bytes("gemma-2-9b", block_size=0), "block_size must be >= 1"),
    (lambda: memory.model_weight_bytes(TOY), "need the model's parameter count"),
    (lambda: memory.model_weight_bytes("gpt2", active="yes"), "active must be True or False"),
])
def test_bad_input_to_the_new_functions_is_named(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
