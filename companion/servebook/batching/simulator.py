"""The simulated server: an iteration in named phases, and :func:`simulate`, the loop over them.

Each iteration runs *arrive*, *admit*, *schedule* (which may *preempt*), *step*
and *finish*, each a method of :class:`_Server`; the module docstring of
:mod:`servebook.batching` says what the two policies and the two allocators do.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..checks import choice, flag, interval, whole
from ..paging import NaiveAllocator, OutOfBlocks, PagedAllocator
from ..roofline import StepModel, attention_pairs
from ..units import ceil_div
from .results import SimulationResult
from .traces import Request

POLICIES = ("static", "continuous")
ALLOCATORS = ("paged", "naive")


class _Live:
    """A request inside the server."""

    __slots__ = ("req", "generated", "stored", "fresh", "done", "first_token_s", "finish_s", "preemptions",
                 "prefilled", "recomputed")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.generated = 0        # output tokens emitted so far
        self.stored = 0           # tokens whose keys and values are in the cache
        self.fresh = False        # admitted (prefilled) in the current iteration
        self.done = False
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.preemptions = 0
        self.prefilled = 0        # tokens prefilled in the current iteration
        self.recomputed = 0       # tokens prefilled again after preemptions


class _Server:
    """The queues, the batch and the KV allocator between iterations; one method per phase.

    An iteration runs the phases in this order: :meth:`arrive` (requests whose
    time has come join the queue), :meth:`admit` (queued requests join the batch
    while their prompts fit), :meth:`schedule` (every decoding request writes
    the KV of the token it emitted last, calling :meth:`preempt` when blocks run out),
    :meth:`step` (the batch runs and emits one token per request), and
    :meth:`finish` (finished requests free their memory).  Each phase is a
    method of its own so that a scheduler with another order can reuse them.
    """

    def __init__(self, requests: list[Request], kv: PagedAllocator | NaiveAllocator, *, static: bool,
                 max_num_seqs: int, reserve_blocks: int, seconds) -> None:
        self.kv = kv
        self.static = static
        self.max_num_seqs = max_num_seqs
        self.reserve_blocks = reserve_blocks   # blocks a paged admission must leave free (the watermark)
        self.seconds = seconds                 # (tokens, cached_tokens, pairs) -> seconds of one iteration
        self.lives = {r.request_id: _Live(r) for r in requests}
        self.pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.request_id)))
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []         # in the order of admission
        self.finished: list[_Live] = []        # emitted their last token in the current iteration
        self.unfinished = 0                    # requests in the batch still to finish, after the last step
        self.clock = self.pending[0].arrival_s

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.waiting or self.running)

    def arrive(self) -> bool:
        """Requests that have arrived by now join the queue; ``False`` if the server is idle.

        An idle server (nothing queued or running) moves its clock to the next arrival instead.
        """
        pending = self.pending
        while pending and pending[0].arrival_s <= self.clock:
            self.waiting.append(self.lives[pending.popleft().request_id])
        if not self.waiting and not self.running:
            self.clock = pending[0].arrival_s
            return False
        return True

    def admit(self) -> int:
        """Queued requests join the batch, in order, while their prompts' KV cache fits; return how many.

        Continuous batching admits at every iteration, static batching only into an empty server.
        """
        if self.static and self.running:
            return 0
        kv, waiting, running = self.kv, self.waiting, self.running
        admitted = 0
        while waiting and len(running) < self.max_num_seqs:
            live = waiting[0]
            # A preempted request recomputes its prompt and every token it had generated.
            tokens = live.req.tokens(live.req.prompt_len + live.generated)
            if not self._fits(tokens):
                break
            cached = kv.allocate(live.req.request_id, tokens)
            waiting.popleft()
            live.fresh, live.stored, live.prefilled = True, len(tokens), len(tokens) - cached
            if live.preemptions:
                live.recomputed += len(tokens) - cached
            running.append(live)
            admitted += 1
        return admitted

    def _fits(self, tokens: list[int]) -> bool:
        # The watermark only guards running requests; an empty server admits whatever fits.
        if self.reserve_blocks and self.running:
            return self.kv.can_allocate(tokens, keep_free=self.reserve_blocks)
        return self.kv.can_allocate(tokens)

    def schedule(self) -> int:
        """Every running request that was not just prefilled writes the KV of the token it emitted last.

        When no block is free, requests are preempted, most recently admitted
        first, until the write fits or the writer itself was preempted.  Return
        how many were preempted.
        """
        kv, running = self.kv, self.running
        preempted = 0
        i = 0
        while i < len(running):
            live = running[i]
            if live.done or live.fresh:
                i += 1
                continue
            while True:
                try:
                    kv.append(live.req.request_id, live.req.token(live.stored))
                    live.stored += 1
                    i += 1
                    break
                except OutOfBlocks:
                    preempted += 1
                    if self.preempt() is live:
                        break  # running[i] is now the next request
        return preempted

    def preempt(self) -> _Live:
        """Preempt the most recently admitted unfinished request by recomputation, and return it.

        Its blocks are freed and it goes back to the head of the queue; readmitted,
        it prefills its prompt and every token it had generated.
        """
        victim = next(v for v in reversed(self.running) if not v.done)
        self.kv.free(victim.req.request_id)
        self.running.remove(victim)
        victim.stored = 0
        victim.preemptions += 1
        victim.fresh, victim.prefilled = False, 0
        self.waiting.appendleft(victim)
        return victim

    def step(self) -> tuple[float, int, int, int, int] | None:
        """The batch runs one iteration: each request prefills or decodes, then emits one token.

        Returns the iteration's seconds, the requests that ran, the tokens they
        prefilled and decoded, and how many emitted their last token; ``None`` if
        no request could run (every unfinished member of a static batch was preempted).
        """
        active = prefill_tokens = decode_tokens = context = pairs = 0
        for live in self.running:
            if live.done:
                continue
            active += 1
            context += live.stored
            new = live.prefilled if live.fresh else 1
            pairs += attention_pairs(new, live.stored - new)
            if live.fresh:
                prefill_tokens += live.prefilled
            else:
                decode_tokens += 1
        if not active:
            if self.static and self.running:
                self.unfinished = 0
                return None
            raise RuntimeError("the scheduler made no progress")  # unreachable with a validated trace
        processed = prefill_tokens + decode_tokens
        dt = self.seconds(processed, context - processed, pairs)
        self.clock += dt
        # Each request that ran emits one token: a just-prefilled one, its first.
        for live in self.running:
            if live.done:
                continue
            live.generated += 1
            if live.fresh:
                live.fresh = False
                live.prefilled = 0
                if math.isnan(live.first_token_s):
                    live.first_token_s = self.clock
            if live.generated >= live.req.output_len:
                live.done = True
                live.finish_s = self.clock
                self.finished.append(live)
        self.unfinished = active - len(self.finished)
        return dt, active, prefill_tokens, decode_tokens, len(self.finished)

    def finish(self) -> None:
        """Finished requests free their KV memory: at once (continuous), or with the whole batch (static).

        A static batch ends when every member still in it has finished (members
        that were preempted left it for the queue).
        """
        kv, running = self.kv, self.running
        if self.static:
            if not self.unfinished:
                for live in running:
                    kv.free(live.req.request_id)
                running.clear()
        elif self.finished:
            for live in self.finished:
                kv.free(live.req.request_id)
            running[:] = [v for v in running if not v.done]
        self.finished = []

    def per_request(self, requests: list[Request]) -> dict[str, np.ndarray]:
        """The per-request records of :class:`SimulationResult`, in the order of ``requests``."""
        ordered = [self.lives[r.request_id] for r in requests]
        return {
            "request_id": np.array([v.req.request_id for v in ordered]),
            "arrival_s": np.array([v.req.arrival_s for v in ordered]),
            "prompt_len": np.array([v.req.prompt_len for v in ordered]),
            "output_len": np.array([v.req.output_len for v in ordered]),
            "first_token_s": np.array([v.first_token_s for v in ordered]),
            "finish_s": np.array([v.finish_s for v in ordered]),
            "preemptions": np.array([v.preemptions for v in ordered]),
            "recomputed_tokens": np.array([v.recomputed for v in ordered]),
        }


_STEP_FIELDS = ("time_s", "dt", "running", "waiting", "admitted", "preempted", "finished",
                "prefill_tokens", "decode_tokens", "tokens_stored", "slots_reserved")


def _checked_trace(requests: Sequence[Request]) -> list[Request]:
    requests = list(requests)
    if not requests:
        raise ValueError("requests must not be empty")
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"requests must hold Request objects, got {type(r).__name__}")
    if len({r.request_id for r in requests}) != len(requests):
        raise ValueError("request_id values must be unique")
    return requests


def _kv_cache(allocator: str, requests: list[Request], kv_slots: int, block_size: int, max_len: int,
              watermark: float, prefix_caching: bool) -> tuple[PagedAllocator | NaiveAllocator, int]:
    """The allocator over ``kv_slots`` slots and the blocks an admission leaves free; refuses what never fits."""
    if allocator == "paged":
        num_blocks = kv_slots // block_size
        if num_blocks == 0:
            raise ValueError(f"kv_slots ({kv_slots}) is smaller than one block ({block_size})")
        kv = PagedAllocator(num_blocks, block_size, prefix_caching=prefix_caching)
        reserve_blocks = int(watermark * num_blocks)
        # The last generated token's KV is never written, so a request holds at most total_len - 1 tokens.
        longest = max(r.total_len - 1 for r in requests)
        if ceil_div(longest, block_size) > num_blocks:
            raise ValueError(f"a request of {longest + 1} tokens can never fit {num_blocks} blocks of {block_size}")
    else:
        kv = NaiveAllocator(kv_slots, max_len)
        reserve_blocks = 0
    too_long = [r.request_id for r in requests if r.total_len > max_len]
    if too_long:
        raise ValueError(f"{len(too_long)} request(s) exceed max_len = {max_len} (first: id {too_long[0]})")
    return kv, reserve_blocks


def _iteration_seconds(cost: StepModel | None):
    if cost is None:
        return lambda tokens, cached_tokens, pairs: 1.0
    if not isinstance(cost, StepModel) or cost.gpu is None:
        raise TypeError(f"cost must be a roofline.StepModel built with a device, got {cost!r}")
    return cost.seconds


def simulate(requests: Sequence[Request], *, kv_slots: int, policy: str = "continuous",
             allocator: str = "paged", block_size: int = 16, max_len: int = 2048, max_num_seqs: int = 256,
             watermark: float = 0.01, prefix_caching: bool = False,
             cost: StepModel | None = None) -> SimulationResult:
    """Run ``requests`` through a scheduler and a KV allocator of ``kv_slots`` token slots.

    ``policy``: ``"static"`` or ``"continuous"``.  ``allocator``: ``"paged"``
    (``kv_slots // block_size`` blocks) or ``"naive"`` (``kv_slots // max_len``
    regions of ``max_len``).  ``max_num_seqs`` caps the running requests;
    ``watermark`` is the share of blocks a paged admission must leave free, so
    that running requests have room to grow.  ``cost``, a
    :class:`~servebook.roofline.StepModel` with a GPU, turns iterations into
    seconds (default: one second per iteration, i.e. time in iterations).
    """
    choice("policy", policy, POLICIES)
    choice("allocator", allocator, ALLOCATORS)
    kv_slots = whole("kv_slots", kv_slots, 1)
    block_size = whole("block_size", block_size, 1)
    max_len = whole("max_len", max_len, 1)
    max_num_seqs = whole("max_num_seqs", max_num_seqs, 1)
    watermark = interval("watermark", watermark, 0, 1, include_high=False)
    prefix_caching = flag("prefix_caching", prefix_caching)
    requests = _checked_trace(requests)
    kv, reserve_blocks = _kv_cache(allocator, requests, kv_slots, block_size, max_len, watermark, prefix_caching)
    server = _Server(requests, kv, static=policy == "static", max_num_seqs=max_num_seqs,
                     reserve_blocks=reserve_blocks, seconds=_iteration_seconds(cost))
    rows = []  # one per iteration, in the order of _STEP_FIELDS
    # The phases, looked up once: this loop runs once per iteration, up to millions of times.
    arrive, admit, schedule, step, finish = server.arrive, server.admit, server.schedule, server.step, server.finish
    while server.busy:
        if not arrive():
            continue  # the server was idle until the next arrival
        admitted = admit()
        preempted = schedule()
        ran = step()
        if ran is not None:
            dt, running, prefill_tokens, decode_tokens, finished = ran
            rows.append((server.clock, dt, running, len(server.waiting), admitted, preempted, finished,
                         prefill_tokens, decode_tokens, kv.tokens_stored, kv.slots_reserved))
        finish()
    steps = {name: np.asarray(column) for name, column in zip(_STEP_FIELDS, zip(*rows, strict=True), strict=True)}
    config = dict(kv_slots=kv_slots, block_size=block_size, max_len=max_len, max_num_seqs=max_num_seqs,
                  watermark=watermark, prefix_caching=prefix_caching)
    return SimulationResult(policy, allocator, kv.slots_total, steps, server.per_request(requests), config)
