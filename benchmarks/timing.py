"""Timing shared by the benchmark scripts (run them from the repository root: python benchmarks/<name>.py)."""

from __future__ import annotations

import statistics
import time


def median_seconds(function, repeats: int) -> float:
    """Median wall time of ``repeats`` calls, after one warm-up call (lazy imports, first-touch pages)."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(contenders: dict, repeats: int) -> dict[str, list[float]]:
    """CPU seconds of each contender, run in turn ``repeats`` times.

    A contender is ``(setup, run)``: ``run(setup())`` is timed, ``setup()`` is not
    (building a pool of 16,384 blocks is not what the scheduler does every step).
    """
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (setup, run) in contenders.items():
            state = setup()
            start = time.process_time()
            run(state)
            times[name].append(time.process_time() - start)
    return times


def line(name: str, values: list[float]) -> str:
    return f"{name:<48} median {statistics.median(values):7.3f} s  (spread {min(values):.3f}-{max(values):.3f})"
