"""The scheme paging replaces: one contiguous region of ``max_len`` slots per request."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from ..checks import whole
from .errors import OutOfBlocks, check_new_id, not_allocated
from .hashing import TOKEN_LIMIT, token_ids
from .usage import KVUsage


class NaiveAllocator:
    """Contiguous allocation: every request reserves one region of ``max_len`` slots.

    The pool of ``num_slots`` slots is cut into ``num_slots // max_len`` regions;
    the remainder can never be used (external fragmentation).  A request's
    region is reserved whole at admission, however short the request turns out.
    """

    def __init__(self, num_slots: int, max_len: int) -> None:
        self.num_slots = whole("num_slots", num_slots, 1)
        self.max_len = whole("max_len", max_len, 1)
        self.num_regions = self.num_slots // self.max_len
        if self.num_regions == 0:
            raise ValueError(f"num_slots ({num_slots}) is smaller than one max_len region ({max_len})")
        self._free_regions = list(range(self.num_regions - 1, -1, -1))
        self._seqs: dict[Hashable, list[int]] = {}  # seq_id -> [region, num_tokens]
        self._tokens = 0

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def _get(self, seq_id: Hashable) -> list[int]:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise not_allocated(seq_id) from None

    def region(self, seq_id: Hashable) -> tuple[int, int]:
        """The slot range ``[start, stop)`` reserved for ``seq_id``."""
        region = self._get(seq_id)[0]
        return region * self.max_len, (region + 1) * self.max_len

    def num_tokens(self, seq_id: Hashable) -> int:
        return self._get(seq_id)[1]

    @property
    def slots_total(self) -> int:
        return self.num_slots

    @property
    def slots_reserved(self) -> int:
        return len(self._seqs) * self.max_len

    @property
    def tokens_stored(self) -> int:
        return self._tokens

    @property
    def regions_free(self) -> int:
        return len(self._free_regions)

    @property
    def unusable_slots(self) -> int:
        """Slots past the last whole region: never reservable."""
        return self.num_slots - self.num_regions * self.max_len

    def usage(self) -> KVUsage:
        return KVUsage(slots_total=self.num_slots, slots_reserved=self.slots_reserved, tokens_stored=self._tokens)

    def _check_prompt(self, tokens: Sequence[int]) -> int:
        n = len(token_ids(tokens))
        if n > self.max_len:
            raise ValueError(f"a prompt of {n} tokens is longer than max_len ({self.max_len})")
        return n

    def can_allocate(self, tokens: Sequence[int]) -> bool:
        self._check_prompt(tokens)
        return bool(self._free_regions)

    def allocate(self, seq_id: Hashable, tokens: Sequence[int], *, num_new: int | None = None,
                 max_new: int | None = None, reserve: int = 0, hashes: list[bytes] | None = None) -> int:
        """Reserve a whole ``max_len`` region for ``seq_id``; return 0 (no prefix caching).

        The first ``num_new`` tokens (default: all) are written now, the rest
        with :meth:`extend`, as :meth:`PagedAllocator.allocate` does; ``reserve``
        and ``hashes`` are accepted for the same call and mean nothing here:
        a region never grows.
        """
        check_new_id("seq_id", seq_id, self._seqs)
        n = self._check_prompt(tokens)
        n = n if num_new is None else whole("num_new", num_new, 1, n)
        if max_new is not None:
            n = min(n, whole("max_new", max_new, 1))
        whole("reserve", reserve, 0)
        if not self._free_regions:
            raise OutOfBlocks(f"all {self.num_regions} regions of {self.max_len} slots are reserved")
        self._seqs[seq_id] = [self._free_regions.pop(), n]
        self._tokens += n
        return 0

    def extend(self, seq_id: Hashable, tokens: Sequence[int], num_new: int) -> None:
        """Write the next ``num_new`` of ``tokens`` (the sequence's stream so far) into its region."""
        entry = self._get(seq_id)
        num_new = whole("num_new", num_new, 1, min(len(tokens), self.max_len) - entry[1])
        token_ids(tokens[entry[1]:entry[1] + num_new])
        entry[1] += num_new
        self._tokens += num_new

    def can_append(self, seq_id: Hashable) -> bool:
        return self._get(seq_id)[1] < self.max_len

    def append(self, seq_id: Hashable, token: int) -> None:
        entry = self._get(seq_id)
        if type(token) is not int or not 0 <= token < TOKEN_LIMIT:
            token_ids([token], "token")
        if entry[1] >= self.max_len:
            raise ValueError(f"seq_id {seq_id!r} already holds max_len = {self.max_len} tokens")
        entry[1] += 1
        self._tokens += 1

    def free(self, seq_id: Hashable) -> None:
        region, n = self._get(seq_id)
        del self._seqs[seq_id]
        self._free_regions.append(region)
        self._tokens -= n
