"""The simulated server: vLLM 0.33.0's V1 scheduling loop, one step at a time, and :func:`simulate`.

Each step runs the phases of ``Scheduler.schedule`` and ``update_from_output``
in ``vllm/v1/core/sched/scheduler.py`` (vLLM 0.33.0, FCFS), restated:

1. *arrive*: requests whose time has come join the waiting queue;
2. *schedule the running*, in the order they were admitted, from one token
   budget (``max_num_batched_tokens``): each takes the tokens it still has to
   compute (one for a decode, the rest of its prompt, or a chunk of it); when
   its new tokens need a block and none is free, the *last* running request is
   preempted by recomputation (its blocks freed, back to the head of the
   queue), until the blocks fit or the request preempted itself, which ends
   this phase;
3. *admit the waiting*, only in a step that preempted nothing, while the
   budget lasts and fewer than ``max_num_seqs`` run: the prefix cache is
   looked up, the whole sequence must fit (with the watermark to spare while
   others run), and the first chunk is scheduled (without chunked prefill a
   prompt longer than the budget waits);
4. *step*: every scheduled request computes its tokens in one forward pass,
   timed by the library's one step model; a request that has computed all it
   knows emits one token;
5. *finish*: a request that emitted its last token frees its blocks.

A full block enters the prefix cache when its step is scheduled (the
allocator does it as the tokens are written), so a request admitted later in
the same step may hit it, and no preempted request leaves cached blocks
behind that nobody computed.  (The decode cohort hashes the blocks its
decodes fill later, when it settles their request, which no record shows.)

A step in which every running request decodes runs on the
:class:`~servebook.batching.cohort.DecodeCohort`: its cost is the step's
events, not its requests, and its records are those of visiting every request.
A run of *quiet* steps (every running request decodes and none is admitted:
arrivals only lengthen the queue, preemptions and finishes only shorten the
batch) goes through one loop, :meth:`_Server.decode_quietly`, instead of the
five phases.

Differences on purpose: static batching (admit only into an empty server, free
a batch's memory when all its members have finished) and the naive allocator
are teaching baselines that vLLM does not have; priority scheduling,
speculative decoding, ``long_prefill_token_threshold`` (0 by default) and
asynchronous scheduling are left out.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..checks import choice, flag, interval, whole
from ..paging import NaiveAllocator, OutOfBlocks, PagedAllocator
from ..roofline import StepModel, attention_pairs
from ..units import ceil_div
from .cohort import DecodeCohort, TokenStream
from .results import SimulationResult
from .traces import Request, checked_trace

POLICIES = ("static", "continuous")
# Decoding requests advance as a cohort (see _Server); False visits every request every step, which the
# tests use as the reference the cohort must agree with record for record.
LAZY_DECODES = True
ALLOCATORS = ("paged", "naive")


class _Live:
    """A request inside the server."""

    __slots__ = ("req", "generated", "known", "computed", "hashes", "new", "prefilling", "done",
                 "scheduled_s", "first_token_s", "finish_s", "preemptions", "recomputed", "offset",
                 "order", "since", "written", "epoch", "last_step", "view")

    def __init__(self, req: Request, offset: int) -> None:
        self.req = req
        self.generated = 0        # output tokens emitted so far
        self.known = req.prompt_len  # tokens of its stream so far: the prompt and every token emitted
        self.computed = 0         # tokens whose keys and values are in the cache
        self.hashes: list[bytes] = []  # block hashes of its stream, kept across preemptions
        self.new = 0              # tokens scheduled in the current step
        self.prefilling = False   # computing a prompt (or recomputing after a preemption)
        self.done = False
        self.scheduled_s = math.nan
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.preemptions = 0
        self.recomputed = 0       # tokens prefilled again after preemptions
        self.offset = offset      # where its tokens' steps start in the server's token_steps
        self.order = 0            # its place in the running batch: admissions so far when it was admitted
        # Kept by the decode cohort: the step its fields hold at, tokens written, departures, last step.
        self.since = self.written = self.epoch = self.last_step = 0
        self.view = TokenStream(req)

    def tokens(self) -> TokenStream:
        """Its stream so far, as a view that slices it without building it (a waiting request asks every step)."""
        self.view.length = self.known
        return self.view


class _Server:
    """The queues, the batch and the KV allocator between steps; one method per phase.

    With ``lazy``, the running requests that decode are a :class:`DecodeCohort`
    and a step in which every running request decodes costs its events, not
    its requests (:meth:`schedule_decodes`); any other step settles the cohort
    and visits every request (:meth:`schedule_running`).  Both give the same
    records.
    """

    def __init__(self, requests: list[Request], kv: PagedAllocator | NaiveAllocator, *, static: bool,
                 max_num_seqs: int, budget: int, chunked: bool, reserve_blocks: int, seconds, lazy: bool) -> None:
        self.kv = kv
        # The paged allocator's own path for streams it need not check again (the trace was checked once).
        self.allocate = kv._allocate if isinstance(kv, PagedAllocator) else kv.allocate
        self.static = static
        self.max_num_seqs = max_num_seqs
        self.budget = budget                   # tokens per step
        self.chunked = chunked
        self.reserve_blocks = reserve_blocks   # blocks an admission leaves free while others run (the watermark)
        self.seconds = seconds                 # (tokens, cached_tokens, pairs, logits_tokens) -> seconds of a step
        offsets = [0]
        for r in requests:
            offsets.append(offsets[-1] + r.output_len)
        self.lives = {r.request_id: _Live(r, o) for r, o in zip(requests, offsets[:-1], strict=True)}
        self.token_steps = array("l", bytes(8 * offsets[-1]))  # the step at which each output token came out
        self.cohort = DecodeCohort(kv, self.token_steps) if lazy else None
        # Without prefix caching no block's content is ever read: a request that leaves the cohort to be freed
        # need not have the tokens it decoded since its last write passed to the allocator first.
        self.caching = kv_caches(kv)
        self.unwritten = 0   # tokens of this step's finished members held but not written
        self.pending = deque(requests)
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []         # in the order of admission
        self.scheduled: list[_Live] = []       # this step's, in scheduling order (the cohort's apart)
        self.blocked: _Live | None = None      # the head of the queue, known not to fit until something changes
        self.admissions = 0
        self.any_done = False
        self.clock = requests[0].arrival_s
        self.n_steps = 0

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

    def schedule(self) -> tuple[int, int, int, int]:
        """This step's batch: the running requests, then (in a step that preempted none) the waiting ones.

        Returns how many requests were preempted and admitted, the prompt tokens
        the admissions took from the prefix cache, and how many requests the step runs.
        """
        cohort = self.cohort
        members = cohort.members if cohort is not None else ()
        if members and len(members) == len(self.running) <= self.budget:  # every one decodes
            preempted = self.schedule_decodes()
            left, remember = self.budget - len(members), True
        else:
            left, preempted = self.schedule_running()
            remember = False
        waiting = self.waiting
        if preempted or not waiting or waiting[0] is self.blocked:
            admitted = cached = 0
        else:
            admitted, cached = self.admit(left, remember)
        return preempted, admitted, cached, len(self.scheduled) + len(members)

    def schedule_decodes(self) -> int:
        """The cohort's step: its events in order of admission, preempting when a take finds no block.

        Every member that is not preempted decodes one token; returns how many were preempted.
        """
        cohort, step, preempted = self.cohort, self.n_steps, 0
        take = cohort.take
        for _, epoch, live in cohort.due(step):
            if live.epoch != epoch:
                continue  # it left the cohort after this event was booked
            while True:
                try:
                    take(live, step)
                    break
                except OutOfBlocks:
                    preempted += 1
                    if self.preempt() is live:
                        return preempted  # it was the last running request: nothing after it runs
        return preempted

    def decode_quietly(self, rows: list) -> None:
        """Run the quiet steps from here on in one loop, appending their records to ``rows``.

        A step is quiet when every running request decodes (they are the
        cohort) and none is admitted: the cap or the budget leaves no room, or
        the head of the queue does not fit, and arrivals only lengthen the
        queue.  A take that finds no block preempts the last running requests
        (by the phases' own :meth:`schedule_decodes`), and members that emit
        their last token leave and are freed (by :meth:`_finish_members` and
        :meth:`finish`): the batch only shrinks.  The record of such a step
        follows from the clock, the queue, the cohort and the pool: the phases
        would give the same.  The loop stops before the first step that may
        admit a request, and when the batch is empty; the phases run those.
        """
        while self._quiet_steps(rows):
            pass   # a member left the batch: its state is read again

    def _quiet_steps(self, rows: list) -> bool:
        """:meth:`decode_quietly`'s steps while the batch keeps its members; ``True`` after a step in which
        some left it (preempted or finished: more quiet steps may follow), ``False`` before a step that is not quiet."""
        cohort, waiting, pending, lives = self.cohort, self.waiting, self.pending, self.lives
        n = len(cohort.members)
        if not n or n != len(self.running) or n > self.budget:
            return False   # an empty batch, or one with a prompt to compute: the phases run the step
        # While the batch keeps its members, the cap and the budget left to admissions stay as they are, and a
        # head of the queue that does not fit cannot come to fit: the blocks available only shrink, and its hits too.
        closed = n >= self.max_num_seqs or n >= self.budget
        kv, pool, seconds = self.kv, self.kv.pool, self.seconds
        buckets, finishing, take = cohort.buckets, cohort.finishing, cohort.take
        append = rows.append
        arrival = pending[0].arrival_s if pending else math.inf
        stored = pool.tokens_in_use - cohort.written   # plus the context: what the cohort's members hold
        step, clock, context = self.n_steps, self.clock, cohort.context
        # Blocks available, and the slots of the blocks in use: they change only with takes and frees.
        blocks, bs = pool.num_blocks, kv.block_size
        available = pool.num_available
        reserved = (blocks - available) * bs
        left = False   # whether a member left the batch in this step
        while not left:
            ends = finishing.get(step)
            if ends is not None and not any(live.epoch == epoch for _, epoch, live in ends):
                del finishing[step]   # every one of them left the cohort since
                ends = None
            while arrival <= clock:   # arrive()
                waiting.append(lives[pending.popleft().request_id])
                arrival = pending[0].arrival_s if pending else math.inf
            if not closed and waiting and waiting[0] is not self.blocked:
                if not self.head_waits(self.budget - n):
                    break   # it may be admitted: the phases run this step
                self.blocked = waiting[0]
            preempted = 0
            events = buckets.get(step)
            if events:
                if len(events) > available:
                    events = [e for e in events if e[2].epoch == e[1]]   # the stale ones take nothing
                if len(events) > available:   # a take finds no block: the last running requests are preempted
                    self.n_steps, self.clock, cohort.context = step, clock, context
                    # (one of them is left: a request running alone always finds a block, none being longer
                    # than the pool, so the member preempting itself is never the only one)
                    preempted = self.schedule_decodes()
                    n, context = len(cohort.members), cohort.context
                    stored = pool.tokens_in_use - cohort.written
                    left = True
                else:
                    del buckets[step]
                    if len(events) > 1:
                        events.sort()
                    for _, epoch, live in events:
                        if live.epoch == epoch:
                            take(live, step)
                available = pool.num_available
                reserved = (blocks - available) * bs
            dt = seconds(n, context, context + n, n)
            clock += dt
            context += n
            if ends is None:
                append((clock, dt, n, len(waiting), 0, preempted, 0, 0, n, 0, stored + context, reserved, available, n))
            else:   # members emit their last token: they leave, done, and are freed, as step() and finish() do it
                self.n_steps, self.clock, cohort.context = step, clock, context
                finished = self._finish_members()
                held = self.tokens_held()
                self.any_done = finished > 0
                left = left or self.any_done
                self.finish()
                append((clock, dt, n, len(waiting), 0, preempted, finished, 0, n, 0, held, reserved,
                        pool.num_available, len(self.running)))
                context = cohort.context
            step += 1
        self.n_steps, self.clock, cohort.context = step, clock, context
        return left

    def tokens_held(self) -> int:
        """The tokens the KV cache holds now: the allocator's, the cohort's not yet passed to it, and those
        of this step's finished members that were never passed (they count until the frees)."""
        held = self.kv.tokens_stored + self.unwritten
        return held if self.cohort is None else held + self.cohort.pending_writes

    def head_waits(self, left: int) -> bool:
        """Whether :meth:`admit` would refuse the head of the queue now, with ``left`` tokens of budget.

        It is refused when its blocks (with the watermark) are not available,
        or, without chunked prefill, when what it must compute exceeds the budget.
        """
        live = self.waiting[0]
        fits, cached = self.kv._would_fit(live.tokens(), live.hashes, self.reserve_blocks if self.running else 0)
        return not fits or (not self.chunked and live.known - cached > left)

    def schedule_running(self) -> tuple[int, int]:
        """Give the running requests their tokens for this step, preempting when blocks run out.

        Returns the tokens left in the budget and how many requests were preempted.
        """
        if self.cohort is not None:
            self.cohort.leave_all(self.n_steps)
        self.blocked = None
        kv, running, scheduled = self.kv, self.running, self.scheduled
        append, write = kv.append, self._write
        budget, preempted, i = self.budget, 0, 0
        while i < len(running) and budget > 0:
            live = running[i]
            if live.done:  # a finished member of a static batch, waiting for the others
                i += 1
                continue
            new = live.known - live.computed
            if new > budget:
                new = budget
            while True:
                try:
                    if new == 1 and not live.prefilling:  # a decode: the token emitted last
                        append(live.req.request_id, live.req.token(live.computed))
                    else:
                        write(live, new)
                    break
                except OutOfBlocks:
                    preempted += 1
                    if self.preempt() is live:
                        return budget, preempted
            live.new = new
            live.computed += new
            scheduled.append(live)
            budget -= new
            i += 1
        return budget, preempted

    def _write(self, live: _Live, new: int) -> None:
        """The next ``new`` tokens of a prompt (a chunk, or a recomputation) into the cache."""
        if isinstance(self.kv, PagedAllocator):   # the stream is the simulator's own: not checked again
            self.kv._write_through(live.req.request_id, live.tokens(), live.computed + new)
        else:
            self.kv.extend(live.req.request_id, live.tokens(), new)

    def preempt(self) -> _Live:
        """Preempt the last running unfinished request by recomputation, and return it.

        Its blocks are freed and it goes back to the head of the queue; readmitted,
        it prefills its prompt and every token it had generated.
        """
        running = self.running
        victim = running[-1]
        if victim.done:  # a finished member of a static batch, waiting for the others
            victim = next(v for v in reversed(running) if not v.done)
        if self.cohort is not None and victim in self.cohort.members:
            self.cohort.leave(victim, self.n_steps, write=self.caching)   # its blocks are freed now
        self.kv.free(victim.req.request_id)
        if running[-1] is victim:
            running.pop()
        else:
            running.remove(victim)
        victim.computed = victim.new = 0
        victim.prefilling = False
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        self.blocked = None
        return victim

    def admit(self, budget: int, remember: bool = False) -> tuple[int, int]:
        """Waiting requests join the batch, in order, while budget, cap and blocks allow.

        Returns how many were admitted and the prompt tokens they took from the prefix cache.
        Static batching admits only into an empty server.  With ``remember`` (a
        step of decodes only), a head of the queue that does not fit is
        remembered: until a request leaves or joins the batch, the blocks free
        can only shrink and its cached prefix too, so it would not fit next step either.
        """
        if self.static and self.running:
            return 0, 0
        kv, waiting, running, allocate = self.kv, self.waiting, self.running, self.allocate
        admitted = cached_total = 0
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            live = waiting[0]
            if live is self.blocked:
                break
            req, known = live.req, live.known
            tokens = live.tokens()
            reserve = self.reserve_blocks if running else 0
            if not self.chunked:  # a prompt that does not fit the budget whole waits
                cached = kv.cached_prefix(tokens, live.hashes) if self.caching else 0
                if known - cached > budget:
                    if remember and not admitted:  # the budget next step is this one's
                        self.blocked = live
                    break
            try:
                cached = allocate(req.request_id, tokens, max_new=None if budget == math.inf else budget,
                                  reserve=reserve, hashes=live.hashes)
            except OutOfBlocks:
                if remember:
                    self.blocked = live
                break
            new = min(known - cached, budget)
            waiting.popleft()
            if math.isnan(live.scheduled_s):
                live.scheduled_s = self.clock
            live.computed, live.new, live.prefilling = cached + new, new, True
            if live.preemptions:
                live.recomputed += known - cached
            self.admissions += 1
            live.order = self.admissions
            running.append(live)
            self.scheduled.append(live)
            budget -= new
            admitted += 1
            cached_total += cached
        return admitted, cached_total

    def step(self) -> tuple[float, int, int, int]:
        """The scheduled requests run one forward pass; those that computed all they know emit a token.

        Returns the step's seconds, the tokens prefilled and decoded, and how many emitted their last token.
        """
        cohort = self.cohort
        n_cohort = 0 if cohort is None else len(cohort.members)
        prefill = decode = context = pairs = 0
        for live in self.scheduled:
            new = live.new
            if live.prefilling:
                prefill += new
            else:
                decode += new
            before = live.computed - new
            context += before
            pairs += attention_pairs(new, before)
        if n_cohort:  # each member attends to what it had computed, and to its new token
            decode += n_cohort
            context += cohort.context
            pairs += cohort.context + n_cohort
        n_scheduled = len(self.scheduled) + n_cohort
        dt = self.seconds(prefill + decode, context, pairs, n_scheduled) if n_scheduled else 0.0
        self.clock += dt
        finished = 0
        if n_cohort:
            cohort.advance()  # every member emitted a token
            if self.n_steps in cohort.finishing:
                finished = self._finish_members()
        for live in self.scheduled:
            live.new = 0
            if live.computed < live.known:
                continue  # a chunk of a prompt: its last position is not the end yet
            live.prefilling = False
            self.token_steps[live.offset + live.generated] = self.n_steps
            live.generated += 1
            live.known += 1
            if live.generated == 1:
                live.first_token_s = self.clock
            if live.generated >= live.req.output_len:
                live.done = True
                live.finish_s = self.clock
                finished += 1
            elif cohort is not None:
                cohort.join(live, self.n_steps + 1)
        self.any_done = finished > 0
        self.n_steps += 1
        return dt, prefill, decode, finished

    def _finish_members(self) -> int:
        """The cohort's members that emitted their last token this step leave it, done."""
        cohort, after = self.cohort, self.n_steps + 1
        done = cohort.finished(self.n_steps)
        for live in done:
            # freed at the end of this step; its record counts what it held all the same
            self.unwritten += cohort.leave(live, after, write=self.caching)
            live.done = True
            live.finish_s = self.clock
        return len(done)

    def finish(self) -> None:
        """Finished requests free their KV memory: at once (continuous), or with the whole batch (static)."""
        kv, running = self.kv, self.running
        if self.static:
            if running and all(v.done for v in running):
                for live in running:
                    kv.free(live.req.request_id)
                running.clear()
        elif self.any_done:
            for live in running:  # the order they were scheduled in
                if live.done:
                    kv.free(live.req.request_id)
            running[:] = [v for v in running if not v.done]
            self.blocked = None
        self.scheduled = []
        self.unwritten = 0


def kv_caches(kv: PagedAllocator | NaiveAllocator) -> bool:
    """Whether ``kv`` looks prompts up in a prefix cache."""
    return isinstance(kv, PagedAllocator) and kv.prefix_caching


_STEP_FIELDS = ("time_s", "dt", "running", "waiting", "admitted", "preempted", "finished",
                "prefill_tokens", "decode_tokens", "cached_tokens", "tokens_stored", "slots_reserved",
                "blocks_free", "in_flight")
# One record per step, read into columns in one pass (a column at a time from Python tuples costs
# three times as long on a long run, np.array of the tuples twice as long as np.fromiter):
# seconds in float64, counts in int64.
_STEP_RECORD = np.dtype([(name, np.float64 if name in ("time_s", "dt") else np.int64) for name in _STEP_FIELDS])


def _kv_cache(allocator: str, requests: list[Request], kv_slots: int, block_size: int, max_len: int,
              watermark: float, prefix_caching: bool) -> tuple[PagedAllocator | NaiveAllocator, int]:
    """The allocator over ``kv_slots`` slots and the blocks an admission leaves free; refuses what never fits."""
    if allocator == "paged":
        num_blocks = kv_slots // block_size
        if num_blocks == 0:
            raise ValueError(f"kv_slots ({kv_slots}) is smaller than one block ({block_size})")
        kv = PagedAllocator(num_blocks, block_size, prefix_caching=prefix_caching)
        # The last generated token's KV is never written, so a request holds at most total_len - 1 tokens.
        longest = max(r.total_len - 1 for r in requests)
        if ceil_div(longest, block_size) > num_blocks:
            raise ValueError(f"kv_slots: a request of {longest + 1} tokens can never fit "
                             f"{num_blocks} blocks of {block_size}")
        return kv, int(watermark * num_blocks)  # vLLM: int(watermark * num_blocks)
    return NaiveAllocator(kv_slots, max_len), 0


def _step_seconds(cost: StepModel | None, max_len: int):
    if cost is None:
        return lambda tokens, cached_tokens, pairs, logits_tokens: 1.0
    if not isinstance(cost, StepModel) or cost.gpu is None:
        raise TypeError(f"cost must be a roofline.StepModel built with a device, got {cost!r}")
    context = cost.spec.max_seq_len
    if context is not None and max_len > context:
        raise ValueError(f"max_len ({max_len}) exceeds {cost.spec.name}'s context of {context} tokens")
    span = cost.spec.local_span
    if span is not None and max_len > span:
        # a step's counts are sums over its requests, and what a window keeps is per request: not tracked here
        raise ValueError(f"max_len ({max_len}) exceeds the {span}-token span of {cost.spec.name}'s "
                         f"{cost.spec.local_kind} layers: simulate times those layers only when no request "
                         f"outgrows one span (max_len at most {span}), where they read what global layers read")
    return cost.timer(local_as_global=span is not None)


def simulate(requests: Sequence[Request], *, kv_slots: int, policy: str = "continuous",
             allocator: str = "paged", block_size: int = 16, max_len: int = 2048, max_num_seqs: int = 256,
             max_num_batched_tokens: int | None = 2048, chunked_prefill: bool = True, watermark: float = 0.0,
             prefix_caching: bool = False, cost: StepModel | None = None) -> SimulationResult:
    """Run ``requests`` (in order of arrival) through the V1 loop and a KV allocator of ``kv_slots`` slots.

    ``policy``: ``"static"`` or ``"continuous"``.  ``allocator``: ``"paged"``
    (``kv_slots // block_size`` blocks) or ``"naive"`` (``kv_slots // max_len``
    regions of ``max_len``).  ``max_num_seqs`` caps the running requests and
    ``max_num_batched_tokens`` the tokens of a step (``None``: no budget);
    their defaults, chunked prefill on and no watermark are vLLM 0.33.0's for
    an A100 server (:func:`servebook.batching.vllm_limits` gives them per
    device).  ``prefix_caching`` is off by default, unlike vLLM 0.33.0, which
    turns it on for every model that supports it: the first chapters teach the
    pool without it.  ``watermark`` is the share of blocks an admission leaves
    free while others run.  ``max_len`` is the context: no request may be longer.
    ``cost``, a :class:`~servebook.roofline.StepModel` with a GPU, turns steps
    into seconds (default: one second per step, i.e. time in steps); for a
    model with sliding or chunked layers, ``max_len`` must fit one window (or
    chunk), so that those layers read what the global ones read.
    """
    choice("policy", policy, POLICIES)
    choice("allocator", allocator, ALLOCATORS)
    kv_slots = whole("kv_slots", kv_slots, 1)
    block_size = whole("block_size", block_size, 1)
    max_len = whole("max_len", max_len, 1)
    max_num_seqs = whole("max_num_seqs", max_num_seqs, 1)
    budget = math.inf if max_num_batched_tokens is None else whole("max_num_batched_tokens", max_num_batched_tokens, 1)
    chunked_prefill = flag("chunked_prefill", chunked_prefill)
    if not chunked_prefill and budget < max_len:
        raise ValueError(f"max_num_batched_tokens ({max_num_batched_tokens}) is below max_len ({max_len}): "
                         "without chunked prefill the longest prompt could never be scheduled")
    watermark = interval("watermark", watermark, 0, 1, include_high=False)
    prefix_caching = flag("prefix_caching", prefix_caching)
    requests = checked_trace(requests, max_len)
    seconds = _step_seconds(cost, max_len)
    kv, reserve_blocks = _kv_cache(allocator, requests, kv_slots, block_size, max_len, watermark, prefix_caching)
    server = _Server(requests, kv, static=policy == "static", max_num_seqs=max_num_seqs, budget=budget,
                     chunked=chunked_prefill, reserve_blocks=reserve_blocks, seconds=seconds,
                     lazy=LAZY_DECODES and policy == "continuous" and allocator == "paged")
    rows = _run(server)
    records = np.fromiter(rows, dtype=_STEP_RECORD, count=len(rows))
    steps = {name: np.ascontiguousarray(records[name]) for name in _STEP_FIELDS}
    config = dict(kv_slots=kv_slots, block_size=block_size, max_len=max_len, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=max_num_batched_tokens, chunked_prefill=chunked_prefill,
                  watermark=watermark, prefix_caching=prefix_caching)
    return SimulationResult.of(policy, allocator, kv.slots_total, steps, requests, server, config)


def _run(server: _Server) -> list[tuple]:
    """The loop over steps; one row per step, in the order of ``_STEP_FIELDS``."""
    kv, cohort, rows = server.kv, server.cohort, []
    paged = isinstance(kv, PagedAllocator)
    # The phases, looked up once: this loop runs once per step, up to millions of times.
    arrive, schedule, step, finish = server.arrive, server.schedule, server.step, server.finish
    quiet = server.decode_quietly if cohort is not None else None
    while True:
        if quiet is not None:
            quiet(rows)   # may run the server to its end
        if not server.busy:
            break
        if not arrive():
            continue  # the server was idle until the next arrival
        preempted, admitted, cached, n_scheduled = schedule()
        dt, prefill, decode, finished = step()
        stored = server.tokens_held()   # before any frees
        reserved = kv.slots_reserved
        finish()
        free = kv.pool.num_available if paged else kv.regions_free
        rows.append((server.clock, dt, n_scheduled, len(server.waiting), admitted, preempted, finished,
                     prefill, decode, cached, stored, reserved, free, len(server.running)))
    return rows
