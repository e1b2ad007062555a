import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import memory
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
