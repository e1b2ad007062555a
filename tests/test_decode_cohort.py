"""The decode cohort changes the simulator's cost, not its answers.

:mod:`servebook.batching.cohort` advances the running requests that decode by
their events (a block to take, a block to hash, a last token) instead of
token by token.  Every record of a run, per step, per request and per token,
must be the one the simulator gives when it visits every request every step
(``LAZY_DECODES = False``), over seeded traces that exercise what can go
differently: preemption in tight pools, chunked prefills that break a step of
decodes, prefix caching with shared prompts and recomputation from the cache,
blocks of one token, budgets below the batch, and the admission the cohort
skips while the head of the queue cannot fit.
"""

from __future__ import annotations

import numpy as np
import pytest

from servebook import batching, roofline
from servebook.batching import Request, sample_trace, simulate, simulator

STEP_MODEL = roofline.StepModel("llama-2-7b", device="a100-80gb-sxm")

# (block_size, blocks, prefix caching, chunked prefill, token budget, sequence cap, watermark)
CONFIGS = [
    (16, 60, False, True, 2048, 256, 0.0),
    (16, 60, True, True, 2048, 256, 0.0),
    (16, 45, True, True, 256, 64, 0.01),
    (8, 120, True, False, 2048, 32, 0.0),
    (4, 200, False, True, 64, 256, 0.0),    # a budget below the batch: some decodes wait a step
    (1, 900, True, True, 512, 16, 0.0),
    (2, 500, True, True, None, 256, 0.05),
    (16, 400, True, True, 2048, 8, 0.0),    # the cap, not memory, holds the queue
]


def _trace(seed: int) -> list[Request]:
    rate = (10.0, 40.0, 200.0)[seed % 3]
    return sample_trace(120, seed=seed, prompt_mean=120, output_mean=90, max_len=512, arrival_rate=rate,
                        shared_prefix_len=(40, 70, 100)[seed % 3], n_prefix_groups=2)


def _records(result: batching.SimulationResult) -> dict[str, np.ndarray]:
    records = {f"steps.{k}": v for k, v in result.steps.items()}
    records.update({f"requests.{k}": v for k, v in result.requests.items()})
    records["token_steps"] = result.token_steps
    return records


def _both(monkeypatch, trace, **options) -> tuple[dict, dict, int]:
    """The run with the cohort, the run without, and how many steps the cohort ran alone
    (the quiet ones in one loop, the others phase by phase)."""
    calls, quiet = [], []
    decodes, quietly = simulator._Server.schedule_decodes, simulator._Server.decode_quietly

    def counted(server):
        calls.append(1)
        return decodes(server)

    def counted_quietly(server, rows):
        before = len(rows)
        quietly(server, rows)
        quiet.extend([1] * (len(rows) - before))

    monkeypatch.setattr(simulator._Server, "schedule_decodes", counted)
    monkeypatch.setattr(simulator._Server, "decode_quietly", counted_quietly)
    lazy = _records(simulate(trace, **options))
    monkeypatch.setattr(simulator, "LAZY_DECODES", False)
    eager = _records(simulate(trace, **options))
    monkeypatch.setattr(simulator, "LAZY_DECODES", True)
    if calls:   # the cohort ran: some of its steps were quiet
        assert quiet
    return lazy, eager, len(calls) + len(quiet)


def _name(config: tuple) -> str:
    return "bs{}-{}blocks-caching{}-chunked{}-budget{}-seqs{}-wm{}".format(*config)


@pytest.mark.parametrize("config", CONFIGS, ids=_name)
@pytest.mark.parametrize("seed", range(3))
def test_the_cohort_gives_every_record_of_the_step_by_step_run(monkeypatch, config, seed):
    block_size, blocks, caching, chunked, budget, seqs, watermark = config
    lazy, eager, cohort_steps = _both(
        monkeypatch, _trace(seed), kv_slots=blocks * block_size, block_size=block_size, max_len=512,
        prefix_caching=caching, chunked_prefill=chunked, max_num_batched_tokens=budget, max_num_seqs=seqs,
        watermark=watermark, cost=STEP_MODEL)
    assert lazy.keys() == eager.keys()
    for name in lazy:
        assert np.array_equal(lazy[name], eager[name], equal_nan=True), name
    # not vacuous: most steps ran on the cohort alone; prompts hit the cache, or pools ran out
    assert cohort_steps > len(lazy["steps.dt"]) / 2
    assert lazy["steps.cached_tokens" if caching else "steps.preempted"].sum() > 0


def test_a_request_of_one_output_token_and_an_idle_server(monkeypatch):
    trace = [Request(0, 0.0, 5, 1), Request(1, 0.5, 3, 7), Request(2, 40.0, 9, 2)]
    lazy, eager, cohort_steps = _both(monkeypatch, trace, kv_slots=64, block_size=4, max_len=32,
                                      prefix_caching=True)
    assert cohort_steps > 0
    for name in lazy:
        assert np.array_equal(lazy[name], eager[name], equal_nan=True), name


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole prompts"])
def test_quiet_steps_take_arrivals_and_find_that_the_head_cannot_fit(monkeypatch, chunked):
    """The quiet loop also runs the steps in which requests only arrive, those in which a take finds no
    block and the last running requests are preempted, those in which members finish, and the step
    after a preemption or a finish in which the head of the queue is found not to fit: every record
    stays the step-by-step one."""
    seen = {"arrivals": 0, "head refused": 0, "stale ends": 0, "preemptions": 0, "finishes": 0}
    quietly, head_waits = simulator._Server.decode_quietly, simulator._Server.head_waits

    def watched(server, rows):
        before, queued = len(rows), len(server.waiting)
        ends = set(server.cohort.finishing)
        quietly(server, rows)
        if len(rows) > before:
            seen["arrivals"] += len(server.waiting) > queued
            seen["stale ends"] += len([s for s in ends if s < server.n_steps])
            seen["preemptions"] += sum(row[5] for row in rows[before:])
            seen["finishes"] += sum(row[6] for row in rows[before:])

    def refused(server, left):
        waits = head_waits(server, left)
        seen["head refused"] += waits
        return waits

    monkeypatch.setattr(simulator._Server, "decode_quietly", watched)
    monkeypatch.setattr(simulator._Server, "head_waits", refused)
    trace = sample_trace(300, seed=5, prompt_mean=150, output_mean=120, max_len=512, arrival_rate=60.0,
                         shared_prefix_len=48, n_prefix_groups=3)
    lazy, eager, _ = _both(monkeypatch, trace, kv_slots=50 * 16, max_len=512, prefix_caching=True,
                           chunked_prefill=chunked, max_num_batched_tokens=512, cost=STEP_MODEL)
    for name in lazy:
        assert np.array_equal(lazy[name], eager[name], equal_nan=True), name
    assert lazy["steps.preempted"].sum() > 0
    assert all(seen.values()), seen
