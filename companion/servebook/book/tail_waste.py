"""The empty tails of last blocks over many requests: what a block size costs a workload.

Chapter 03's figure and its text read these functions, so the share they quote
is computed once.  (They are paging arithmetic over ``paging.paged_waste``;
they wait here while the paging module is rewritten.)
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import paging


def mean_tail_waste(lengths: Iterable[int], block_size: int) -> float:
    """Mean empty slots per request: about ``(block_size - 1) / 2`` when lengths spread evenly over a block."""
    waste = [paging.paged_waste(n, block_size) for n in lengths]
    if not waste:
        raise ValueError("lengths must hold at least one request length")
    return sum(waste) / len(waste)


def tail_share(lengths: Iterable[int], block_size: int) -> float:
    """Empty slots over reserved slots, summed over all requests (the denominator is what paging reserved)."""
    lengths = list(lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one request length")
    return (sum(paging.paged_waste(n, block_size) for n in lengths)
            / sum(paging.paged_slots(n, block_size) for n in lengths))
