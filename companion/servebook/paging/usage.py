"""Snapshots of a KV cache's memory, in token slots: what is reserved, what holds tokens, and why the rest does not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVUsage:
    """A snapshot of a KV cache, in token slots (multiply by KV bytes per token for bytes)."""

    slots_total: int      # the whole pool
    slots_reserved: int   # held by sequences (whole blocks, or whole max_len regions)
    tokens_stored: int    # slots that hold a token's keys and values

    @property
    def reserved_unused(self) -> int:
        """Reserved slots holding no token: tail waste (paged) or the unused reservation (naive)."""
        return self.slots_reserved - self.tokens_stored

    @property
    def utilisation(self) -> float:
        """Share of the reserved slots that hold tokens (1.0 when nothing is reserved)."""
        return self.tokens_stored / self.slots_reserved if self.slots_reserved else 1.0

    @property
    def pool_utilisation(self) -> float:
        """Share of the whole pool that holds tokens."""
        return self.tokens_stored / self.slots_total


@dataclass(frozen=True)
class PagedUsage(KVUsage):
    """:class:`KVUsage` plus the block counts and prefix-cache counters of a paged cache."""

    block_size: int = 16
    blocks_total: int = 0
    blocks_used: int = 0      # reference count > 0
    blocks_free: int = 0      # hold nothing reusable
    blocks_cached: int = 0    # free, but still hold a hashed full block a new prompt can reuse
    logical_tokens: int = 0   # sum of sequence lengths; > tokens_stored when blocks are shared
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0

    @property
    def tail_waste(self) -> int:
        """Empty slots in used blocks: only last blocks can have any, so at most ``block_size - 1`` per block table."""
        return self.reserved_unused

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache over prompt tokens looked up."""
        return self.prefix_hit_tokens / self.prefix_queried_tokens if self.prefix_queried_tokens else 0.0
