"""Closed forms: the arithmetic of the book's worked examples, which the allocators must agree with."""

from __future__ import annotations

from collections.abc import Iterable

from ..checks import whole
from ..units import ceil_div


def blocks_needed(n_tokens: int, block_size: int) -> int:
    """Blocks that hold ``n_tokens`` tokens: ceil(n / block_size).

    A ceiling, because the token that spills past a full block needs a whole new block.
    """
    return ceil_div(whole("n_tokens", n_tokens, 0), whole("block_size", block_size, 1))


def paged_slots(n_tokens: int, block_size: int) -> int:
    """Token slots reserved by paging: whole blocks, ceil(n / block_size) * block_size."""
    return blocks_needed(n_tokens, block_size) * block_size


def paged_waste(n_tokens: int, block_size: int) -> int:
    """Empty slots in the last block of an ``n_tokens`` sequence: at most ``block_size - 1``."""
    return paged_slots(n_tokens, block_size) - n_tokens


def naive_waste(n_tokens: int, max_len: int) -> int:
    """Slots a contiguous ``max_len`` reservation leaves empty: ``max_len - n_tokens``."""
    n_tokens = whole("n_tokens", n_tokens, 0)
    max_len = whole("max_len", max_len, 1)
    if n_tokens > max_len:
        raise ValueError(f"n_tokens ({n_tokens}) exceeds max_len ({max_len}): the request does not fit its reservation")
    return max_len - n_tokens


def mean_tail_waste(lengths: Iterable[int], block_size: int) -> float:
    """Mean empty slots per request: about ``(block_size - 1) / 2`` when lengths spread evenly over a block."""
    waste = [paged_waste(n, block_size) for n in lengths]
    if not waste:
        raise ValueError("lengths must hold at least one request length")
    return sum(waste) / len(waste)


def tail_share(lengths: Iterable[int], block_size: int) -> float:
    """Empty slots over reserved slots, summed over all requests (the denominator is what paging reserved):
    what a block size costs a workload."""
    lengths = list(lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one request length")
    return sum(paged_waste(n, block_size) for n in lengths) / sum(paged_slots(n, block_size) for n in lengths)
