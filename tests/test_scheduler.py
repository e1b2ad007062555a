"""The scheduler's V1 loop: order of the phases, token budget, chunked prefill, latency records, bad input.

The long seeded run at the end drives the simulator's phases over 10^5
allocator operations in tight pools with shared prefixes and checks, step by
step, that no block is served from the prefix cache unless the step that
computes it has run or is the current one, beside the pool's invariants.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from servebook import batching, roofline
from servebook.batching import SLO, Request, sample_trace, simulate
from servebook.batching.simulator import _Server
from servebook.paging import BlockPool, PagedAllocator


def test_the_reproducer_prefills_the_same_tokens_with_and_without_prefix_caching():
    trace = [Request(0, 0.0, 4, 3), Request(1, 1.0, 12, 2)]
    runs = {caching: simulate(trace, kv_slots=16, block_size=4, max_len=32, prefix_caching=caching, watermark=0.0)
            for caching in (True, False)}
    assert runs[True].steps["prefill_tokens"].tolist() == runs[False].steps["prefill_tokens"].tolist()
    assert runs[True].steps["prefill_tokens"].tolist() == [4, 0, 0, 12, 0]
    assert runs[True].steps["cached_tokens"].sum() == 0


def test_running_requests_are_scheduled_before_admissions_and_a_preempting_step_admits_nobody():
    # Two requests fill a 4-block pool; the third waits.  When 0 needs a block, 1 (the last running)
    # is preempted, and in that step the waiting request is not admitted although a block is free.
    trace = [Request(0, 0.0, 8, 6), Request(1, 0.0, 7, 6), Request(2, 0.0, 1, 1)]
    result = simulate(trace, kv_slots=16, block_size=4, max_len=16, max_num_batched_tokens=64)
    s = result.steps
    step = int(np.flatnonzero(s["preempted"])[0])
    assert s["admitted"][step] == 0 and s["blocks_free"][step] > 0
    assert result.requests["preemptions"].tolist() == [0, 1, 0]


def test_the_token_budget_chunks_a_long_prompt_and_first_token_waits_for_its_last_chunk():
    trace = [Request(0, 0.0, 100, 3)]
    result = simulate(trace, kv_slots=256, block_size=16, max_len=128, max_num_batched_tokens=32)
    assert result.steps["prefill_tokens"].tolist() == [32, 32, 32, 4, 0, 0]
    assert result.requests["first_token_s"].tolist() == [4.0]
    assert result.requests["scheduled_s"].tolist() == [0.0]
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        simulate(trace, kv_slots=256, max_len=128, max_num_batched_tokens=32, chunked_prefill=False)


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room_for_all_of_it():
    trace = [Request(0, 0.0, 10, 4), Request(1, 0.0, 120, 1)]
    result = simulate(trace, kv_slots=512, max_len=128, max_num_batched_tokens=128, chunked_prefill=False)
    # 1 does not fit the 127 tokens left beside 0's prompt: it waits for the next step, whole.
    assert result.steps["prefill_tokens"].tolist()[:2] == [10, 120]


def test_the_sequence_cap_holds():
    trace = sample_trace(40, seed=2, prompt_mean=10, output_mean=20, max_len=128)
    result = simulate(trace, kv_slots=4096, max_len=128, max_num_seqs=5)
    assert result.steps["in_flight"].max() == 5 and result.steps["running"].max() == 5


def test_per_token_times_give_ttft_tpot_and_end_to_end_latency():
    cost = roofline.StepModel("llama-2-13b", device="a100-40gb-sxm")
    trace = sample_trace(60, seed=7, prompt_mean=200, output_mean=40, max_len=512, arrival_rate=20.0)
    result = simulate(trace, kv_slots=8192, max_len=512, max_num_batched_tokens=256, cost=cost)
    lat = batching.request_latencies(result)
    r = result.requests
    for i in range(len(trace)):
        times = result.token_times(i)
        assert len(times) == r["output_len"][i] and np.all(np.diff(times) > 0)
        assert times[0] == r["first_token_s"][i] and times[-1] == r["finish_s"][i]
    n = r["output_len"]
    many = n > 1
    assert np.allclose(lat["ttft_s"][many] + (n[many] - 1) * lat["tpot_s"][many], lat["e2e_s"][many])
    assert np.all(lat["queue_s"] >= 0) and np.all(lat["ttft_s"] > lat["queue_s"])
    itl = batching.inter_token_latencies(result)
    assert itl.size == int((n - 1).sum()) and np.all(itl > 0)
    # Every inter-token gap is at least one step, so at least the weight read.
    assert itl.min() >= cost.weight_bytes / cost.gpu.bandwidth
    summary = result.summary()  # its percentiles are the latency module's, of the same latencies
    assert summary.ttft_p50_s == batching.percentiles(lat["ttft_s"])[50]
    assert summary.tpot_p99_s == batching.percentiles(lat["tpot_s"])[99]
    assert summary.latency_p90_s == batching.percentiles(lat["e2e_s"])[90]


def test_one_token_answers_have_no_tpot():
    trace = [Request(i, 0.1 * i, 8, 1) for i in range(4)]
    result = simulate(trace, kv_slots=256, max_len=64)
    summary = result.summary()
    assert math.isnan(summary.tpot_p50_s) and math.isnan(summary.tpot_p99_s) and summary.ttft_p50_s > 0
    with pytest.raises(ValueError, match="no number"):
        batching.percentiles(batching.request_latencies(result)["tpot_s"])
    assert batching.percentiles([float("nan")], (50,), empty=-1.0) == {50: -1.0}
    for bad, error, match in (((50, 101), ValueError, r"qs\[1\]"), (50, TypeError, "qs must be"),
                              ((), TypeError, "qs must be"), (("50",), TypeError, r"qs\[0\]")):
        with pytest.raises(error, match=match):
            batching.percentiles([1.0, 2.0], bad)
    with pytest.raises(TypeError, match="empty must be"):
        batching.percentiles([1.0], empty="nan")


def test_goodput_counts_the_requests_that_meet_the_slo():
    trace = sample_trace(50, seed=1, prompt_mean=50, output_mean=30, max_len=256, arrival_rate=2.0)
    result = simulate(trace, kv_slots=4096, max_len=256)
    lat = batching.request_latencies(result)
    loose = SLO(ttft_s=1e9, tpot_s=1e9)
    span = result.requests["finish_s"].max() - result.requests["arrival_s"].min()
    assert batching.goodput(result, loose) == pytest.approx(len(trace) / span)
    strict = SLO(ttft_s=float(np.median(lat["ttft_s"])), tpot_s=1e9)
    assert batching.meets(result, strict).sum() == (lat["ttft_s"] <= strict.ttft_s).sum()
    assert batching.attainment(result, loose) == 1.0
    assert batching.attainment(result, strict) == (lat["ttft_s"] <= strict.ttft_s).sum() / len(trace)
    with pytest.raises(ValueError, match="ttft_s"):
        SLO(ttft_s=0, tpot_s=1)


def test_littles_law_holds_on_a_run():
    trace = sample_trace(200, seed=4, prompt_mean=40, output_mean=60, max_len=512, arrival_rate=3.0)
    in_system, rate_times_latency = batching.littles_law(simulate(trace, kv_slots=2048, max_len=512))
    assert in_system == pytest.approx(rate_times_latency, rel=1e-9)


def test_vllm_defaults_come_from_the_facts_file():
    facts = batching.vllm_facts()
    assert facts["version"] == batching.VLLM_VERSION == "0.33.0"
    assert (facts["block_size"], facts["gpu_memory_utilization"], facts["watermark"]) == (16, 0.92, 0.0)
    assert batching.vllm_limits("a100-80gb-sxm").as_options() == {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    assert batching.vllm_limits("h100-sxm").as_options() == {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    assert batching.vllm_limits("h200", "LLM_CLASS").max_num_batched_tokens == 16384


TRACE = [Request(0, 0.0, 5, 3), Request(1, 0.5, 6, 2)]


@pytest.mark.parametrize("options, match", [
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_num_seqs=-3), "max_num_seqs"),
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(max_num_batched_tokens=-1), "max_num_batched_tokens"),
    (dict(kv_slots=0), "kv_slots"),
    (dict(block_size=0), "block_size"),
    (dict(watermark=1.0), "watermark"),
    (dict(max_len=7), "max_len"),                      # a request longer than the context
    (dict(chunked_prefill="yes"), "chunked_prefill"),
    (dict(prefix_caching="no"), "prefix_caching"),
    (dict(max_len=8192, cost=roofline.StepModel("llama-2-13b", device="a100-40gb-sxm")), "context"),
])
def test_bad_input_is_refused_naming_the_argument(options, match):
    kwargs = dict(kv_slots=64, block_size=4, max_len=32) | options
    with pytest.raises((ValueError, TypeError), match=match):
        simulate(TRACE, **kwargs)


def test_arrivals_out_of_order_are_refused():
    with pytest.raises(ValueError, match="order of arrival_s"):
        simulate(TRACE[::-1], kv_slots=64, block_size=4, max_len=32)


# ---------------------------------------------------------------------------
# 10^5 allocator operations under the scheduler, checked step by step

class _ReportingPool(BlockPool):
    """A block pool that reports every block it puts in the prefix cache."""

    __slots__ = ("on_register",)

    def _register(self, block, key) -> None:
        super()._register(block, key)
        self.on_register(block)


class CheckedAllocator(PagedAllocator):
    """A paged allocator that counts its operations and remembers when each block was hashed, and by whom."""

    def __init__(self, num_blocks: int, block_size: int, **kwargs) -> None:
        super().__init__(num_blocks, block_size, **kwargs)
        self.pool = _ReportingPool(num_blocks, block_size)
        self.pool.on_register = self._registered
        self.server = None
        self.ops = 0
        self.writer = None  # the sequence whose tokens are being written
        self.hashed_at: dict[int, tuple[int, object]] = {}  # block id -> (step, sequence) that hashed it
        self.hits: list[tuple[int, list[int], list[int]]] = []  # (step, hit block ids, their tokens as asked)

    def _registered(self, block) -> None:
        self.hashed_at[block.block_id] = (self.server.n_steps, self.writer)

    def _allocate(self, seq_id, tokens, **options) -> int:  # what the simulator calls
        self.ops += 1
        self.writer = seq_id
        cached = super()._allocate(seq_id, tokens, **options)
        table = self.block_table(seq_id)[: cached // self.block_size]
        self.hits.append((self.server.n_steps, table, list(tokens[:cached])))
        return cached

    def extend(self, seq_id, tokens, num_new) -> None:
        self.ops += 1
        self.writer = seq_id
        super().extend(seq_id, tokens, num_new)

    def append(self, seq_id, token) -> None:
        self.ops += 1
        self.writer = seq_id
        super().append(seq_id, token)

    def free(self, seq_id) -> None:
        self.ops += 1
        super().free(seq_id)

    # what the decode cohort calls instead of append
    def _grow(self, seq_id) -> None:
        self.ops += 1
        super()._grow(seq_id)

    def _write_through(self, seq_id, tokens, stop) -> None:
        self.ops += 1
        self.writer = seq_id
        super()._write_through(seq_id, tokens, stop)


def _check_pool(kv: CheckedAllocator) -> None:
    """Every block used by as many tables as its count says, or free, or cached with a full hashed block."""
    pool = kv.pool
    holders = Counter(id(b) for seq in kv._seqs.values() for b in seq.table)
    cached = pool._cached_free
    assert len(cached) + pool.num_free + sum(1 for b in pool.blocks if b.ref_count) == pool.num_blocks
    stored = 0
    for block in pool.blocks:
        assert block.ref_count == holders[id(block)]
        if block.ref_count:
            stored += len(block.tokens)
        elif block.block_id in cached:
            assert block.block_hash is not None and len(block.tokens) == kv.block_size
        else:
            assert block.block_hash is None and not block.tokens
    assert pool.tokens_in_use == stored


def _seeded_workload(rng: random.Random, n: int) -> list[Request]:
    clock, trace = 0.0, []
    for i in range(n):
        clock += rng.expovariate(2.0)
        group = rng.randrange(3) if rng.random() < 0.7 else -1
        prompt = rng.randint(1, 40)
        trace.append(Request(i, clock, prompt, rng.randint(1, 30), prefix_group=group,
                             prefix_len=min(prompt, rng.choice((4, 8, 17))) if group >= 0 else 0))
    return trace


def _run_checked(trace: list[Request], rng: random.Random, lazy: bool) -> CheckedAllocator:
    block_size = rng.choice((2, 4))
    longest = max(r.total_len for r in trace)
    kv = CheckedAllocator(-(-longest // block_size) + rng.randint(0, 8), block_size, prefix_caching=True)
    server = _Server(trace, kv, static=False, max_num_seqs=rng.randint(2, 8), budget=rng.choice((8, 24, 64)),
                     chunked=True, reserve_blocks=rng.randint(0, 1), seconds=lambda *counts: 1.0, lazy=lazy)
    kv.server = server
    computed_at: dict[tuple[int, int], int] = {}  # (request, position) -> the last step that computed its KV
    while server.busy:
        if not server.arrive():
            continue
        server.schedule()
        step = server.n_steps
        for live in server.scheduled:
            for position in range(live.computed - live.new, live.computed):
                computed_at[live.req.request_id, position] = step
        for live in server.cohort.members if lazy else ():  # each decodes the position after its last
            computed_at[live.req.request_id, live.computed + step - live.since] = step
        bs = kv.block_size
        for at, blocks, tokens in kv.hits:
            assert at == step
            for i, block_id in enumerate(blocks):
                hashed_step, owner = kv.hashed_at[block_id]
                # Hashed by now, and every position of it computed by its owner in an earlier step or in this one.
                assert hashed_step <= step
                assert all(computed_at.get((owner, p), step + 1) <= step for p in range(i * bs, (i + 1) * bs))
                assert list(kv.pool.blocks[block_id].tokens) == tokens[i * bs:(i + 1) * bs]
        kv.hits.clear()
        server.step()
        server.finish()
        _check_pool(kv)
    assert kv.pool.num_used == 0
    return kv


@pytest.mark.parametrize("lazy", [False, True], ids=["every request every step", "decode cohort"])
def test_no_block_is_served_from_the_cache_before_it_is_computed_over_100k_operations(lazy):
    rng = random.Random(2026)
    ops = hits = 0
    while ops < 100_000:
        kv = _run_checked(_seeded_workload(rng, 60), rng, lazy)
        ops += kv.ops
        hits += kv.prefix_hit_tokens
    assert ops >= 100_000 and hits > 0


def test_step_records_are_seconds_in_float64_and_counts_in_int64():
    result = simulate(sample_trace(30, seed=1, max_len=256), kv_slots=2048, max_len=256)
    steps = result.steps
    assert {name for name, column in steps.items() if column.dtype == np.float64} == {"time_s", "dt"}
    assert all(column.dtype == np.int64 for name, column in steps.items() if name not in ("time_s", "dt"))
    assert len({column.shape for column in steps.values()}) == 1 and all(c.flags.c_contiguous for c in steps.values())
    assert np.array_equal(np.cumsum(steps["dt"]) + result.requests["arrival_s"][0], steps["time_s"])


def test_simulate_defaults_are_vllms_for_an_a100_server():
    import inspect

    defaults = {name: p.default for name, p in inspect.signature(simulate).parameters.items()}
    limits = batching.vllm_limits("a100-80gb-sxm")
    assert (defaults["max_num_seqs"], defaults["max_num_batched_tokens"]) == (limits.max_num_seqs,
                                                                              limits.max_num_batched_tokens)
    facts = batching.vllm_facts()
    assert defaults["chunked_prefill"] is facts["enable_chunked_prefill"]
    assert defaults["watermark"] == facts["watermark"]
    # The one default that differs on purpose (simulate's docstring says so): the first chapters
    # teach the pool without a prefix cache, which vLLM 0.33.0 turns on for every model that has one.
    assert facts["enable_prefix_caching"] is True and defaults["prefix_caching"] is False
