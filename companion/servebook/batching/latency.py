"""What a user feels: per-request latencies of a simulated run, their percentiles, and goodput under an SLO.

- *TTFT*, time to first token: arrival to the end of the step that emitted it
  (queueing and the whole prefill, every chunk of it);
- *TPOT*, time per output token: the mean gap between a request's tokens after
  the first, (finish - first token) / (n - 1);
- *ITL*, inter-token latency: each of those gaps on its own, so a stall (a
  long prefill in the same step, a preemption) shows in the tail;
- *end-to-end latency*: arrival to the last token, TTFT + (n - 1) TPOT;
- *goodput*: requests per second that met a service-level objective (SLO) on
  TTFT and TPOT, over the run's makespan (DistServe's definition, Zhong et al., 2024).

Per-token times come from per-step arrays (:attr:`SimulationResult.token_steps`), not per-token objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING

import numpy as np

from ..checks import interval, positive

if TYPE_CHECKING:  # results imports these definitions for its summary
    from .results import SimulationResult


@dataclass(frozen=True)
class SLO:
    """A service-level objective: a request meets it if both its TTFT and its TPOT are within bounds."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        positive("ttft_s", self.ttft_s)
        positive("tpot_s", self.tpot_s)


def time_per_output_token(requests: dict[str, np.ndarray]) -> np.ndarray:
    """Per request, (finish - first token) / (output tokens - 1); NaN for a one-token answer.

    TPOT as vLLM's benchmarks define it: the mean gap between a request's
    tokens after the first, so that TTFT + (n - 1) TPOT is the end-to-end latency.
    """
    gaps = requests["output_len"] - 1
    return np.where(gaps > 0, (requests["finish_s"] - requests["first_token_s"]) / np.maximum(gaps, 1), np.nan)


def request_latencies(result: SimulationResult) -> dict[str, np.ndarray]:
    """Per request (trace order): ``queue_s`` (arrival to first scheduled), ``ttft_s``, ``tpot_s``, ``e2e_s``."""
    r = result.requests
    return {
        "queue_s": r["scheduled_s"] - r["arrival_s"],
        "ttft_s": r["first_token_s"] - r["arrival_s"],
        "tpot_s": time_per_output_token(r),
        "e2e_s": r["finish_s"] - r["arrival_s"],
    }


def inter_token_latencies(result: SimulationResult) -> np.ndarray:
    """Every gap between two consecutive tokens of one request, over all requests (seconds)."""
    times = result.steps["time_s"][result.token_steps]
    gaps = np.diff(times)
    starts = result.token_offsets[1:-1] - 1  # the gap from one request's last token to the next's first
    keep = np.ones(gaps.size, dtype=bool)
    keep[starts] = False
    return gaps[keep]


def percentiles(values: np.ndarray, qs: tuple[float, ...] = (50, 90, 99), *,
                empty: float | None = None) -> dict[float, float]:
    """The ``qs`` percentiles of ``values``, NaNs (one-token answers' TPOT) left out.

    With no number left, ``ValueError``; or, if ``empty`` is given, that value for every
    percentile (a run summary of one-token answers has no TPOT, and says NaN).
    """
    if not isinstance(qs, (tuple, list)) or not qs:
        raise TypeError(f"qs must be a non-empty tuple of percentiles (0 to 100), got {qs!r}")
    for i, q in enumerate(qs):
        interval(f"qs[{i}]", q, 0, 100)
    if empty is not None and (isinstance(empty, bool) or not isinstance(empty, Real)):
        raise TypeError(f"empty must be a number (NaN allowed) or None, got {empty!r}")
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if not values.size:
        if empty is None:
            raise ValueError("values holds no number")
        return dict.fromkeys(qs, float(empty))
    return {q: float(np.percentile(values, q)) for q in qs}


def meets(result: SimulationResult, slo: SLO) -> np.ndarray:
    """Per request, whether it met ``slo`` (a one-token answer has no TPOT to miss)."""
    lat = request_latencies(result)
    tpot_ok = np.isnan(lat["tpot_s"]) | (lat["tpot_s"] <= slo.tpot_s)
    return (lat["ttft_s"] <= slo.ttft_s) & tpot_ok


def attainment(result: SimulationResult, slo: SLO) -> float:
    """The SLO attainment: the share of requests that met ``slo``."""
    return float(meets(result, slo).mean())


def goodput(result: SimulationResult, slo: SLO) -> float:
    """Requests per second that met ``slo``, over the makespan (first arrival to last finish).

    The goodput vLLM 0.33.0's benchmark reports (``vllm bench serve --goodput``:
    requests on time over the run's duration).  DistServe's goodput is another
    reading of the same runs: the highest arrival rate whose :func:`attainment`
    stays at a target.
    """
    r = result.requests
    makespan = float(r["finish_s"].max() - r["arrival_s"].min())
    return int(meets(result, slo).sum()) / makespan


def littles_law(result: SimulationResult) -> tuple[float, float]:
    """(L, λ W): requests in the system on average, and arrival rate times mean latency.

    Little's law says they are equal for any queue that starts and ends empty;
    L is integrated from the arrival and finish times, so the check is on the
    simulator's bookkeeping of both.
    """
    r = result.requests
    start, end = float(r["arrival_s"].min()), float(r["finish_s"].max())
    events = np.concatenate([r["arrival_s"], r["finish_s"]])
    change = np.concatenate([np.ones(len(r["arrival_s"])), -np.ones(len(r["finish_s"]))])
    order = np.lexsort((-change, events))
    events, in_system = events[order], np.cumsum(change[order])
    area = float((in_system[:-1] * np.diff(events)).sum())
    latency = r["finish_s"] - r["arrival_s"]
    rate = len(latency) / (end - start)
    return area / (end - start), rate * float(latency.mean())
