"""The allocator against a nano-vllm-style block manager, and the simulator against its target.

Run from the repository root:  python benchmarks/bench_scheduler.py [--repeats 5] [--requests 10000]

1. Allocator, in the call pattern of a scheduler: admit a prompt (hashing its
   full blocks and looking up the prefix cache), one decoded token per step,
   free the request when it finishes.  A seeded sequence of those calls (chat
   requests, most starting with one of four system prompts) is recorded once
   and replayed, with prefix caching on, against pools of 768 and 16,384
   blocks by:

   - ``PagedAllocator`` *by blocks*: the calls the book's simulator makes (its
     decode cohort takes a block when a token starts one and writes, and
     hashes, what its decodes filled before the free; admission through
     ``_allocate``, which does not check the simulator's own streams again);
   - ``PagedAllocator`` *by tokens*: the public methods, one ``append`` per
     decoded token (every argument checked);
   - a block manager in nano-vllm's design, restated here in our own words: a
     deque of free block ids, a dict from a full block's hash to its id, a
     reference count per block; a cache hit on a freed block takes it back
     out of the middle of the deque, which costs time in proportion to the
     deque's length.  One call per decoded token (nano-vllm's scheduler makes
     two, a check and the append: folding them into one favours this
     contender).  Every contender hashes with the same SHA-256 of the same bytes.

2. Simulator: :func:`servebook.batching.simulate` on
   ``sample_trace(n, seed=0, arrival_rate=50)`` over 768 blocks of 16 with the
   step model (latency records included), prefix caching off and on, with its
   decode cohort and, as the reference, with the same loop visiting every
   running request every step (``simulator.LAZY_DECODES = False``; the tests
   check that both give every record the same).

Contenders are interleaved (A, B, A, B, ...) and repeated; each line gives the
median CPU time of this process (``time.process_time``, so other jobs on a
shared machine inflate it less) and the spread (min to max) over the repeats.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
from array import array
from collections import deque

from servebook import batching, roofline
from servebook.batching import simulator
from servebook.paging import PagedAllocator
from timing import interleaved, line

ADMIT, APPEND, FREE, GROW, WRITE = range(5)
BLOCK_SIZE = 16


class DequeBlockManager:
    """nano-vllm's design, in our own words: a deque free list, a hash map, reference counts."""

    def __init__(self, num_blocks: int, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.ref = [0] * num_blocks
        self.hash = [b""] * num_blocks
        self.content: list[list[int]] = [[] for _ in range(num_blocks)]
        self.by_hash: dict[bytes, int] = {}
        self.free_ids = deque(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def _take(self, block: int) -> None:
        if self.hash[block] and self.by_hash.get(self.hash[block]) == block:
            del self.by_hash[self.hash[block]]  # its old content is gone
        self.hash[block], self.content[block] = b"", []
        self.ref[block] = 1
        self.free_ids.remove(block)  # O(length of the deque) unless it is at the front

    def _revive(self, block: int) -> None:
        self.ref[block] = 1
        self.free_ids.remove(block)

    def allocate(self, seq: int, tokens: list[int]) -> None:
        bs, table, parent, miss = self.block_size, [], b"", False
        for i in range(-(-len(tokens) // bs)):
            chunk = tokens[i * bs:(i + 1) * bs]
            key = hashlib.sha256(parent + array("q", chunk).tobytes()).digest() if len(chunk) == bs else b""
            block = self.by_hash.get(key, -1) if key else -1
            miss = miss or block < 0 or self.content[block] != chunk
            if miss:
                block = self.free_ids[0]
                self._take(block)
            elif self.ref[block]:
                self.ref[block] += 1
            else:
                self._revive(block)
            if key:
                self.hash[block], self.content[block], self.by_hash[key] = key, chunk, block
                parent = key
            else:
                self.content[block] = list(chunk)
            table.append(block)
        self.tables[seq], self.lengths[seq] = table, len(tokens)

    def append(self, seq: int, token: int) -> None:
        table, n = self.tables[seq], self.lengths[seq]
        if n % self.block_size == 0:
            block = self.free_ids[0]
            self._take(block)
            table.append(block)
        last = table[-1]
        self.content[last].append(token)
        self.lengths[seq] = n + 1
        if len(self.content[last]) == self.block_size:
            parent = self.hash[table[-2]] if len(table) > 1 else b""
            key = hashlib.sha256(parent + array("q", self.content[last]).tobytes()).digest()
            self.hash[last], self.by_hash[key] = key, last

    def free(self, seq: int) -> None:
        for block in reversed(self.tables.pop(seq)):
            self.ref[block] -= 1
            if not self.ref[block]:
                self.free_ids.append(block)
        del self.lengths[seq]


def record_calls(n_requests: int, num_blocks: int = 768, seed: int = 0) -> list[tuple]:
    """The scheduler's calls on a ``num_blocks`` pool: admissions, decode appends, frees.

    A third of the requests are a conversation's next turn: the previous turn's prompt and answer,
    freed by then and cached, then new tokens; their hits revive freed blocks.
    """
    rng = random.Random(seed)
    systems = [[rng.randrange(32000) for _ in range(rng.randrange(64, 256))] for _ in range(4)]
    kv = PagedAllocator(num_blocks, BLOCK_SIZE)  # caching off needs the most blocks: the replays never run out
    calls, live, token, finished = [], deque(), 1, []
    for seq in range(n_requests):
        head = kv_tokens(finished, rng) if finished and rng.random() < 0.33 else \
            (systems[rng.randrange(4)] if rng.random() < 0.8 else [])
        prompt = head + [rng.randrange(32000) for _ in range(rng.randint(10, 200))]
        output = max(1, int(rng.lognormvariate(4.3, 0.8)))
        while live and kv.pool.num_available < -(-(len(prompt) + output) // BLOCK_SIZE) + 8:
            done = live.popleft()
            if kv.num_tokens(done) < 1024:
                finished.append(kv.tokens(done))
            kv.free(done)
            calls.append((FREE, done, None))
        kv.allocate(seq, prompt)
        calls.append((ADMIT, seq, prompt))
        for _ in range(output):
            token += 1
            kv.append(seq, token)
            calls.append((APPEND, seq, token))
        live.append(seq)
    return calls


def by_blocks(calls: list[tuple]) -> tuple[list[tuple], dict[int, list[int]]]:
    """The same calls as the simulator's decode cohort makes them, and each sequence's stream.

    A decoded token costs nothing until it starts a block (the block is taken:
    ``GROW``); the tokens decoded are written (and their full blocks hashed)
    before the free, or at the end for the sequences still running.  (The
    cohort also writes them when the request is preempted or joined by a
    prefill; this trace has no preemption.)
    """
    out, streams = [], {}
    for op, seq, arg in calls:
        if op == ADMIT:
            streams[seq] = list(arg)
            out.append((ADMIT, seq, arg))
        elif op == APPEND:
            stream = streams[seq]
            n = len(stream)
            stream.append(arg)
            if n % BLOCK_SIZE == 0:
                out.append((GROW, seq, None))
        else:
            out.extend([(WRITE, seq, len(streams[seq])), (FREE, seq, None)])
    freed = {seq for op, seq, _ in calls if op == FREE}
    # the sequences still running at the end of the trace are settled, as the simulator's are
    out.extend((WRITE, seq, len(stream)) for seq, stream in streams.items() if seq not in freed)
    return out, streams


def replay_blocks(calls: list[tuple], streams: dict[int, list[int]], kv: PagedAllocator) -> None:
    """:func:`by_blocks`'s calls against the book's allocator, through the methods the simulator calls
    (its streams are its own: they are not checked again at every call, as the public methods check them)."""
    allocate, grow, write, free = kv._allocate, kv._grow, kv._write_through, kv.free
    for op, seq, arg in calls:
        if op == GROW:
            grow(seq)
        elif op == WRITE:
            write(seq, streams[seq], arg)
        elif op == ADMIT:
            allocate(seq, arg)
        else:
            free(seq)


def kv_tokens(finished: list[list[int]], rng: random.Random) -> list[int]:
    """A recent finished conversation, to continue."""
    return finished[-1 - rng.randrange(min(len(finished), 20))]


def replay(calls: list[tuple], kv: PagedAllocator | DequeBlockManager) -> None:
    """The recorded calls against one manager (both take the same three calls)."""
    allocate, append, free = kv.allocate, kv.append, kv.free
    for op, seq, arg in calls:
        if op == APPEND:
            append(seq, arg)
        elif op == ADMIT:
            allocate(seq, arg)
        else:
            free(seq)


def _state(kv: PagedAllocator) -> tuple[int, int, int, int]:
    return kv.pool.num_free, kv.pool.num_cached, kv.pool.num_hashes, kv.prefix_hit_tokens


def bench_allocator(repeats: int, n_requests: int = 1500) -> None:
    calls = record_calls(n_requests)
    blocks_calls, streams = by_blocks(calls)
    print(f"allocator: {len(calls):,} calls of a scheduler's pattern (one per decoded token), prefix caching on;")
    print(f"  the book's simulator makes them as its decode cohort does: {len(blocks_calls):,} calls")
    for blocks in (768, 16_384):
        pools = [PagedAllocator(blocks, BLOCK_SIZE, prefix_caching=True) for _ in range(2)]
        replay(calls, pools[0])
        replay_blocks(blocks_calls, streams, pools[1])
        assert _state(pools[0]) == _state(pools[1])  # the same pool at the end, the same prefix hits
        contenders = {
            "PagedAllocator, by blocks": (lambda b=blocks: PagedAllocator(b, BLOCK_SIZE, prefix_caching=True),
                                          lambda kv: replay_blocks(blocks_calls, streams, kv)),
            "PagedAllocator, by tokens": (lambda b=blocks: PagedAllocator(b, BLOCK_SIZE, prefix_caching=True),
                                          lambda kv: replay(calls, kv)),
            "deque block manager": (lambda b=blocks: DequeBlockManager(b), lambda kv: replay(calls, kv)),
        }
        times = interleaved(contenders, repeats)
        for name, values in times.items():
            print(line(f"  {blocks:>6,} blocks, {name}", values))
        deque_time = statistics.median(times["deque block manager"])
        for pattern in ("by blocks", "by tokens"):
            ratio = deque_time / statistics.median(times[f"PagedAllocator, {pattern}"])
            print(f"  {blocks:>6,} blocks: PagedAllocator {pattern} is {ratio:.2f}x the deque manager's speed")


def bench_simulator(repeats: int, n_requests: int) -> None:
    cost = roofline.StepModel("llama-2-13b", device="a100-40gb-sxm")
    trace = batching.sample_trace(n_requests, seed=0, arrival_rate=50)

    def run(lazy: bool, caching: bool):
        simulator.LAZY_DECODES = lazy
        try:
            return batching.simulate(trace, kv_slots=768 * BLOCK_SIZE, prefix_caching=caching, cost=cost)
        finally:
            simulator.LAZY_DECODES = True

    runs = {f"{engine}, caching {'on' if caching else 'off'}": (lambda c=caching: c, lambda c, lazy=lazy: run(lazy, c))
            for caching in (False, True) for engine, lazy in (("decode cohort", True), ("every request", False))}
    print(f"simulator: {n_requests:,} requests at 50/s on 768 blocks, with latency records (target: 2 s);")
    print("  the decode cohort against the same loop visiting every request every step (its reference)")
    times = interleaved(runs, repeats)
    for name, values in times.items():
        print(line(f"  {name}", values))
    for caching in ("off", "on"):
        ratio = statistics.median(times[f"every request, caching {caching}"]) / \
            statistics.median(times[f"decode cohort, caching {caching}"])
        print(f"  caching {caching}: the cohort is {ratio:.2f}x the speed of visiting every request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    bench_allocator(args.repeats)
    bench_simulator(max(3, args.repeats // 2), args.requests)  # three at least: a median of two is a mean


if __name__ == "__main__":
    main()
