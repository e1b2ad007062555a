"""The book's engine against vLLM's own: replay the traces vLLM 0.33.0's V1 scheduler was driven on.

``data/vllm-0.33.0-golden.json`` holds what vLLM's ``Scheduler`` did on seeded
traces (written by ``scripts/vllm_reference.py`` in its own environment; see
its docstring).  :func:`reference_comparison` runs each trace through
:func:`~servebook.batching.simulate` with the same configuration and compares
every per-step and per-request record.  The one adjustment is named here:
vLLM keeps block 0 as a null block, so its pool has one block more than the
book's for the same usable memory (the golden file stores the book's count).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np

from .defaults import VLLM_VERSION
from .results import SimulationResult
from .simulator import simulate
from .traces import Request

STEP_FIELDS = ("running", "admitted", "preempted", "finished", "tokens", "cached_tokens", "blocks_free",
               "in_flight", "waiting")
REQUEST_FIELDS = ("first_token_step", "finish_step")


@cache
def reference_records() -> dict:
    """vLLM's records, case by case, as the script wrote them."""
    path = resources.files("servebook").joinpath(f"data/vllm-{VLLM_VERSION}-golden.json")
    return json.loads(path.read_text())


def replay(case: dict) -> SimulationResult:
    """One recorded case through the book's engine (one second per step, so time counts steps)."""
    trace = [Request(*row) for row in case["trace"]]
    c = case["config"]
    return simulate(trace, kv_slots=c["num_blocks"] * c["block_size"], block_size=c["block_size"],
                    max_len=c["max_len"], max_num_seqs=c["max_num_seqs"],
                    max_num_batched_tokens=c["max_num_batched_tokens"], chunked_prefill=c["chunked_prefill"],
                    watermark=c["watermark"], prefix_caching=c["prefix_caching"])


def book_records(result: SimulationResult) -> dict[str, dict[str, list[int]]]:
    """A run's records in the fields and units of the golden file."""
    s = result.steps
    steps = {name: s[name].tolist() for name in STEP_FIELDS if name in s}
    steps["tokens"] = (s["prefill_tokens"] + s["decode_tokens"]).tolist()
    offsets, n = result.token_offsets[:-1], result.requests["output_len"]
    requests = {"first_token_step": result.token_steps[offsets].tolist(),
                "finish_step": result.token_steps[offsets + n - 1].tolist()}
    return {"steps": steps, "requests": requests}


@dataclass(frozen=True)
class Comparison:
    """How the replays compare: cases, steps, and for each disagreeing case the first field that differs."""

    cases: int
    steps: int
    differences: dict[str, str] = field(default_factory=dict)

    @property
    def agreeing_cases(self) -> int:
        return self.cases - len(self.differences)


def _first_difference(mine: dict, theirs: dict) -> str | None:
    for table, fields in (("steps", STEP_FIELDS), ("requests", REQUEST_FIELDS)):
        for name in fields:
            a, b = np.asarray(mine[table][name]), np.asarray(theirs[table][name])
            if a.shape != b.shape:
                return f"{table}.{name}: {a.size} records in the book, {b.size} in vLLM"
            if not np.array_equal(a, b):
                i = int(np.flatnonzero(a != b)[0])
                return f"{table}.{name}[{i}]: book {a[i]}, vLLM {b[i]}"
    return None


@cache
def reference_comparison() -> Comparison:
    """Replay every recorded case and compare it record by record."""
    differences, steps = {}, 0
    for name, case in reference_records().items():
        mine = book_records(replay(case))
        steps += len(case["steps"]["running"])
        found = _first_difference(mine, case)
        if found is not None:
            differences[name] = found
    return Comparison(len(reference_records()), steps, differences)
