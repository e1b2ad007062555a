"""The batching simulator: conservation of tokens, the two policies' rules, preemption, traces, errors.

Run as a script (``python tests/test_batching.py``) it re-records the golden
per-iteration records of a few seeded runs; do that only when the scheduler's
behaviour changes on purpose, and say why in the commit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from servebook import batching, models, roofline
from servebook.batching import Request, sample_trace, simulate
from servebook.batching.simulator import _Server
from servebook.paging import PagedAllocator

TRACE = sample_trace(120, seed=1, prompt_mean=40, output_mean=80, max_len=256)
SLOTS = 2048


@pytest.fixture(scope="module")
def runs():
    return {(policy, allocator): simulate(TRACE, kv_slots=SLOTS, policy=policy, allocator=allocator, max_len=256)
            for policy in ("static", "continuous") for allocator in ("naive", "paged")}


def test_sample_trace_is_seeded_and_respects_max_len():
    again = sample_trace(120, seed=1, prompt_mean=40, output_mean=80, max_len=256)
    assert again == TRACE
    assert sample_trace(120, seed=2, prompt_mean=40, output_mean=80, max_len=256) != TRACE
    assert all(r.prompt_len >= 1 and r.output_len >= 1 and r.total_len <= 256 for r in TRACE)
    assert all(r.arrival_s == 0.0 for r in TRACE)


def test_sample_trace_means_and_arrivals():
    trace = sample_trace(4000, seed=0, prompt_mean=100, output_mean=300, max_len=100_000, arrival_rate=5.0)
    prompts = np.array([r.prompt_len for r in trace])
    outputs = np.array([r.output_len for r in trace])
    assert abs(prompts.mean() / 100 - 1) < 0.1 and abs(outputs.mean() / 300 - 1) < 0.1
    arrivals = np.array([r.arrival_s for r in trace])
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    assert abs(len(trace) / arrivals[-1] / 5.0 - 1) < 0.1


@pytest.mark.parametrize("key", [("static", "naive"), ("static", "paged"), ("continuous", "naive"),
                                 ("continuous", "paged")])
def test_every_request_finishes_and_every_token_is_generated_once(runs, key):
    result = runs[key]
    r, s = result.requests, result.steps
    assert np.all(np.isfinite(r["finish_s"]))
    assert np.all(r["arrival_s"] <= r["first_token_s"]) and np.all(r["first_token_s"] <= r["finish_s"])
    # Each running request emits one token per iteration, so the running counts add up to the outputs.
    assert s["running"].sum() == r["output_len"].sum()
    assert np.all(s["tokens_stored"] <= s["slots_reserved"])
    assert np.all(s["slots_reserved"] <= result.slots_total)


def test_static_batching_admits_only_into_an_empty_server(runs):
    for allocator in ("naive", "paged"):
        s = runs["static", allocator].steps
        for k in np.flatnonzero(s["admitted"])[1:]:
            assert s["running"][k - 1] == s["finished"][k - 1]


def test_naive_never_preempts_and_runs_at_most_one_request_per_region(runs):
    for policy in ("static", "continuous"):
        result = runs[policy, "naive"]
        assert result.summary().preemptions == 0
        assert result.steps["running"].max() <= SLOTS // 256


def test_paging_and_continuous_batching_each_help(runs):
    summary = {key: run.summary() for key, run in runs.items()}
    for policy in ("static", "continuous"):
        assert summary[policy, "paged"].kv_token_share > 0.9 > summary[policy, "naive"].kv_token_share
        assert summary[policy, "paged"].mean_running > summary[policy, "naive"].mean_running
    for allocator in ("naive", "paged"):
        assert summary["continuous", allocator].iterations < summary["static", allocator].iterations


def test_preemption_by_recomputation_in_a_tight_pool():
    trace = [Request(i, 0.0, 10, 30) for i in range(6)]
    result = simulate(trace, kv_slots=64, block_size=4, max_len=64, watermark=0.0)
    summary = result.summary()
    assert summary.preemptions > 0
    assert summary.recomputed_tokens > 0
    assert np.all(np.isfinite(result.requests["finish_s"]))
    assert result.steps["running"].sum() == 6 * 30


def test_time_is_in_iterations_without_a_cost_model(runs):
    result = runs["continuous", "paged"]
    assert np.all(result.steps["dt"] == 1.0)
    assert result.summary().makespan_s == len(result.steps["dt"])


def test_each_iteration_takes_the_step_models_time():
    """Every iteration's dt is the roofline bound of the step its counts describe: one step model."""
    spec = models.get("llama-2-13b")
    cost = roofline.StepModel(spec, device="a100-40gb-sxm")
    result = simulate(TRACE, kv_slots=SLOTS, max_len=256, cost=cost)
    s = result.steps
    tokens = s["prefill_tokens"] + s["decode_tokens"]
    assert np.all(s["dt"] >= cost.weight_bytes / cost.gpu.bandwidth)  # every step reads the weights once
    # A decode-only step of B sequences that hold C tokens in all is the roofline's decode step.
    decode_only = np.flatnonzero((s["prefill_tokens"] == 0) & (s["decode_tokens"] > 0))
    assert decode_only.size
    for i in decode_only[:20]:
        b, stored = int(s["decode_tokens"][i]), int(s["tokens_stored"][i])
        pairs = stored  # each decode token attends to its cached tokens and to itself
        step = cost.cost(b, b, stored - b, pairs)
        assert s["dt"][i] == roofline.bound(step, cost.gpu).time
    assert int(tokens.sum()) >= sum(r.total_len - 1 for r in TRACE)


