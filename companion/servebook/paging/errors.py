"""What the allocators refuse: memory that is not free now, and sequence ids they do not hold or already hold."""

from __future__ import annotations

from collections.abc import Hashable


class OutOfBlocks(RuntimeError):
    """Not enough free KV-cache memory right now; nothing was changed.

    Unlike a ``ValueError`` (a request that can never fit), this is transient:
    the request fits once other sequences finish or are preempted.
    """


def not_allocated(seq_id) -> ValueError:
    """The error for an id that an allocator does not hold: never allocated, or already freed."""
    return ValueError(f"seq_id {seq_id!r} is not allocated (unknown, or already freed)")


def check_new_id(name: str, seq_id, allocated) -> Hashable:
    """``seq_id`` if it can name a new sequence: hashable, and not in ``allocated`` yet."""
    if not isinstance(seq_id, Hashable):
        raise TypeError(f"{name} must be hashable, got {type(seq_id).__name__}")
    if seq_id in allocated:
        raise ValueError(f"{name} {seq_id!r} is already allocated")
    return seq_id
