"""The chapter-08 decision helper: L5.1 scenarios A and B, properties of the on-paper server, bad input."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import advisor, gpus, paging, roofline
from servebook.advisor import Workload
from servebook.book import scenarios
from servebook.models import ModelSpec
from servebook.units import GiB

A = scenarios.LEVER_SCENARIOS["A"]
B = scenarios.LEVER_SCENARIOS["B"]


@pytest.fixture(scope="module")
def advice_a():
    return A.advise()


@pytest.fixture(scope="module")
def advice_b():
    return B.advise()


def test_scenarios_match_the_seed():
    assert A.workload.tokens == 60 and A.workload.max_len == 2048 and A.workload.block_size == 16
    assert B.workload.prompt_len > 1000 and B.workload.goal == "throughput"


def test_l51_a_kv_waste_and_paged_attention(advice_a):
    assert advice_a.dominant.startswith("memory capacity: the KV cache")
    waste = advice_a.numbers["reservation_waste"]
    assert waste == paging.naive_waste(60, 2048) / 2048 and round(waste, 2) == 0.97  # the seed's 97 %
    assert advice_a.numbers["weights_share"] < 0.5
    assert [r.lever for r in advice_a.ranking][0] == "PagedAttention"
    assert advice_a.ranking[-1].lever == "continuous batching" and advice_a.ranking[-1].throughput_gain == 1
    paged = advice_a.lever("PagedAttention")
    assert paged.served.reserved_per_request * 2048 == advice_a.baseline.reserved_per_request * 64  # 4 blocks
    assert paged.served.fits >= A.workload.batch > advice_a.baseline.fits
    assert paged.throughput_gain > max(r.throughput_gain for r in advice_a.ranking[1:])


def test_l51_b_weights_then_compute_bound_prefill_and_w8a8(advice_b):
    assert advice_b.dominant.startswith("memory capacity: the weights")
    n = advice_b.numbers
    assert n["weights_share"] > 0.9 and advice_b.baseline.fits < B.workload.batch
    assert n["prefill_share"] > 0.5 and n["prefill_intensity"] > n["prefill_ridge"]  # the seed's diagnosis
    assert [r.lever for r in advice_b.ranking][:2] == ["W8A8", "W4A16"]
    w8, w4, base = advice_b.lever("W8A8").served, advice_b.lever("W4A16").served, advice_b.baseline
    # W4A16 fits more but makes each compute-bound prefill slower; W8A8 makes it faster.
    assert w4.fits > w8.fits >= B.workload.batch
    assert w4.prefill_s / w4.wave > base.prefill_s / base.wave > w8.prefill_s / w8.wave


def test_the_goal_can_change_the_answer():
    # Without vLLM's cap of 256 running requests, paging would run all 1,000 sessions in one
    # compute-bound wave, and smaller waves finish some sessions sooner.
    uncapped = advisor.advise(A.model, A.gpu, replace(A.workload, goal="latency", max_num_seqs=1024))
    assert uncapped.best.lever != "PagedAttention"
    assert uncapped.rows()[0]["lever"] == "baseline" and "x latency" in uncapped.rows()[0]
    capped = advisor.advise(A.model, A.gpu, replace(A.workload, goal="latency"))
    assert capped.best.lever == "PagedAttention" and capped.best.served.wave == 256


def test_the_advisor_uses_vllms_caps_and_reports_latency(advice_a, advice_b):
    assert advisor.caps(gpus.get(A.gpu), A.workload) == (256, 2048)      # an A100
    assert advisor.caps(gpus.get(B.gpu), B.workload) == (1024, 8192)     # an H200
    paged = advice_a.lever("PagedAttention").served
    assert paged.fits > 1000 and paged.wave == 256                          # the cap binds, not memory
    for served in (advice_a.baseline, paged, advice_b.baseline):
        assert 0 < served.ttft_s < served.mean_latency_s and served.tpot_s > 0


def test_continuous_batching_needs_unequal_outputs():
    flat = advisor.advise(A.model, A.gpu, A.workload).lever("continuous batching")
    spread = advisor.advise(A.model, A.gpu, replace(A.workload, output_len_max=300))
    assert flat.throughput_gain == 1 and "same length" in flat.note
    assert spread.best.lever == "continuous batching"
    assert spread.lever("continuous batching").throughput_gain > 5


def test_levers_already_on_buy_nothing():
    on = replace(A.workload, max_len=None, batching="continuous", weights="W8A8")
    advice = advisor.advise(A.model, A.gpu, on)
    for lever, note in (("PagedAttention", "already paged"), ("continuous batching", "already continuous"),
                        ("W8A8", "already W8A8")):
        result = advice.lever(lever)
        assert result.note == note and result.throughput_gain == 1


def test_weights_that_do_not_fit_serve_nothing():
    advice = advisor.advise("llama-2-70b", "a100-80gb-sxm", Workload(100, 100, batch=8, max_len=4096))
    assert advice.baseline.fits == 0 and advice.baseline.throughput == 0
    assert advice.best.lever in ("W4A16", "W8A8") and advice.best.served.fits > 0
    assert advice.ranking[-1].served.fits == 0


def test_one_wave_is_one_prefill_plus_its_decode_steps():
    w = Workload(prompt_len=512, output_len=64, batch=4, max_len=1024)
    served = advisor.advise("llama-3-8b", "h100-sxm", w).baseline
    assert served.wave == 4 and served.fits >= 4
    prefill = roofline.bound(roofline.prefill_step("llama-3-8b", 4, 512), "h100-sxm").time
    decode = roofline.decode_time("llama-3-8b", "h100-sxm", 4, 512, 63)
    assert served.makespan_s == pytest.approx(prefill + decode)
    assert served.throughput == pytest.approx(4 * 64 / (prefill + decode))


def test_table_lists_the_baseline_and_four_levers(advice_a):
    text = advice_a.table()
    lines = text.splitlines()
    assert len(lines) == 2 + 5 and lines[2].split()[0] == "baseline"
    assert all(name in text for name in advisor.LEVERS)
    assert "Dominant wall" in str(advice_a)


# --- properties -------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b"]),
       gpu=st.sampled_from(["a100-80gb-sxm", "h100-sxm", "h200", "l4"]),
       prompt=st.integers(1, 4000), output=st.integers(1, 500), batch=st.one_of(st.none(), st.integers(1, 512)),
       extra=st.integers(0, 4096))
def test_levers_never_fit_fewer_requests(model, gpu, prompt, output, batch, extra):
    # A reservation of at least the paged size (a tight max_len can beat paging's last part-filled block).
    max_len = paging.paged_slots(prompt + output, 16) + extra
    w = Workload(prompt_len=prompt, output_len=output, batch=batch, max_len=max_len, overhead=2 * GiB)
    advice = advisor.advise(model, gpu, w)
    base = advice.baseline.fits
    fits = {r.lever: r.served.fits for r in advice.ranking}
    assert fits["PagedAttention"] >= base and fits["continuous batching"] == base
    assert fits["W4A16"] >= fits["W8A8"] >= base
    for r in advice.ranking:
        assert r.served.throughput >= 0 and r.throughput_gain >= 0
        if r.served.fits:
            assert r.served.fits * r.served.reserved_per_request <= r.served.kv_pool


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: Workload(prompt_len=0, output_len=10), ValueError, "prompt_len must be >= 1"),
    (lambda: Workload(prompt_len=10, output_len=0), ValueError, "output_len must be >= 1"),
    (lambda: Workload(10, 10, batch=0), ValueError, "batch must be >= 1"),
    (lambda: Workload(10, 10, max_len=15), ValueError, "max_len .* shorter than a request"),
    (lambda: Workload(10, 10, output_len_max=5), ValueError, "output_len_max must be >= 10"),
    (lambda: Workload(10, 10, goal="cost"), ValueError, "goal must be one of 'throughput', 'latency'"),
    (lambda: Workload(10, 10, batching="dynamic"), ValueError, "batching must be one of"),
    (lambda: Workload(10, 10, weights="W3A16"), ValueError, "known schemes"),
    (lambda: Workload(10, 10, kv_dtype="int2"), ValueError, "unknown dtype"),
    (lambda: Workload(10, 10, overhead=-1), ValueError, "overhead must be >= 0 bytes"),
    (lambda: Workload(10, 10, overhead="4GiB"), TypeError, "overhead must be a number of bytes"),
    (lambda: advisor.advise("llama-2-13b", "a100-80gb-sxm", Workload(10, 10, overhead=81 * GiB)), ValueError,
     "overhead .* is not smaller than the GPU's memory"),
    (lambda: advisor.advise("llama-2-13b", "a100-40gb", Workload(10, 10)), ValueError,
     "known GPUs: a100-80gb-sxm, a100-40gb-sxm, h100-sxm, h200, l4, t4"),
    (lambda: advisor.advise("llama-2-13b", "h100-sxm", {"prompt_len": 10}), TypeError, "workload must be a Workload"),
    (lambda: advisor.advise("llama-2-13b", "h100-sxm", Workload(10, 10)).lever("LoRA"), ValueError, "unknown lever"),
    (lambda: advisor.advise(ModelSpec("shape only", n_layers=2, d_model=64, n_heads=4), "t4", Workload(10, 10)),
     ValueError, "needs the model's parameter count"),
    (lambda: advisor.advise(13e9, "t4", Workload(10, 10)), TypeError, "model must be a ModelSpec"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
