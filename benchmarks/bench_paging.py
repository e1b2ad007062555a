"""How fast is the paged allocator, and does its speed depend on the size of the pool?

Run from the repository root:  python benchmarks/bench_paging.py [--ops 100000] [--requests 10000]

1. Allocator: a seeded trace of operations (admit a prompt, most of them starting
   with one of a few shared system prompts; append decoded tokens; fork a
   sample; free a finished sequence) is recorded once against a 512-block pool,
   then replayed against pools of 512 and 16,384 blocks, with and without
   prefix caching.  Every operation is O(1) in the pool size, so the two pools
   should run at the same speed.  As a reference measured in the same run, a
   free list kept in a Python list and emptied with ``list.remove`` (what a
   naive allocator does to take a specific block) slows down with the pool.
2. Simulator: time of :func:`servebook.batching.simulate` for 10,000
   requests under each policy and allocator.

Times are CPU seconds of this process (``time.process_time``), best of three,
so that other jobs on a shared machine do not inflate them; the replay loop's
own dispatch is included in "ops/s (whole trace)".
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from servebook import batching, paging
from servebook.paging import PagedAllocator

APPEND, ADMIT, FORK, FREE = range(4)
NAMES = {APPEND: "append", ADMIT: "admit", FORK: "fork", FREE: "free"}


def record_trace(n_ops: int, seed: int = 0, num_blocks: int = 512, block_size: int = 16) -> list[tuple]:
    """Operations that all succeed on a ``num_blocks`` pool (so on any larger one too, cached or not)."""
    rng = random.Random(seed)
    systems = [[rng.randrange(32000) for _ in range(rng.randrange(64, 256))] for _ in range(4)]
    # Recorded without prefix caching, the case that needs the most blocks, so the replay never runs out.
    kv = PagedAllocator(num_blocks, block_size, prefix_caching=False)
    live: dict[int, int] = {}      # seq_id -> tokens still to generate
    ops: list[tuple] = []
    next_id = 0
    token = 1
    while len(ops) < n_ops:
        roll = rng.random()
        if len(live) < 6 or (roll < 0.025 and len(live) < 40):
            prompt = (systems[rng.randrange(4)] if rng.random() < 0.7 else []) + \
                     [rng.randrange(32000) for _ in range(max(1, int(rng.lognormvariate(3.5, 1.0))))]
            if kv.pool.num_available - paging.blocks_needed(len(prompt), block_size) < 64 or \
                    not kv.can_allocate(prompt):
                victim = rng.choice(list(live))
                kv.free(victim)
                del live[victim]
                ops.append((FREE, victim, None))
                continue
            kv.allocate(next_id, prompt)
            ops.append((ADMIT, next_id, prompt))
            live[next_id] = max(1, int(rng.lognormvariate(5.0, 1.0)))
            next_id += 1
        elif roll < 0.03 and kv.pool.num_available > 64:
            parent = rng.choice(list(live))
            kv.fork(parent, next_id)
            ops.append((FORK, parent, next_id))
            live[next_id] = max(1, int(rng.lognormvariate(4.0, 1.0)))
            next_id += 1
        else:
            seq = rng.choice(list(live))
            if live[seq] == 0 or kv.pool.num_available < 8:
                kv.free(seq)
                del live[seq]
                ops.append((FREE, seq, None))
            else:
                token = token * 48271 % 32003
                kv.append(seq, token)
                live[seq] -= 1
                ops.append((APPEND, seq, token))
    return ops


def replay(ops: list[tuple], num_blocks: int, prefix_caching: bool, block_size: int = 16) -> dict[str, float]:
    """Seconds spent in each kind of operation, and in total, replaying ``ops`` (loop included)."""
    kv = PagedAllocator(num_blocks, block_size, prefix_caching=prefix_caching)
    append, allocate, fork, free = kv.append, kv.allocate, kv.fork, kv.free
    clock = time.process_time
    spent = dict.fromkeys(NAMES.values(), 0.0)
    start = clock()
    for op, a, b in ops:
        if op == APPEND:
            append(a, b)
        elif op == ADMIT:
            allocate(a, b)
        elif op == FREE:
            free(a)
        else:
            fork(a, b)
    spent["total"] = clock() - start
    # Admit, fork and free take microseconds: time them call by call (less the timer's own cost) in a
    # second pass; appends are too quick for that, so their share is what the rest of the trace leaves.
    kv = PagedAllocator(num_blocks, block_size, prefix_caching=prefix_caching)
    calls = {ADMIT: kv.allocate, FREE: lambda a, b: kv.free(a), FORK: kv.fork}
    overhead = _timer_overhead()
    append = kv.append
    for op, a, b in ops:
        if op == APPEND:
            append(a, b)
            continue
        t0 = clock()
        calls[op](a, b)
        spent[NAMES[op]] += clock() - t0 - overhead
    spent["append"] = spent["total"] - spent["admit"] - spent["fork"] - spent["free"]
    return spent


def _timer_overhead(n: int = 20_000) -> float:
    """Seconds that timing an empty call adds, per call."""
    clock = time.process_time

    def nothing(a, b):
        return None

    start = clock()
    for _ in range(n):
        t0 = clock()
        nothing(0, 0)
        _ = clock() - t0
    return (clock() - start) / n


def scanning_free_list(num_blocks: int, n_ops: int, seed: int = 0) -> float:
    """Reference: take and return random specific blocks with ``list.remove``, O(pool) each."""
    rng = random.Random(seed)
    free = list(range(num_blocks))
    held: list[int] = []
    picks = [rng.random() for _ in range(n_ops)]
    start = time.process_time()
    for p in picks:
        if held and (p < 0.5 or not free):
            free.append(held.pop())
        else:
            block = free[int(p * len(free))]
            free.remove(block)
            held.append(block)
    return time.process_time() - start


def bench_allocator(n_ops: int) -> None:
    ops = record_trace(n_ops)
    counts = {name: sum(1 for op in ops if NAMES[op[0]] == name) for name in NAMES.values()}
    print(f"\n## Allocator: {len(ops):,} operations "
          + ", ".join(f"{counts[n]:,} {n}" for n in NAMES.values())
          + f"; block size 16; Python {platform.python_version()}\n")
    print("| pool (blocks) | prefix caching | ops/s (whole trace) | append (us, with loop) | admit (us) | fork (us) "
          "| free (us) |")
    print("|--:|:--|--:|--:|--:|--:|--:|")
    for prefix_caching in (False, True):
        for num_blocks in (512, 16_384):
            best = min((replay(ops, num_blocks, prefix_caching) for _ in range(5)), key=lambda s: s["total"])
            per = {n: 1e6 * best[n] / counts[n] if counts[n] else float("nan") for n in NAMES.values()}
            print(f"| {num_blocks:,} | {'on' if prefix_caching else 'off'} | {len(ops) / best['total']:,.0f} "
                  f"| {per['append']:.2f} | {per['admit']:.1f} | {per['fork']:.1f} | {per['free']:.1f} |")
    print("\nReference in the same run: a free list in a Python list, emptied with list.remove\n")
    print("| pool (blocks) | ops/s |")
    print("|--:|--:|")
    for num_blocks in (512, 16_384):
        seconds = min(scanning_free_list(num_blocks, n_ops) for _ in range(3))
        print(f"| {num_blocks:,} | {n_ops / seconds:,.0f} |")


def bench_simulator(n_requests: int) -> None:
    trace = batching.sample_trace(n_requests, seed=0)
    kv_slots = 15_408  # the chapter's pool: Llama-2-13B, 40 GiB A100 with 4 GiB set aside
    print(f"\n## Simulator: {n_requests:,} requests, {kv_slots:,} KV slots, max_len 2048\n")
    print("| policy | allocator | iterations | CPU time (s) | iterations/s |")
    print("|:--|:--|--:|--:|--:|")
    for policy in batching.POLICIES:
        for allocator in batching.ALLOCATORS:
            start = time.process_time()
            result = batching.simulate(trace, kv_slots=kv_slots, policy=policy, allocator=allocator)
            seconds = time.process_time() - start
            n = len(result.steps["dt"])
            print(f"| {policy} | {allocator} | {n:,} | {seconds:.1f} | {n / seconds:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args()
    bench_allocator(args.ops)
    bench_simulator(args.requests)


if __name__ == "__main__":
    main()
