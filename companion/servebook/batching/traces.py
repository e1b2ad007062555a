"""Requests and traces: when each request arrives, how long its prompt is, how many tokens it generates.

Seeded synthetic traces (log-normal lengths, Poisson arrivals, shared system
prompts) and CSV files, for the simulator and for questions about one length at a time.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..checks import positive, whole

_GROUP_BASE = 1 << 60  # token ids of shared prefixes live above every request's own ids
_POSITIONS = 1 << 24   # positions a request's ids have room for: request r's own ids are (r + 1) * 2**24 + position
_GROUPS = 1 << 38      # prefix groups whose ids stay below 2**63, where token ids end


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, how long its prompt is, and how many tokens it will generate.

    Requests with the same ``prefix_group`` (>= 0) share their first
    ``prefix_len`` prompt tokens (a common system prompt), which only matters
    with prefix caching.  Token ids are synthetic but deterministic.
    """

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int
    prefix_group: int = -1
    prefix_len: int = 0

    def __post_init__(self) -> None:
        whole("request_id", self.request_id, 0)
        positive("arrival_s", self.arrival_s, allow_zero=True)
        whole("prompt_len", self.prompt_len, 1)
        whole("output_len", self.output_len, 1)
        whole("prefix_len", self.prefix_len, 0)
        whole("prefix_group", self.prefix_group, -1, _GROUPS - 1)   # -1: none
        if self.prefix_group == -1 and self.prefix_len:
            raise ValueError(f"prefix_len ({self.prefix_len}) needs a prefix_group (>= 0) to share it with")
        if self.prefix_len > self.prompt_len:
            raise ValueError(f"prefix_len ({self.prefix_len}) exceeds prompt_len ({self.prompt_len})")
        if self.request_id >= 1 << 36:
            raise ValueError(f"request_id must be < 2**36, got {self.request_id}")
        if self.total_len > _POSITIONS:  # the ids of position p are base + p: longer would reach the next request's
            raise ValueError(f"prompt_len + output_len must be at most 2**24 ({_POSITIONS:,}), got {self.total_len:,}")

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len

    def tokens(self, n: int) -> list[int]:
        """The first ``n`` token ids of this request's stream (prompt, then generated)."""
        return self.token_range(0, n)

    def token_range(self, start: int, stop: int) -> list[int]:
        """The token ids at positions ``start`` to ``stop - 1`` of this request's stream."""
        shared = min(stop, self.prefix_len) if self.prefix_group >= 0 else 0
        own_base = (self.request_id + 1) * _POSITIONS
        if shared <= start:
            return list(range(own_base + start, own_base + stop))
        group_base = _GROUP_BASE + self.prefix_group * _POSITIONS
        return list(range(group_base + start, group_base + shared)) + list(range(own_base + shared, own_base + stop))

    def token(self, position: int) -> int:
        if self.prefix_group >= 0 and position < self.prefix_len:
            return _GROUP_BASE + self.prefix_group * _POSITIONS + position
        return (self.request_id + 1) * _POSITIONS + position


def _lognormal_lengths(rng: np.random.Generator, n: int, mean: float, sigma: float) -> np.ndarray:
    # mu chosen so that the distribution's mean (not its median) is `mean`: exp(mu + sigma^2 / 2).
    mu = math.log(mean) - sigma**2 / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)


def lognormal_lengths(n: int, *, mean: float, sigma: float = 1.0, seed: int = 0) -> np.ndarray:
    """``n`` seeded token counts (>= 1) from a log-normal whose mean, before rounding, is ``mean``.

    The length distribution of :func:`sample_trace`, on its own, for questions about
    one length at a time (tail waste against block size, for instance).
    """
    rng = np.random.default_rng(whole("seed", seed, 0))
    return _lognormal_lengths(rng, whole("n", n, 1), positive("mean", mean), positive("sigma", sigma, allow_zero=True))


