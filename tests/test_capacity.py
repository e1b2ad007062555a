"""Capacity planning: the seeds' numbers (L2.3, C9, L4.1-L4.3), properties, the planner widget, bad input."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import memory, models
from servebook.book import scenarios
from servebook.book.widgets import capacity as widget
from servebook.units import GB, GiB

CASE = scenarios.CAPACITY            # C9: Llama-2-13B on an A100 80GB, 4 GiB overhead, users of 4,096 tokens
BUDGET = scenarios.DECIMAL_BUDGET    # 13e9 weights, 16 x 4,096 tokens, 80 GB
LLAMA13 = CASE.spec
PER_USER = CASE.per_user             # 3.125 GiB, from C2
ROUNDED_W16, ROUNDED_W4 = scenarios.ROUNDED_WEIGHTS["fp16"], scenarios.ROUNDED_WEIGHTS["int4"]


def test_the_scenarios_are_the_seeds():
    assert (CASE.gpu_memory, CASE.overhead, CASE.seq_len) == (80 * GiB, 4 * GiB, 4096)
    assert (ROUNDED_W16, ROUNDED_W4) == (26 * GiB, 6.5 * GiB)
    assert (BUDGET.gpu_memory, BUDGET.n_params, BUDGET.batch, BUDGET.seq_len) == (80 * GB, 13 * 10**9, 16, 4096)
    assert BUDGET.kv == 16 * PER_USER


def test_l23_weights_by_precision_and_factor_four():
    weights = [BUDGET.weights(d) for d in ("fp16", "int8", "int4")]
    assert weights == [26 * GB, 13 * GB, 6.5 * GB]
    assert weights[0] / weights[2] == 4


def test_c9_with_the_seeds_units():
    fp16, int4 = CASE.plan(ROUNDED_W16), CASE.plan(ROUNDED_W4)
    assert PER_USER == 3.125 * GiB
    assert (fp16.kv_pool, int4.kv_pool) == (50 * GiB, 69.5 * GiB)
    assert (fp16.requests, int4.requests, int4.requests - fp16.requests) == (16, 22, 6)
    assert fp16.leftover == 0 and int4.leftover == 0.75 * GiB


def test_c9_in_exact_units_gives_the_same_users():
    # The seed's "26 GiB" is 26 GB = 24.2 GiB; the real Llama-2-13B has 13,015,864,320 parameters.
    assert LLAMA13.n_params == 13_015_864_320
    assert round(BUDGET.weights("fp16") / GiB, 1) == 24.2
    for n in (BUDGET.n_params, LLAMA13.n_params):
        for dtype, group, users in (("fp16", None, 16), ("int4", None, 22), ("int4", 128, 22)):
            w = memory.weight_bytes(n, dtype, group_size=group)
            assert CASE.plan(w).requests == users
    # ... but the FP16 pool is no longer exactly full: about 1.8 GiB of slack.
    exact = CASE.plan(BUDGET.weights("fp16"))
    assert round(exact.leftover / GiB, 2) == 1.79


def test_c9_users_by_weight_precision_on_the_a100_as_nvidia_smi_reports_it():
    # The real parameter count, exact bytes, the GPU table's memory: FP16, INT8, INT4 weights.
    assert [CASE.users(d) for d in ("fp16", "int8", "int4")] == [16, 20, 22]
    assert CASE.users("int4", group_size=128) == 22


def test_l41_fits_on_paper_not_in_practice():
    kv, gpu = BUDGET.kv, BUDGET.gpu_memory
    weights = BUDGET.weights("fp16")
    assert round(kv / GB, 2) == 53.69 and round((weights + kv) / GB, 2) == 79.69
    assert weights + kv <= gpu                        # on paper: 0.31 GB to spare
    assert round((gpu - weights - kv) / GB, 2) == 0.31
    plan = memory.capacity_plan(gpu, weights, PER_USER, overhead=CASE.overhead)
    assert plan.requests < BUDGET.batch               # with a realistic overhead, 16 do not fit


def test_l42_l43_int4_headroom_and_five_more():
    kv, gpu = BUDGET.kv, BUDGET.gpu_memory
    weights = BUDGET.weights("int4")
    headroom = gpu - weights - kv
    assert round((weights + kv) / GB, 2) == 60.19 and round(headroom / GB, 2) == 19.81
    more = memory.max_batch(headroom, PER_USER)
    assert headroom / PER_USER == pytest.approx(5.90, abs=0.005)
    assert (more, 16 + more) == (5, 21)
    assert memory.capacity_plan(gpu, weights, PER_USER).requests == 21


def test_a_case_whose_weights_overflow_the_gpu_has_no_plan():
    on_h100 = scenarios.CapacityCase("llama-2-70b", "h100-sxm")
    assert on_h100.plan(on_h100.weights("fp16")) is None and on_h100.users("fp16") is None
    assert on_h100.users("int8") > 0


# --- properties ------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(model=st.sampled_from(["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "llama-3-70b"]),
       gpu_gib=st.integers(8, 200), overhead_mib=st.integers(0, 8192), seq_len=st.integers(1, 32_768),
       kv_dtype=st.sampled_from(["fp16", "fp8", "int4"]), group=st.sampled_from([None, 32, 128]))
def test_more_bits_never_fit_more_users_and_the_count_is_a_floor(model, gpu_gib, overhead_mib, seq_len, kv_dtype,
                                                                 group):
    spec = models.get(model)
    gpu, overhead = gpu_gib * GiB, overhead_mib * 2**20
    per_user = memory.kv_cache_bytes(spec, seq_len=seq_len, dtype=kv_dtype)
    users = []
    for dtype in ("int4", "int8", "fp16", "fp32"):
        w = memory.weight_bytes(spec.n_params, dtype, group_size=group if dtype == "int4" else None)
        if w + overhead > gpu:
            users.append(0)
            continue
        plan = memory.capacity_plan(gpu, w, per_user, overhead=overhead)
        # floor, never round: these users fit, one more does not
        assert plan.requests * per_user <= plan.kv_pool < (plan.requests + 1) * per_user
        users.append(plan.requests)
    assert users == sorted(users, reverse=True)


# --- the planner widget -----------------------------------------------------------------------------


def test_capacity_text_reproduces_c9_with_real_units():
    text = widget.capacity_text(CASE.model, CASE.gpu, weights="fp16", overhead=CASE.overhead // GiB,
                                seq_len=CASE.seq_len)
    assert text == widget.capacity_text()  # the planner opens on the chapter's case
    assert "-> 16 requests of 3.125 GiB" in text
    assert "by precision fp16 16 | int8 20 | int4 22 users" in text
    assert "80GB HBM2e on the datasheet" in text


def test_capacity_text_in_decimal_units_on_a_custom_gpu():
    text = widget.capacity_text(CASE.model, "custom", weights="int4", overhead=0, seq_len=CASE.seq_len, unit="GB",
                                gpu_memory=80)
    assert "custom GPU: 80,000,000,000 bytes" in text and "requests of 3.355 GB" in text


def test_capacity_text_says_when_weights_do_not_fit():
    text = widget.capacity_text("llama-2-70b", "a100-80gb-sxm", weights="fp16")
    assert "does NOT fit" in text and "fp16 no fit" in text


def test_the_widget_builds():
    planner = widget.capacity_planner()
    assert "16 requests" in planner.children[-1].value


def test_capacity_text_names_models_and_gpus_by_display_name_and_says_what_moe_holds():
    text = widget.capacity_text("mixtral-8x7b", "h200")
    assert text.startswith("GPU          H200 SXM (141GB HBM3e on the datasheet)")
    assert "weights      Mixtral-8x7B, 46,702,792,704 parameters in fp16: 86.991 GiB" in text
    assert "all 8 experts are held; 12,879,925,248 parameters are active per token" in text
    assert "experts" not in widget.capacity_text()


def test_capacity_text_counts_a_window_only_for_its_layers():
    text = widget.capacity_text("gemma-3-27b", "h200", seq_len=131_072)
    assert "10.406 GiB (52 of 62 layers sliding, at most 1,024 tokens each)" in text
    assert "-> 8 requests of 10.406 GiB" in text


def test_the_planners_menus_show_display_names():
    boxes = widget.capacity_planner().controls
    model_box, gpu_box = boxes["model"], boxes["gpu"]
    assert dict(model_box.options)["Llama-2-13B"] == "llama-2-13b"
    assert dict(gpu_box.options)["A100 80GB SXM"] == "a100-80gb-sxm" and gpu_box.value == "a100-80gb-sxm"


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: memory.capacity_plan(80 * GiB, 20 * GiB, GiB, overhead=90 * GiB), ValueError, "exceed the GPU"),
    (lambda: memory.max_batch(-1, GiB), ValueError, "budget must be >= 0"),
    (lambda: memory.capacity_plan(-80 * GiB, 20 * GiB, GiB), ValueError, "gpu must be > 0"),
    (lambda: widget.capacity_text(overhead=80), ValueError, "overhead .* must be smaller than the GPU"),
    (lambda: widget.capacity_text(overhead=-1), ValueError, "overhead must be a finite number"),
    (lambda: widget.capacity_text(gpu="a100"), ValueError, "known GPUs: a100-80gb-sxm"),
    (lambda: widget.capacity_text(gpu="custom"), ValueError, "needs gpu_memory"),
    (lambda: widget.capacity_text(unit="MB"), ValueError, "unit must be one of 'GiB', 'GB'"),
    (lambda: widget.capacity_text(seq_len=0), ValueError, "seq_len must be >= 1"),
    (lambda: widget.capacity_text(weights="int3"), ValueError, "unknown dtype"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_capacity_figures_name_models_and_gpus_by_display_name():
    from servebook.book.figures import capacity as figures

    assert figures.users_that_fit().axes[0].get_title().startswith("Llama-2-13B on A100 80GB SXM (80 GiB)")
    titles = [ax.get_title(loc="left") for ax in figures.lever_gains().axes]
    assert "(Llama-2-13B on A100 80GB SXM)" in titles[0] and "(Llama-3-70B on H200 SXM)" in titles[1]
