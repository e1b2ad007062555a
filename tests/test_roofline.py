"""The roofline: GPU datasheet table, FLOPs and bytes of a step, bounds, crossover, W4A16 and W8A8."""

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from servebook import memory, models, roofline
from servebook.book import scenarios
from servebook.roofline import weight_scheme_speedup
from servebook.units import GB, GiB, MiB

ROOT = Path(__file__).resolve().parents[1]
BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(encoding="utf-8"), re.M))
LLAMA13 = models.get("llama-2-13b")
A100 = roofline.gpu("a100-80gb-sxm")


# --- the GPU table: units and datasheet figures -------------------------------------------------

# name: (bandwidth GB/s, dense FP16 TFLOP/s, dense INT8 TOP/s, datasheet prints sparse, nvidia-smi MiB)
DATASHEET = {
    "a100-80gb-sxm": (2039, 312, 624, False, 81_920),
    "a100-40gb-sxm": (1555, 312, 624, False, 40_960),
    "h100-sxm": (3350, 1979 / 2, 3958 / 2, True, 81_559),
    "h200": (4800, 1979 / 2, 3958 / 2, True, 143_771),
    "l4": (300, 242 / 2, 485 / 2, True, 23_034),
    "t4": (320, 65, 130, False, 15_360),
}


def test_the_table_has_at_least_the_five_gpus():
    assert set(DATASHEET) <= set(roofline.GPUS)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_gpu_units_are_bytes_and_operations_per_second(name):
    g = roofline.gpu(name)
    bandwidth, fp16, int8, sparse, smi_mib = DATASHEET[name]
    assert isinstance(g.memory, int) and g.memory == smi_mib * MiB
    assert isinstance(g.bandwidth, int) and g.bandwidth == bandwidth * GB
    assert g.fp16_flops == pytest.approx(fp16 * 1e12) and g.int8_ops == pytest.approx(int8 * 1e12)
    assert g.fp16.sparse is sparse and g.int8.sparse is sparse
    assert g.int8_ops == pytest.approx(2 * g.fp16_flops, rel=0.01)  # INT8 tensor cores: twice FP16
    assert g.fp32_flops < g.fp16_flops  # CUDA cores are far slower than tensor cores
    assert g.source in BIB_KEYS and g.url.startswith("https://www.nvidia.com/")
    if sparse:
        assert "sparsity" in g.notes


def test_h100_dense_bf16_is_half_the_sparse_datasheet_figure():
    h100 = roofline.gpu("H100-SXM")
    assert h100.fp16.value == 1979 and h100.fp16.sparse
    assert h100.fp16_flops == pytest.approx(989.5e12)


def test_a100_80gb_is_80_gib():
    # The datasheet's "80GB" is binary: nvidia-smi shows 81,920 MiB.
    assert A100.memory == 80 * GiB and A100.memory_label.startswith("80GB")


@pytest.mark.parametrize(("name", "ridge"), [("a100-80gb-sxm", 153.0), ("h100-sxm", 295.4), ("h200", 206.1),
                                             ("l4", 403.3), ("t4", 203.1)])
def test_ridge_points(name, ridge):
    assert roofline.ridge_point(name) == pytest.approx(ridge, abs=0.05)
    assert roofline.ridge_point(name, "int8") == pytest.approx(2 * ridge, rel=0.01)


def test_gpu_table_rows_carry_units_in_their_headers():
    rows = roofline.gpu_table()
    assert [r["GPU"] for r in rows] == list(roofline.GPUS)
    numeric = [key for key, value in rows[0].items() if isinstance(value, (int, float))]
    assert numeric and all(re.search(r"(\(|, )(GB/s|GiB|TFLOP/s|TOP/s|FLOP/B)\)$", key) for key in numeric)
    assert rows[0]["bandwidth (GB/s)"] == 2039 and rows[0]["memory (nvidia-smi, GiB)"] == 80.0


# --- what a step counts ---------------------------------------------------------------------------