def sample_trace(n_requests: int, *, seed: int = 0, prompt_mean: float = 160.0, output_mean: float = 340.0,
                 sigma: float = 1.0, max_len: int = 2048, arrival_rate: float | None = None,
                 shared_prefix_len: int = 0, n_prefix_groups: int = 1) -> list[Request]:
    """A seeded synthetic trace: log-normal prompt and output lengths, Poisson arrivals.

    Chat traffic has a long right tail: most answers are short, a few run to the
    context limit.  A log-normal with the given means and shape ``sigma`` has that
    shape; lengths are clipped so that ``prompt + output <= max_len``.
    ``arrival_rate`` (requests per second) draws Poisson arrivals; ``None`` puts
    every request in the queue at time 0 (an offline batch job).
    ``shared_prefix_len > 0`` gives each request one of ``n_prefix_groups`` common
    prompt prefixes of that length.
    """
    n_requests = whole("n_requests", n_requests, 1)
    max_len = whole("max_len", max_len, 2)
    prompt_mean = positive("prompt_mean", prompt_mean)
    output_mean = positive("output_mean", output_mean)
    sigma = positive("sigma", sigma, allow_zero=True)
    shared_prefix_len = whole("shared_prefix_len", shared_prefix_len, 0)
    n_prefix_groups = whole("n_prefix_groups", n_prefix_groups, 1)
    rng = np.random.default_rng(whole("seed", seed, 0))
    prompts = _lognormal_lengths(rng, n_requests, prompt_mean, sigma)
    outputs = _lognormal_lengths(rng, n_requests, output_mean, sigma)
    prompts = np.clip(prompts + shared_prefix_len, 1, max_len - 1)
    outputs = np.minimum(outputs, max_len - prompts)
    if arrival_rate is None:
        arrivals = np.zeros(n_requests)
    else:
        gaps = rng.exponential(1.0 / positive("arrival_rate", arrival_rate), n_requests)
        arrivals = np.cumsum(gaps) - gaps[0]
    groups = rng.integers(0, n_prefix_groups, n_requests) if shared_prefix_len else np.full(n_requests, -1)
    return [
        Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i]),
                prefix_group=int(groups[i]), prefix_len=min(shared_prefix_len, int(prompts[i])))
        for i in range(n_requests)
    ]


def checked_trace(requests: Sequence[Request], max_len: int) -> list[Request]:
    """``requests`` as a list a server can run: Request objects, unique ids, in order of arrival, none
    longer than ``max_len``; anything else a ``ValueError``/``TypeError`` naming what is wrong."""
    requests = list(requests)
    if not requests:
        raise ValueError("requests must not be empty")
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"requests must hold Request objects, got {type(r).__name__}")
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("requests: request_id values must be unique")
    late = next((i for i in range(1, len(requests)) if requests[i].arrival_s < requests[i - 1].arrival_s), None)
    if late is not None:
        raise ValueError(f"requests must be in order of arrival_s: request {requests[late].request_id} "
                         f"arrives at {requests[late].arrival_s:g} s, before the one listed before it")
    too_long = [r.request_id for r in requests if r.total_len > max_len]
    if too_long:
        raise ValueError(f"requests: {len(too_long)} exceed max_len = {max_len} tokens, the context "
                         f"(first: id {too_long[0]})")
    return requests


_TRACE_FIELDS = ("request_id", "arrival_s", "prompt_len", "output_len", "prefix_group", "prefix_len")


def save_trace(requests: Iterable[Request], path: str | Path) -> Path:
    """Write requests as CSV (``request_id,arrival_s,prompt_len,output_len,prefix_group,prefix_len``)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_TRACE_FIELDS)
        for r in requests:
            writer.writerow([r.request_id, repr(r.arrival_s), r.prompt_len, r.output_len, r.prefix_group, r.prefix_len])
    return path


def load_trace(path: str | Path) -> list[Request]:
    """Read a CSV trace with at least ``arrival_s,prompt_len,output_len`` columns.

    ``request_id`` defaults to the row number; ``prefix_group``/``prefix_len`` to none.
    """
    path = Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = {"arrival_s", "prompt_len", "output_len"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"trace {path} lacks column(s) {sorted(missing)}")
        requests = []
        for row_number, row in enumerate(reader):
            try:
                requests.append(Request(
                    int(row.get("request_id") or row_number), float(row["arrival_s"]),
                    int(row["prompt_len"]), int(row["output_len"]),
                    int(row.get("prefix_group") or -1), int(row.get("prefix_len") or 0),
                ))
            except (TypeError, ValueError) as err:
                raise ValueError(f"trace {path}, data row {row_number + 1}: {err}") from None
    return requests
