"""The running requests that are decoding, advanced in work proportional to events, not to tokens.

A decoding request does the same thing every step: it writes the token it
emitted last into its KV cache and emits the next one.  The cohort counts those
steps instead of doing them, and does a token's work only at the steps where it
shows outside the request:

- *take*: the token to write starts a block, so the block is taken from the
  pool this step (or, when none is free, the scheduler preempts);
- *finish*: the request emits its last token.

Events wait in buckets keyed by step and run in the order the requests were
admitted, the order in which V1's loop visits them.  :meth:`DecodeCohort.settle`
brings one request's counters, its writes into the allocator and the step of
each token it emitted up to date; whoever reads a request does so first.  The
state that comes out is the one writing token by token gives, block for block
and hash for hash: the simulator's tests run both and compare every record.

With prefix caching, a block that a decode fills is hashed when its request is
settled (it leaves the cohort: preempted, finished, or joined by a prefill),
not at the step that fills it, and no record can tell.  Such a block holds a
token the request generated, and a request's ids are its own
(:meth:`~servebook.batching.Request.token`): only that request can ask for its
hash, after a preemption, when it has left the cohort; and a block's place in
the free queue is set when it is freed, after the settle.  Without prefix
caching, a request that leaves to be freed (preempted or finished) skips the
writes: nothing reads a block's content then, and the step's record counts the
tokens it held all the same.
"""

from __future__ import annotations

from array import array

from ..paging import PagedAllocator


class TokenStream:
    """A request's token ids by position, sliced without building the stream before the slice.

    A slice past the request's shared prefix is a ``range`` (its own ids are
    consecutive), which a block keeps as it is.  ``length`` is how many
    positions the stream has so far (the request's ``known`` tokens), which
    ``len`` and iteration see.
    """

    __slots__ = ("req", "own_from", "own_base", "length")

    def __init__(self, req) -> None:
        self.req = req
        self.own_from = req.prefix_len if req.prefix_group >= 0 else 0
        self.own_base = req.token(self.own_from) - self.own_from
        self.length = req.prompt_len

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        return iter(self[0:self.length])

    def __getitem__(self, positions: slice) -> range | list[int]:
        """Positions ``start:stop`` (non-negative; an open end is the stream's)."""
        start, stop = positions.start or 0, positions.stop
        if stop is None:
            stop = self.length
        if start >= self.own_from:
            return range(self.own_base + start, self.own_base + stop)
        return self.req.token_range(start, stop)


class DecodeCohort:
    """The decoding members of a running batch, their pending events and two sums the step model needs.

    ``context`` is the sum over members of the tokens each had computed when
    the current step began (what the step's decodes attend to);
    ``pending_writes`` the tokens members have computed that the allocator has
    not been told of yet (they count as stored: a step writes every decode).
    A member's fields hold at the step ``live.since``; ``live.epoch`` changes
    whenever it leaves, so events it left behind are ignored.
    """

    __slots__ = ("kv", "block_size", "token_steps", "members", "buckets", "finishing", "context",
                 "written", "counting")

    def __init__(self, kv: PagedAllocator, token_steps: array) -> None:
        self.kv = kv
        self.block_size = kv.block_size
        self.token_steps = token_steps
        self.members: dict = {}  # live -> None: a set in the order of joining
        self.buckets: dict[int, list[tuple]] = {}    # step -> [(order, epoch, live)]: its takes
        self.finishing: dict[int, list[tuple]] = {}  # step -> [(order, epoch, live)]
        self.context = 0
        self.written = 0  # sum over members of the tokens the allocator holds for them
        self.counting = array("l", range(1024))  # 0, 1, 2, ...: runs of steps are sliced from it, at C speed

    @property
    def pending_writes(self) -> int:
        return self.context - self.written

    def _at(self, bucket: dict, step: int, event: tuple) -> None:
        events = bucket.get(step)
        if events is None:
            bucket[step] = [event]
        else:
            events.append(event)

    def join(self, live, step: int) -> None:
        """``live``, whose prompt is computed and written, decodes from ``step`` on."""
        bs, computed = self.block_size, live.computed
        live.since, live.written = step, computed
        live.epoch += 1
        self.members[live] = None
        self.context += computed
        self.written += computed
        last = live.last_step = step + live.req.output_len - live.generated - 1
        take = step + (-computed) % bs           # the step that writes the next block's first position
        if take <= last:
            self._at(self.buckets, take, (live.order, live.epoch, live))
        self._at(self.finishing, last, (live.order, live.epoch, live))

    def due(self, step: int) -> list[tuple]:
        """This step's takes, ``(order, epoch, live)`` in the order of admission (stale ones included)."""
        events = self.buckets.pop(step, ())
        if len(events) > 1:
            events.sort()
        return events

    def take(self, live, step: int) -> None:
        """``live`` takes the block its token at ``step`` starts, and books its next take, a block later.

        A take that finds no block raises :class:`~servebook.paging.OutOfBlocks`, changing nothing.
        """
        self.kv._grow(live.req.request_id)  # the token itself is written later, with the others
        following = step + self.block_size
        if following <= live.last_step:
            self._at(self.buckets, following, (live.order, live.epoch, live))

    def _write(self, live, stop: int) -> None:
        if stop > live.written:
            self.kv._write_through(live.req.request_id, live.view, stop)
            self.written += stop - live.written
            live.written = stop

    def finished(self, step: int) -> list:
        """The members that emit their last token at ``step``, in the order of admission."""
        events = self.finishing.pop(step, ())
        return [live for _, epoch, live in sorted(events) if live.epoch == epoch]

    def advance(self) -> None:
        """The members have run one more step: each computed one more token."""
        self.context += len(self.members)

    def settle(self, live, step: int, write: bool = True) -> None:
        """Bring ``live`` to the start of ``step``: counters, token steps, and (with ``write``) every write so far."""
        steps = step - live.since
        if steps:
            first = live.offset + live.generated
            counting = self.counting
            if step > len(counting):
                counting.extend(range(len(counting), 2 * step))
            self.token_steps[first:first + steps] = counting[live.since:step]
            live.computed += steps
            live.generated += steps
            live.known += steps
            live.since = step
        if write:
            self._write(live, live.computed)

    def leave(self, live, step: int, write: bool = True) -> int:
        """``live`` stops decoding lazily at the start of ``step`` (settled first).

        Without ``write``, the tokens it computed since its last write are not
        passed to the allocator: for a request whose blocks are freed before
        anyone could read them (without prefix caching, nothing reads a block's
        content).  Returns how many tokens that leaves out.
        """
        self.settle(live, step, write)
        del self.members[live]
        self.context -= live.computed
        self.written -= live.written
        live.epoch += 1
        return live.computed - live.written

    def leave_all(self, step: int) -> None:
        """Every member leaves at the start of ``step``; every event booked is stale then."""
        for live in list(self.members):
            self.leave(live, step)
        self.buckets.clear()
        self.finishing.clear()
