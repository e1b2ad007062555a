"""Speed of servebook's quantizer against PyTorch's fake-quantize: INT4 of a 4096 x 4096 float32 matrix.

Contenders, per channel (one scale per row) and group-wise (g = 128 along the rows):

- ``torch.fake_quantize_per_channel_affine`` (for groups: on the matrix viewed as rows of 128, the
  same arithmetic), the reference;
- servebook ``quantize`` then ``dequantize`` (two calls: codes, then floats);
- servebook ``fake_quantize`` (one call);
- with ``--floors``, two floors: the formula fused into one C++ loop per form by ``torch.compile``
  (inductor, which needs a C++ compiler on the machine: not a Python package, so not in the
  project's dependencies; about 30 s of compiling in each process, not timed), and one multiply of the matrix by
  its scales into a fresh output, on the threads and blocks of servebook's kernels (one pass of
  the formula's five, where the memory traffic is the same: a kernel that reads the matrix and
  writes a new one does at least this).

torch's time for the same call swings about 2x between processes (first-touch page faults on its
64 MiB output land differently), so one process's numbers mean little.  This script:

- interleaves the contenders: each round times every contender once, in an order rotated every
  round, so a slow spell of the machine hits all of them;
- repeats ``--repeats`` rounds in each of ``--processes`` fresh processes;
- reports, per contender, the median time over all rounds with its interquartile range, and the
  ratio to torch *paired within each round* (median, and the lowest and highest process median),
  which cancels the swings that hit both.

    python benchmarks/bench_quant.py [--size 4096] [--repeats 9] [--processes 5] [--floors]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from servebook import quant
from servebook.quant import Rounding, _fast

EVEN = Rounding.HALF_EVEN


def _fused(scale, zero_point):
    """The formula as one compiled loop per form, each row of ``x`` viewed as rows of one scale each."""
    rows = scale.numel()
    scale = scale.reshape(rows, 1).float()
    inverse, zero = 1 / scale, zero_point.reshape(rows, 1).float()

    def fake(x):
        return torch.clamp(torch.round(x * inverse) + zero, 0, 15).sub(zero).mul(scale)

    def codes(x):
        return torch.clamp(torch.round(x * inverse) + zero, 0, 15).to(torch.uint8)

    def values(q):
        return (q.float() - zero) * scale

    fake, codes, values = (torch.compile(f, dynamic=False) for f in (fake, codes, values))
    return (lambda x: fake(x.view(rows, -1)).view(x.shape),
            lambda x: values(codes(x.view(rows, -1))).view(x.shape))


def _multiplied(x: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """``x * inverse`` into a new array, in the blocks and on the threads of servebook's kernels."""
    out = np.empty_like(x)
    step = _fast.BLOCK_ELEMENTS // x.shape[1]

    def work(blocks):
        for start, stop in blocks:
            np.multiply(x[start:stop], inverse[start:stop], out=out[start:stop])

    _fast.run_blocks(work, x.shape[0], step)
    return out


def contenders(n: int, group_size: int, floors: bool = False) -> dict:
    """Name -> zero-argument function, each checked against torch before it is timed."""
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
    channel = quant.choose_qparams(x, 4, axis=0, rounding=EVEN)
    grouped = quant.choose_qparams(x, 4, group_size=group_size, rounding=EVEN)
    rows = x.view(-1, group_size)
    g_scale, g_zero = grouped.scale.reshape(-1), grouped.zero_point.reshape(-1)

    def q_dq(qparams):
        return lambda: quant.dequantize(quant.quantize(x, qparams, EVEN), qparams)

    cases = {
        "torch fake_quantize, per channel": lambda: torch.fake_quantize_per_channel_affine(
            x, channel.scale, channel.zero_point, 0, 0, 15),
        f"torch fake_quantize, g{group_size}": lambda: torch.fake_quantize_per_channel_affine(
            rows, g_scale, g_zero, 0, 0, 15),
        "servebook quantize + dequantize, per channel": q_dq(channel),
        "servebook fake_quantize, per channel": lambda: quant.fake_quantize(x, channel, EVEN),
        f"servebook quantize + dequantize, g{group_size}": q_dq(grouped),
        f"servebook fake_quantize, g{group_size}": lambda: quant.fake_quantize(x, grouped, EVEN),
    }
    if floors:
        for label, qparams in (("per channel", channel), (f"g{group_size}", grouped)):
            fake, q_then_dq = _fused(qparams.scale, qparams.zero_point)
            cases[f"fused (compiled) q + dq, {label}"] = lambda f=q_then_dq: f(x)
            cases[f"fused (compiled) fake, {label}"] = lambda f=fake: f(x)
        inverse = (1 / channel.scale.reshape(n, 1)).numpy()
        cases["floor: x * (1/s), per channel, new output"] = lambda: torch.from_numpy(_multiplied(x.numpy(), inverse))
    names = list(cases)
    for name in [name for name in names[2:] if not name.startswith("floor")]:   # same numbers as torch, or no race
        reference = cases[names[0] if "channel" in name else names[1]]().reshape(n, n)
        assert torch.equal(cases[name]().reshape(n, n), reference), name
    return cases


def child(n: int, group_size: int, repeats: int, floors: bool) -> dict:
    """One process: ``repeats`` interleaved rounds; the times of every contender, seconds."""
    cases = contenders(n, group_size, floors)
    names = list(cases)
    for function in cases.values():   # warm-up: lazy imports, first allocations
        function()
    times = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - start)
    return times


def _quartiles(values):
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def report(runs: list[dict], n: int, group_size: int, repeats: int) -> None:
    names = list(runs[0])
    torch_of = {name: names[0] if "channel" in name else names[1] for name in names}
    print(f"INT4 of a {n} x {n} float32 matrix; {len(runs)} processes x {repeats} interleaved rounds; "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}")
    print(f"{'contender':<46} {'median ms':>9} {'IQR ms':>13} {'x torch':>8} {'process range':>14}")
    for name in names:
        every = [t for run in runs for t in run[name]]
        low, high = _quartiles(every)
        ratios = [[t / ref for t, ref in zip(run[name], run[torch_of[name]], strict=True)] for run in runs]
        per_process = [statistics.median(r) for r in ratios]
        ratio = statistics.median([v for r in ratios for v in r])
        print(f"{name:<46} {statistics.median(every) * 1e3:9.1f} {low * 1e3:6.1f}-{high * 1e3:<6.1f} "
              f"{ratio:7.2f}x {min(per_process):6.2f}-{max(per_process):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--floors", action="store_true", help="also time a compiled fused kernel and a one-pass floor")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.size, args.group_size, args.repeats, args.floors)))
        return
    command = [sys.executable, __file__, "--child", "--size", str(args.size), "--group-size",
               str(args.group_size), "--repeats", str(args.repeats)] + ["--floors"] * args.floors
    runs = [json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            for _ in range(args.processes)]
    report(runs, args.size, args.group_size, args.repeats)


if __name__ == "__main__":
    main()