def test_a_model_with_local_layers_is_timed_while_every_request_fits_its_window():
    """Mistral-7B's window (4,096) holds every request of max_len 256: its sliding layers read and attend
    what its global ones would, so each step is the bound with local counts equal to the global ones.
    Gemma-3-27B's window (1,024) is shorter than a context of 2,048: the simulator refuses, naming max_len."""
    cost = roofline.StepModel("mistral-7b", device="h100-sxm")
    result = simulate(TRACE, kv_slots=SLOTS, max_len=256, cost=cost)
    s = result.steps
    decode_only = np.flatnonzero((s["prefill_tokens"] == 0) & (s["decode_tokens"] > 0))
    assert decode_only.size
    for i in decode_only[:20]:
        b, stored = int(s["decode_tokens"][i]), int(s["tokens_stored"][i])
        step = cost.cost(b, b, stored - b, stored, local_cached=stored - b, local_pairs=stored)
        assert s["dt"][i] == roofline.bound(step, cost.gpu).time
    with pytest.raises(ValueError, match=r"max_len \(2048\) exceeds the 1024-token span of gemma-3-27b"):
        simulate(TRACE, kv_slots=SLOTS, max_len=2048, cost=roofline.StepModel("gemma-3-27b", device="h100-sxm"))


def test_the_cost_must_be_a_step_model_with_a_gpu():
    with pytest.raises(TypeError, match="StepModel built with a device"):
        simulate(TRACE, kv_slots=SLOTS, max_len=256, cost=roofline.StepModel("llama-2-13b"))


def test_prefix_caching_saves_prefill():
    trace = sample_trace(60, seed=3, prompt_mean=20, output_mean=20, max_len=512, shared_prefix_len=64)
    cold = simulate(trace, kv_slots=4096, max_len=512)
    warm = simulate(trace, kv_slots=4096, max_len=512, prefix_caching=True)
    assert not cold.steps["preempted"].any() and not warm.steps["preempted"].any()
    # Every prompt token is either computed or served from the cache, never both.
    assert warm.steps["cached_tokens"].sum() > 0
    assert warm.steps["prefill_tokens"].sum() + warm.steps["cached_tokens"].sum() == cold.steps["prefill_tokens"].sum()
    # Without a token budget no prompt is split into chunks: one step per output token, cached or not.
    whole = dict(kv_slots=4096, max_len=512, max_num_batched_tokens=None)
    assert simulate(trace, **whole).steps["running"].sum() == trace_tokens(trace)
    assert simulate(trace, prefix_caching=True, **whole).steps["running"].sum() == trace_tokens(trace)


def trace_tokens(trace) -> int:
    return sum(r.output_len for r in trace)


def test_poisson_arrivals_idle_until_the_next_request():
    trace = [Request(0, 0.0, 4, 2), Request(1, 100.0, 4, 2)]
    result = simulate(trace, kv_slots=64, block_size=4, max_len=16)
    assert result.requests["finish_s"].tolist() == [2.0, 102.0]


def test_trace_file_round_trip(tmp_path):
    trace = sample_trace(20, seed=4, arrival_rate=8.0, shared_prefix_len=8, n_prefix_groups=3)
    path = batching.save_trace(trace, tmp_path / "trace.csv")
    assert batching.load_trace(path) == trace


