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
