"""The book's engine against vLLM 0.33.0's own V1 scheduler, replayed from the committed records.

``scripts/vllm_reference.py`` drove vLLM's ``Scheduler`` and ``KVCacheManager``
(in an environment of their own; CI does not run it) on seeded traces and wrote
every step.  Here each trace runs through ``batching.simulate`` and must give
the same records.  The differences on purpose, each named in a test below:

1. vLLM keeps block 0 as a null block, so its pool has one block more than the
   book's for the same usable memory (the records store the book's count);
2. static batching and the naive allocator are the book's teaching baselines,
   which vLLM does not have, so no record covers them;
3. the script counts time in steps and drives vLLM until no request is
   unfinished (vLLM's ``has_requests`` would add one empty step that only reports
   the last finished ids).
"""

from __future__ import annotations

import pytest

from servebook import batching
from servebook.batching.reference import REQUEST_FIELDS, STEP_FIELDS, book_records, reference_records, replay

CASES = reference_records()


def test_at_least_20_seeded_traces_cover_preemption_chunking_and_cache_hits():
    assert len(CASES) >= 20
    steps = [case["steps"] for case in CASES.values()]
    assert sum(sum(s["preempted"]) for s in steps) > 0
    assert sum(sum(s["cached_tokens"]) for s in steps) > 0
    budgets = [case["config"]["max_num_batched_tokens"] for case in CASES.values()]
    assert any(max(s["tokens"]) == b for s, b in zip(steps, budgets, strict=True))  # budget-bound steps
    assert any(not case["config"]["chunked_prefill"] for case in CASES.values())


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_replay_matches_vllm_record_for_record(name):
    case = CASES[name]
    mine = book_records(replay(case))
    for field in STEP_FIELDS:
        assert mine["steps"][field] == case["steps"][field], field
    for field in REQUEST_FIELDS:
        assert mine["requests"][field] == case["requests"][field], field


def test_difference_1_vllm_has_one_null_block_more():
    for case in CASES.values():
        # vLLM's free blocks never exceed the book's pool: its extra block is the null block, never free.
        assert max(case["steps"]["blocks_free"]) == case["config"]["num_blocks"]


def test_difference_2_static_batching_and_the_naive_allocator_are_the_books_alone():
    assert all({"policy", "allocator"}.isdisjoint(case["config"]) for case in CASES.values())
    assert batching.POLICIES == ("static", "continuous") and batching.ALLOCATORS == ("paged", "naive")


def test_difference_3_no_trailing_empty_step():
    for case in CASES.values():
        assert case["steps"]["running"][-1] > 0 and case["steps"]["in_flight"][-1] == 0


def test_the_comparison_the_chapter_reports():
    comparison = batching.reference_comparison()
    assert comparison.cases == len(CASES) and comparison.agreeing_cases == comparison.cases
    assert comparison.steps == sum(len(case["steps"]["running"]) for case in CASES.values())