def test_trace_file_errors(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("arrival_s,prompt_len\n0,5\n")
    with pytest.raises(ValueError, match="output_len"):
        batching.load_trace(path)
    path.write_text("arrival_s,prompt_len,output_len\n0,5,0\n")
    with pytest.raises(ValueError, match="row 1"):
        batching.load_trace(path)


@pytest.mark.parametrize("kwargs, error", [
    (dict(policy="dynamic"), ValueError),
    (dict(allocator="buddy"), ValueError),
    (dict(kv_slots=0), ValueError),
    (dict(kv_slots=8, block_size=16), ValueError),
    (dict(max_len=16), ValueError),          # requests longer than max_len
    (dict(watermark=1.5), ValueError),
    (dict(block_size=2.0), TypeError),
])
def test_simulate_rejects_bad_arguments(kwargs, error):
    args = dict(kv_slots=SLOTS, max_len=256) | kwargs
    with pytest.raises(error):
        simulate(TRACE, **args)


def test_simulate_rejects_bad_traces():
    with pytest.raises(ValueError, match="empty"):
        simulate([], kv_slots=64)
    with pytest.raises(ValueError, match="unique"):
        simulate([Request(0, 0.0, 1, 1), Request(0, 0.0, 1, 1)], kv_slots=64)
    with pytest.raises(TypeError, match="Request"):
        simulate([(0, 0.0, 1, 1)], kv_slots=64)
    with pytest.raises(ValueError, match="never fit"):
        simulate([Request(0, 0.0, 100, 10)], kv_slots=64, block_size=16, max_len=2048)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(prompt_len=0), ValueError, "prompt_len"), (dict(output_len=0), ValueError, "output_len"),
    (dict(arrival_s=-1.0), ValueError, "arrival_s"), (dict(arrival_s=math.nan), ValueError, "arrival_s"),
    (dict(prefix_group=0, prefix_len=9), ValueError, "exceeds prompt_len"),
    (dict(prefix_len=3), ValueError, "needs a prefix_group"),          # a prefix shared with nobody
    (dict(prefix_group=-2), ValueError, "prefix_group must be >= -1"),
    (dict(prefix_group=1.5), TypeError, "prefix_group must be a whole number"),
    (dict(prefix_group=2**38), ValueError, "prefix_group must be <="),  # its ids would pass 2**63
    (dict(prompt_len=2**24, output_len=1), ValueError, "at most 2\\*\\*24"),  # ids would reach the next request's
])
def test_request_rejects_bad_fields(kwargs, error, match):
    fields = dict(request_id=0, arrival_s=0.0, prompt_len=8, output_len=8) | kwargs
    with pytest.raises(error, match=match):
        Request(**fields)


def test_lognormal_lengths_are_seeded_and_have_the_asked_mean():
    lengths = batching.lognormal_lengths(20_000, mean=300, sigma=1.0, seed=0)
    assert np.array_equal(lengths, batching.lognormal_lengths(20_000, mean=300, sigma=1.0, seed=0))
    assert lengths.min() >= 1 and abs(lengths.mean() / 300 - 1) < 0.05
    with pytest.raises(ValueError, match="mean"):
        batching.lognormal_lengths(10, mean=0)
    with pytest.raises(ValueError, match="n"):
        batching.lognormal_lengths(0, mean=10)


def test_kv_shares_agree_with_the_summary_and_drop_the_drain(runs):
    for result in runs.values():
        s = result.summary()
        assert result.kv_shares() == (s.kv_token_share, s.kv_reserved_share, s.kv_pool_token_share)
        assert math.isclose(s.kv_pool_token_share, s.kv_token_share * s.kv_reserved_share)
    # The paged continuous run keeps its pool fuller while requests queue than over the whole run.
    assert runs["continuous", "paged"].kv_shares(while_queued=True)[2] > runs["continuous", "paged"].kv_shares()[2]
    idle = simulate(TRACE[:1], kv_slots=SLOTS, max_len=256)
    with pytest.raises(ValueError, match="waiting"):
        idle.kv_shares(while_queued=True)


# ---------------------------------------------------------------------------
# The phases of an iteration