def test_matmul_params_leave_out_the_input_embedding():
    assert roofline.matmul_params(LLAMA13) == LLAMA13.n_params - 32_000 * 5120
    tied = models.get("llama-3.2-1b")
    assert roofline.matmul_params(tied) == tied.n_params  # the shared matrix is also the LM head


def test_step_counts_follow_the_formulas():
    n = roofline.matmul_params(LLAMA13)
    q_dim = LLAMA13.n_heads * LLAMA13.head_dim
    kv = memory.kv_bytes_per_token(LLAMA13)
    pre = roofline.prefill_step(LLAMA13, batch=2, prompt_len=10)
    assert pre.matmul_flops == 2 * n * 20
    assert pre.attention_flops == 4 * LLAMA13.n_layers * q_dim * (10 * 11 // 2) * 2  # causal pairs
    assert (pre.kv_read_bytes, pre.kv_write_bytes) == (0, kv * 20)
    dec = roofline.decode_step(LLAMA13, batch=3, context_len=100)
    assert dec.matmul_flops == 2 * n * 3 and dec.tokens == 3
    assert dec.attention_flops == 4 * LLAMA13.n_layers * q_dim * 101 * 3
    assert (dec.kv_read_bytes, dec.kv_write_bytes) == (kv * 100 * 3, kv * 3)
    assert dec.weight_bytes == pre.weight_bytes == 2 * n  # read once per step, whatever the batch
    assert dec.dequant_flops == 0


def test_l11_prefill_is_compute_bound_and_decode_memory_bound():
    a = roofline.bound(roofline.prefill_step(LLAMA13, 1, 500), A100)
    b = roofline.bound(roofline.decode_step(LLAMA13, 1, 500), A100)
    c = roofline.bound(roofline.decode_step(LLAMA13, 1, 501), A100)
    assert a.bound == "compute" and b.bound == c.bound == "memory"
    assert b.step.intensity == pytest.approx(1.0, abs=0.05)
    assert 3 < a.time / b.time < 4  # 500 times the FLOPs, only ~3 times the time
    assert b.tokens_per_s == pytest.approx(78, abs=1)


def test_chapter_01_decode_steps_are_memory_bound_and_its_prefills_compute_bound():
    # Decode at batch 1..256 with 512 tokens cached stays left of the ridge; prefills sit right of it.
    case = scenarios.PREFILL_DECODE
    assert (case.spec, case.device) == (LLAMA13, A100)
    assert [b.bound for b in case.decode_bounds()] == ["memory"] * 4
    assert all(b.step.intensity < roofline.ridge_point(A100) for b in case.decode_bounds())
    assert [b.bound for b in case.prefill_bounds()] == ["compute"] * 2


# --- properties -------------------------------------------------------------------------------------

model_names = st.sampled_from(["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "llama-3-70b",
                               "qwen2.5-0.5b", "falcon-7b"])
gpu_names = st.sampled_from(sorted(roofline.GPUS))


@settings(max_examples=60, deadline=None)
@given(model=model_names, gpu=gpu_names, batch=st.integers(1, 2048), context=st.integers(0, 32_768))
def test_decode_bound_is_memory_side_below_the_ridge(model, gpu, batch, context):
    b = roofline.bound(roofline.decode_step(model, batch, context), gpu)
    ridge = roofline.ridge_point(gpu)
    assert b.time == max(b.compute_time, b.memory_time) > 0
    assert b.tokens_per_s == pytest.approx(batch / b.time)
    if b.step.intensity < ridge:
        assert b.bound == "memory" and b.time == b.memory_time
    elif b.step.intensity > ridge:
        assert b.bound == "compute" and b.time == b.compute_time
    assert b.attainable_flops <= roofline.gpu(gpu).fp16_flops * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(model=model_names, gpu=gpu_names, batch=st.integers(1, 64), context=st.integers(0, 4096),
       steps=st.integers(0, 60), weights=st.sampled_from(sorted(roofline.SCHEMES)))
def test_decode_time_is_the_sum_of_step_bounds(model, gpu, batch, context, steps, weights):
    assume(roofline.runs_on(roofline.gpu(gpu), roofline.scheme(weights)))
    brute = sum(roofline.bound(roofline.decode_step(model, batch, context + j, weights), gpu).time
                for j in range(steps))
    assert roofline.decode_time(model, gpu, batch, context, steps, weights) == pytest.approx(brute, rel=1e-9)


@pytest.mark.parametrize(("model", "gpu", "context", "weights"), [
    (model, gpu, context, weights)
    for model, gpu, context in [("llama-2-13b", "a100-80gb-sxm", 0), ("llama-2-13b", "a100-80gb-sxm", 128),
                                ("llama-3-8b", "h100-sxm", 512), ("llama-3-70b", "h200", 256),
                                ("mistral-7b", "l4", 0)]
    for weights in sorted(roofline.SCHEMES) if roofline.runs_on(roofline.gpu(gpu), roofline.scheme(weights))])
def test_crossover_batch_is_the_first_compute_bound_batch(model, gpu, context, weights):
    cross = roofline.decode_crossover_batch(model, gpu, context, weights)
    if cross is None:  # a sequence's own KV reads outweigh its FLOPs: no batch is compute-bound
        assert all(roofline.bound(roofline.decode_step(model, b, context, weights), gpu).bound == "memory"
                   for b in (1, 64, 4096, 10**6))
        return
    bound_at = [roofline.bound(roofline.decode_step(model, b, context, weights), gpu).bound
                for b in range(1, cross + 1)]
    assert bound_at[-1] == "compute" and "compute" not in bound_at[:-1]


def test_crossover_never_for_long_mha_contexts_and_near_the_ridge_at_zero_context():
    assert roofline.decode_crossover_batch(LLAMA13, A100, 512) is None
    assert roofline.decode_crossover_batch(LLAMA13, A100, 0) == pytest.approx(roofline.ridge_point(A100), rel=0.02)
    for b in (1, 100, 10_000):
        assert roofline.bound(roofline.decode_step(LLAMA13, b, 512), A100).bound == "memory"
    crossings = [roofline.decode_crossover_batch("llama-3-8b", A100, c) for c in (0, 128, 256, 512)]
    assert crossings == sorted(crossings)  # more context, later crossover


# --- W4A16 and W8A8 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", sorted(roofline.GPUS))
def test_w4a16_speeds_decode_and_slows_large_prefill_w8a8_speeds_both(gpu):
    g = roofline.gpu(gpu)
    runs = [s for s in roofline.SCHEMES if roofline.runs_on(g, roofline.scheme(s))]
    dec = {s: roofline.bound(roofline.decode_step(LLAMA13, 1, 512, s), gpu).time for s in runs}
    pre = {s: roofline.bound(roofline.prefill_step(LLAMA13, 16, 2048, s), gpu).time for s in runs}
    assert dec["W4A16"] < dec["W8A8"] < dec["W16A16"]
    assert pre["W8A8"] < pre["W16A16"] < pre["W4A16"]
    # INT8 (and FP8) run at twice the FP16 rate (four times on a GeForce card, whose FP16 rate is
    # FP32-accumulate's); attention stays in FP16, so the speed-up comes close to that ratio without reaching it.
    for name, precision in (("W8A8", "int8"), ("W8A8-FP8", "fp8")):
        if name in runs:
            ceiling = g.peak(precision) / g.fp16_flops
            assert 0.9 * ceiling < pre["W16A16"] / pre[name] <= ceiling
            assert dec[name] == dec["W8A8"]  # one byte a weight either way: decode reads the same bytes
    assert ("W8A8-FP8" in runs) == (g.fp8 is not None)


def test_scheme_bounds_lists_the_schemes_the_gpu_runs():
    on_a100 = [b.step.scheme.name for b in roofline.scheme_bounds(LLAMA13, A100, "decode", 1, 512)]
    on_h100 = [b.step.scheme.name for b in roofline.scheme_bounds(LLAMA13, "h100-sxm", "decode", 1, 512)]
    assert on_a100 == ["W16A16", "W8A8", "W4A16"] and on_h100 == ["W16A16", "W8A8", "W8A8-FP8", "W4A16"]
    assert roofline.scheme("w8a8-fp8") is roofline.SCHEMES["W8A8-FP8"]
    with pytest.raises(ValueError, match="has no FP8 tensor cores"):
        roofline.bound(roofline.prefill_step(LLAMA13, 1, 128, "W8A8-FP8"), A100)
    with pytest.raises(ValueError, match="precision must be one of"):
        roofline.gpu(A100).has_tensor_cores("fp64")


def test_w4a16_weights_carry_group_scales():
    n = roofline.matmul_params(LLAMA13)
    step = roofline.decode_step(LLAMA13, 1, 0, "W4A16")
    assert step.weight_bytes == memory.weight_bytes(n, "int4", group_size=128) > n // 2


def test_w4a16_is_3_85_times_as_fast_at_one_token_and_0_80_at_16384_w8a8_twice_at_both():
    case = scenarios.PREFILL_DECODE
    def speed(tokens, weights):
        return weight_scheme_speedup(case.spec, case.device, tokens, weights)
    assert case.max_step_tokens == 16_384
    assert round(speed(1, "W4A16"), 2) == 3.85 and round(speed(16_384, "W4A16"), 2) == 0.80
    assert round(speed(1, "W8A8"), 2) == round(speed(16_384, "W8A8"), 2) == 2.00


def test_quant_speedup_alt_text_crossing():
    # Chapter 01's alt text: W4A16 falls below FP16 speed between 64 and 128 tokens per step.
    def faster(tokens):
        base = roofline.bound(roofline.prefill_step(LLAMA13, tokens, 1), A100).time
        return roofline.bound(roofline.prefill_step(LLAMA13, tokens, 1, "W4A16"), A100).time < base
    assert faster(64) and not faster(128)


def test_gpu_table_says_which_datasheet_figure_it_used():
    used = {row["GPU"]: row["datasheet figure used"] for row in roofline.gpu_table()}
    assert {name: used[name] for name in DATASHEET} == {name: "sparse, halved" if DATASHEET[name][3] else "dense"
                                                         for name in DATASHEET}
    assert used == {name: "sparse, halved" if g.fp16.sparse else "dense" for name, g in roofline.GPUS.items()}


# --- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: roofline.gpu("a100-40gb"), ValueError, "known GPUs: a100-80gb-sxm, a100-40gb-sxm, h100-sxm, h200, l4, t4"),
    (lambda: roofline.gpu(80), TypeError, "gpu must be"),
    (lambda: roofline.ridge_point("a100-80gb-sxm", "fp64"), ValueError, "precision must be one of"),
    (lambda: roofline.scheme("W2A16"), ValueError, "known schemes"),
    (lambda: roofline.prefill_step(LLAMA13, 1, 0), ValueError, "prompt_len must be >= 1"),
    (lambda: roofline.prefill_step(LLAMA13, 0, 10), ValueError, "batch must be >= 1"),
    (lambda: roofline.decode_step(LLAMA13, 1, -1), ValueError, "context_len must be >= 0"),
    (lambda: roofline.decode_step(LLAMA13, 1.5, 1), TypeError, "batch must be a whole number"),
    (lambda: roofline.decode_step("gpt-9", 1, 1), ValueError, "unknown model"),
    (lambda: roofline.bound("step", A100), TypeError, "step must be a StepCost"),
    (lambda: roofline.decode_time(LLAMA13, A100, 1, 0, -1), ValueError, "steps must be >= 0"),
    (lambda: roofline.scheme_bounds(LLAMA13, A100, "train", 1, 1), ValueError,
     "step must be one of 'prefill', 'decode'"),
    (lambda: roofline.matmul_params(models.ModelSpec("x", n_layers=1, d_model=8, n_heads=1)), ValueError,
     "needs n_params"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_zero_steps_take_no_time():
    assert roofline.decode_time(LLAMA13, A100, 4, 100, 0) == 0.0
    assert math.isfinite(roofline.decode_time(LLAMA13, A100, 4, 100, 1))


# --- the one step model ---------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["W16A16", "W8A8", "W4A16"])
def test_step_model_seconds_is_the_bound_of_its_cost(weights):
    """The simulator's fast path and the roofline's bound are one formula: equal to the last bit."""
    model = roofline.StepModel(LLAMA13, weights, device=A100)
    rng = np.random.default_rng(0)
    for _ in range(200):
        sequences = int(rng.integers(1, 64))
        tokens = sequences + int(rng.integers(0, 4000))
        cached = int(rng.integers(0, 100_000))
        pairs = tokens + int(rng.integers(0, 10**7))
        logits = int(rng.integers(0, tokens + 1))
        step = model.cost(sequences, tokens, cached, pairs, logits_tokens=logits)
        assert model.seconds(tokens, cached, pairs, logits) == roofline.bound(step, A100).time


@pytest.mark.parametrize("model", models.names())
@pytest.mark.parametrize(("weights", "device"), [("W16A16", A100), ("W8A8", "h100-sxm"), ("W4A16", "l4")])
def test_step_model_timer_gives_the_floats_of_seconds(model, weights, device):
    """The simulator's bound function drops the terms a model lacks: not one float may change."""
    step_model = roofline.StepModel(model, weights, device=device)
    local = step_model.spec.local_kind is not None
    timer = step_model.timer(local_as_global=local)
    rng = np.random.default_rng(1)
    for _ in range(100):
        sequences = int(rng.integers(1, 64))
        tokens = sequences + int(rng.integers(0, 4000))
        cached, pairs = int(rng.integers(0, 100_000)), tokens + int(rng.integers(0, 10**7))
        logits = int(rng.integers(0, tokens + 1))
        counts = (tokens, cached, pairs, logits)
        expected = step_model.seconds(*counts, cached, pairs) if local else step_model.seconds(*counts)
        assert timer(*counts) == expected


def test_step_model_timer_refuses_what_seconds_refuses():
    with pytest.raises(ValueError, match="needs a GPU"):
        roofline.StepModel(LLAMA13).timer()
    with pytest.raises(ValueError, match="sliding layers .* pass local_cached and local_pairs"):
        roofline.StepModel("mistral-7b", device=H100).timer()
    with pytest.raises(TypeError, match="local_as_global must be True or False"):
        roofline.StepModel(LLAMA13, device=H100).timer(local_as_global="yes")


def test_a_mixed_step_is_the_sum_of_its_prefill_and_decode_work():
    """One prefill of 100 tokens beside 8 decodes at context 500: FLOPs and KV bytes add, weights are read once."""
    prefill = roofline.prefill_step(LLAMA13, 1, 100)
    decode = roofline.decode_step(LLAMA13, 8, 500)
    pairs = roofline.attention_pairs(100, 0) + 8 * roofline.attention_pairs(1, 500)
    mixed = roofline.StepModel(LLAMA13).cost(9, 108, 8 * 500, pairs)
    assert mixed.matmul_flops == prefill.matmul_flops + decode.matmul_flops
    assert mixed.attention_flops == prefill.attention_flops + decode.attention_flops
    assert mixed.kv_read_bytes + mixed.kv_write_bytes == (prefill.kv_read_bytes + prefill.kv_write_bytes
                                                          + decode.kv_read_bytes + decode.kv_write_bytes)
    assert mixed.weight_bytes == prefill.weight_bytes == decode.weight_bytes


def test_last_token_logits_leave_out_the_lm_head_of_the_other_prompt_tokens():
    spec = models.get("llama-2-7b")
    every = roofline.prefill_step(spec, 4, 128)
    last = roofline.prefill_step(spec, 4, 128, logits="last")
    assert every.matmul_flops - last.matmul_flops == 2 * spec.vocab_size * spec.d_model * 4 * 127


def test_step_model_refuses_impossible_counts():
    model = roofline.StepModel(LLAMA13)
    with pytest.raises(ValueError, match="tokens must be >= 4"):
        model.cost(4, 3, 0, 3)
    with pytest.raises(ValueError, match="pairs must be >= 10"):
        model.cost(1, 10, 0, 9)
    with pytest.raises(ValueError, match="logits_tokens must be <= 10"):
        model.cost(1, 10, 0, 55, logits_tokens=11)
    with pytest.raises(ValueError, match="phase must be one of"):
        model.cost(1, 1, 0, 1, phase="both")
    with pytest.raises(ValueError, match="needs a GPU"):
        model.seconds(1, 0, 1)
    with pytest.raises(ValueError, match="logits must be one of"):
        roofline.prefill_step(LLAMA13, 1, 10, logits="first")


# --- mixtures of experts, local layers, latent attention ---------------------------------------------------

MIXTRAL = models.get("mixtral-8x7b")
H100 = roofline.gpu("h100-sxm")


def test_uniform_routing_reads_k_experts_for_one_token_and_all_for_many():
    assert roofline.experts_read(8, 2, 1) == 2 and roofline.experts_read(256, 8, 1) == pytest.approx(8)
    assert roofline.experts_read(8, 2, 4) == pytest.approx(8 * (1 - 0.75**4))
    assert roofline.experts_read(256, 8, 10_000) == pytest.approx(256)
    assert roofline.experts_read(8, 8, 1) == 8  # top-k = E: every token uses every expert


def test_moe_decode_reads_only_the_routed_experts_weights():
    model = roofline.StepModel(MIXTRAL)
    n_active = roofline.matmul_params(MIXTRAL) - MIXTRAL.moe_layers * 6 * 3 * 4096 * 14336
    assert model.n_active == n_active == MIXTRAL.count_active_params() - MIXTRAL.vocab_size * MIXTRAL.d_model
    one = roofline.decode_step(MIXTRAL, 1, 512)
    assert one.weight_bytes == 2 * n_active  # one token: its 2 experts per layer, in FP16
    assert one.matmul_flops == 2 * n_active  # FLOPs: the active parameters, 2 per weight
    wide = roofline.decode_step(MIXTRAL, 256, 512)
    assert one.weight_bytes < roofline.decode_step(MIXTRAL, 4, 512).weight_bytes < wide.weight_bytes
    assert wide.weight_bytes == pytest.approx(2 * roofline.matmul_params(MIXTRAL), rel=1e-6)  # all experts
    assert roofline.prefill_step(MIXTRAL, 1, 4096).weight_bytes == 2 * roofline.matmul_params(MIXTRAL)


def test_dense_models_read_all_their_weights_at_any_batch():
    model = roofline.StepModel(LLAMA13)
    assert model.params_read(1) == model.params_read(4096) == model.n_active == model.n_matmul


def test_mla_attends_over_its_latent():
    spec = models.get("deepseek-v3")
    dec = roofline.decode_step(spec, 1, 1000)
    per_pair = 2 * 128 * ((512 + 64) + 512)  # q·[latent; rope] and the weighted sum of latents, every head
    assert dec.attention_flops == 61 * per_pair * 1001
    assert dec.kv_read_bytes == 1000 * memory.kv_bytes_per_token(spec) == 1000 * 61 * 576 * 2


@pytest.mark.parametrize(("window", "new", "cached", "expected"), [
    (4, 1, 0, (0, 1)), (4, 1, 2, (2, 3)), (4, 1, 10, (3, 4)),  # decode: at most W - 1 cached, W keys
    (4, 6, 0, (0, 1 + 2 + 3 + 4 + 4 + 4)), (4, 3, 2, (2, 3 + 4 + 4)),
])
def test_local_view_of_a_sliding_layer(window, new, cached, expected):
    spec = models.ModelSpec("w", n_layers=2, d_model=64, n_heads=4, sliding_window=window)
    assert roofline.local_view(spec, new, cached) == expected
    brute = sum(min(cached + i, window) for i in range(1, new + 1))
    assert roofline.local_view(spec, new, cached)[1] == brute


def test_local_view_of_a_chunked_layer():
    spec = models.ModelSpec("c", n_layers=2, d_model=64, n_heads=4, attention_chunk=4)
    assert roofline.local_view(spec, 1, 9) == (1, 2)  # position 9 is the second of chunk [8, 12)
    assert roofline.local_view(spec, 6, 2) == (2, 3 + 4 + 1 + 2 + 3 + 4)
    assert roofline.local_view(LLAMA13, 5, 7) == (7, roofline.attention_pairs(5, 7))  # all global: unchanged


def test_a_sliding_layer_reads_at_most_its_window():
    spec = models.get("gemma-2-9b")
    per_layer = memory.kv_bytes_per_token_per_layer(spec)
    short, long = roofline.decode_step(spec, 1, 1000), roofline.decode_step(spec, 1, 20_000)
    assert short.kv_read_bytes == 42 * per_layer * 1000
    assert long.kv_read_bytes == 21 * per_layer * 20_000 + 21 * per_layer * 4095


@pytest.mark.parametrize("model", ["mixtral-8x7b", "gemma-2-9b", "llama-4-scout", "deepseek-v3", "qwen3-30b-a3b"])
@pytest.mark.parametrize("weights", ["W16A16", "W4A16"])
def test_step_model_seconds_is_the_bound_of_its_cost_for_every_kind(model, weights):
    step_model = roofline.StepModel(model, weights, device=H100)
    for sequences, new, cached in [(1, 1, 0), (3, 1, 5000), (64, 1, 9000), (1, 8192, 0), (2, 700, 12_000)]:
        local_cached, local_pairs = roofline.local_view(model, new, cached)
        counts = (sequences * new, sequences * cached, sequences * roofline.attention_pairs(new, cached))
        local = dict(local_cached=sequences * local_cached, local_pairs=sequences * local_pairs)
        step = step_model.cost(sequences, *counts, **local)
        assert step_model.seconds(*counts, **local) == roofline.bound(step, H100).time


@pytest.mark.parametrize("model", ["gemma-2-9b", "llama-4-scout", "mixtral-8x7b", "deepseek-v2-lite"])
@pytest.mark.parametrize(("context", "steps"), [(0, 40), (4080, 40), (8180, 30), (100, 9000)])
def test_decode_time_is_the_sum_of_step_bounds_across_windows_and_chunks(model, context, steps):
    brute = sum(roofline.bound(roofline.decode_step(model, 2, context + j), H100).time for j in range(steps))
    assert roofline.decode_time(model, H100, 2, context, steps) == pytest.approx(brute, rel=1e-9)


@pytest.mark.parametrize(("model", "context", "weights"), [("mixtral-8x7b", 0, "W16A16"),
                                                           ("mixtral-8x7b", 512, "W4A16"),
                                                           ("qwen3-30b-a3b", 0, "W8A8"), ("deepseek-v3", 0, "W4A16")])
def test_moe_crossover_batch_is_the_first_compute_bound_batch(model, context, weights):
    cross = roofline.decode_crossover_batch(model, H100, context, weights)
    bound_at = [roofline.bound(roofline.decode_step(model, b, context, weights), H100).bound
                for b in range(max(1, cross - 40), cross + 1)]
    assert bound_at[-1] == "compute" and "compute" not in bound_at[:-1]
    # a MoE crosses later than a dense model of its active size would: more batch, more experts read
    assert cross > roofline.ridge_point(H100, roofline.scheme(weights).matmul_precision) / 2


def test_a_model_with_local_layers_needs_its_local_counts():
    step_model = roofline.StepModel("mistral-7b", device=H100)
    with pytest.raises(ValueError, match="sliding layers .* pass local_cached and local_pairs"):
        step_model.cost(1, 1, 100, 101)
    with pytest.raises(ValueError, match="local_cached"):
        step_model.seconds(1, 100, 101)
    with pytest.raises(ValueError, match="local_cached must be <= 100"):
        step_model.cost(1, 1, 100, 101, local_cached=200, local_pairs=101)