@pytest.mark.parametrize("lazy", [False, True], ids=["every request every step", "decode cohort"])
def test_the_phases_of_a_step_do_what_their_names_say(lazy):
    trace = [Request(0, 0.0, 6, 4), Request(1, 0.0, 6, 4), Request(2, 9.0, 2, 1)]
    kv = PagedAllocator(num_blocks=4, block_size=4)
    server = _Server(trace, kv, static=False, max_num_seqs=8, budget=64, chunked=True, reserve_blocks=0,
                     seconds=lambda *counts: 1.0, lazy=lazy)

    def one_step():
        preempted, admitted, _, _ = server.schedule()
        ran = server.step()
        server.finish()
        return admitted, preempted, ran

    assert server.arrive()                      # 0 and 1 are queued at time 0
    admitted, preempted, (dt, prefill, decode, finished) = one_step()
    assert (admitted, preempted) == (2, 0) and kv.pool.num_available == 0  # two blocks each fill the pool
    assert (dt, prefill, decode, finished) == (1.0, 12, 0, 0)
    for _ in range(2):                          # the KV of tokens 7 and 8 fills each one's second block
        assert server.arrive() and one_step()[1] == 0
    assert server.arrive()
    admitted, preempted, (_, _, decode, finished) = one_step()
    # 0 needs a third block: 1, the last running, is preempted; 0 emits its last token
    assert (admitted, preempted, decode, finished) == (0, 1, 1, 1)
    assert [live.req.request_id for live in server.waiting] == [1]
    assert server.arrive()
    admitted, preempted, (_, prefill, _, finished) = one_step()
    # 1 comes back, recomputes its prompt and the 3 tokens it had generated, and emits its 4th
    assert (admitted, preempted, prefill, finished) == (1, 0, 9, 1)
    assert not server.arrive() and server.clock == 9.0  # idle: the clock moves to the next arrival
    while server.busy:
        if server.arrive():
            one_step()
    # simulate is that loop over the phases
    records = simulate(trace, kv_slots=16, block_size=4, max_len=16, max_num_batched_tokens=64).requests
    assert records["preemptions"].tolist() == [0, 1, 0] and records["recomputed_tokens"].tolist() == [0, 9, 0]
    assert records["finish_s"].tolist() == [server.lives[i].finish_s for i in range(3)]


# ---------------------------------------------------------------------------
# Golden records: every per-step and per-request record of seeded runs,
# recorded once; restructuring the simulator must reproduce them exactly.
# (Re-recorded when the loop took vLLM V1's order: running first, admission only
# in a step without preemption, a token budget.)

GOLDEN = Path(__file__).parent / "data" / "batching-golden.json"


def golden_cases() -> dict[str, tuple[list[Request], dict]]:
    """Small runs that between them take every branch of the scheduler.

    Preemptions in tight paged pools, a static batch whose unfinished members
    were all preempted ("static-paged"), idle gaps between Poisson arrivals,
    prefix-cache hits, a watermark, the step model's seconds, the sequence cap
    ("continuous-naive"), and prompts split into chunks by a small token budget.
    """
    cost = roofline.StepModel("llama-2-13b", device="a100-40gb-sxm")
    online = sample_trace(20, seed=5, prompt_mean=24, output_mean=30, max_len=128, arrival_rate=8.0,
                          shared_prefix_len=16, n_prefix_groups=2)
    offline = sample_trace(24, seed=5, prompt_mean=20, output_mean=30, max_len=96)
    return {
        "continuous-paged-online": (online, dict(kv_slots=160, block_size=8, max_len=128, watermark=0.05,
                                                 prefix_caching=True, cost=cost)),
        "continuous-paged": (offline, dict(kv_slots=192, block_size=8, max_len=96, watermark=0.0)),
        "static-paged": (offline, dict(kv_slots=160, policy="static", block_size=8, max_len=96, watermark=0.0)),
        "continuous-naive": (offline, dict(kv_slots=400, allocator="naive", max_len=96, max_num_seqs=3)),
        "static-naive": (online, dict(kv_slots=600, policy="static", allocator="naive", max_len=128)),
        "continuous-paged-chunked": (online, dict(kv_slots=160, block_size=8, max_len=128, prefix_caching=True,
                                                  max_num_batched_tokens=24, max_num_seqs=4)),
    }


def golden_records() -> dict[str, dict[str, dict[str, list]]]:
    records = {}
    for name, (trace, kwargs) in golden_cases().items():
        result = simulate(trace, **kwargs)
        records[name] = {table: {field: values.tolist() for field, values in getattr(result, table).items()}
                         for table in ("steps", "requests")}
    return records


def _golden_text(records: dict) -> str:
    """JSON with one line per record field, so that a re-recording shows as a readable diff."""
    cases = []
    for name, tables in records.items():
        parts = []
        for table, fields in tables.items():
            lines = ",\n".join(f"      {json.dumps(field)}: {json.dumps(values)}" for field, values in fields.items())
            parts.append(f"    {json.dumps(table)}: {{\n{lines}\n    }}")
        cases.append(f"  {json.dumps(name)}: {{\n" + ",\n".join(parts) + "\n  }")
    return "{\n" + ",\n".join(cases) + "\n}\n"


def test_simulate_reproduces_the_golden_records():
    recorded = json.loads(GOLDEN.read_text())
    fresh = golden_records()
    assert list(fresh) == list(recorded)
    for name, tables in recorded.items():
        for table, fields in tables.items():
            assert list(fresh[name][table]) == list(fields), (name, table)
            for field, values in fields.items():
                assert fresh[name][table][field] == values, (name, table, field)
                # ints stay ints and seconds stay floats
                assert [type(v) for v in fresh[name][table][field]] == [type(v) for v in values], (name, field)


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(_golden_text(golden_records()))
    print(f"wrote {GOLDEN}")
