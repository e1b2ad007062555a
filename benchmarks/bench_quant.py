"""Speed of servebook's quantizer against PyTorch's own fake-quantize and a plain memory copy.

Quantize + dequantize of one float32 matrix (4096 x 4096 by default) to INT4, per channel (one
scale per row) and group-wise (g = 128 along the rows), on the numpy path, on torch CPU tensors
(which run the same kernels on the tensor's memory), and on torch's own operations (the path
tensors on a GPU take, forced here on the CPU), beside ``torch.fake_quantize_per_channel_affine``
and a memory copy, all in the same run.

Effective bandwidth counts only the float32 matrix read and the float32 result written
(2 x 4 bytes per element, decimal GB/s), for every row alike, so rows compare directly with the copy.

    python benchmarks/bench_quant.py [--size 4096] [--repeats 7]
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np
import torch

from servebook import quant
from servebook.quant import Rounding
from timing import median_seconds

INT4 = quant.qrange(4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--group-size", type=int, default=128)
    args = parser.parse_args()

    n = args.size
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    xt = torch.from_numpy(x.copy())
    per_channel = quant.choose_qparams(x, 4, axis=0, rounding=Rounding.HALF_EVEN)
    grouped = quant.choose_qparams(x, 4, group_size=args.group_size, rounding=Rounding.HALF_EVEN)
    per_channel_t = quant.choose_qparams(xt, 4, axis=0, rounding=Rounding.HALF_EVEN)
    grouped_t = quant.choose_qparams(xt, 4, group_size=args.group_size, rounding=Rounding.HALF_EVEN)
    scale_t, zero_t = per_channel_t.scale, per_channel_t.zero_point
    even = Rounding.HALF_EVEN

    def q_dq(tensor, qparams, rounding=even):
        return quant.dequantize(quant.quantize(tensor, qparams, rounding), qparams)

    def device_path(function):
        def run():
            with mock.patch.object(quant._fast, "numpy_view", lambda value: None):
                return function()
        return run

    copy_out = np.empty_like(x)
    g = args.group_size
    cases = [
        ("memory copy (numpy, into a preallocated array)", lambda: np.copyto(copy_out, x)),
        ("memory copy (numpy, new array)", lambda: x.copy()),
        ("torch.fake_quantize_per_channel_affine", lambda: torch.fake_quantize_per_channel_affine(
            xt, scale_t, zero_t, 0, *INT4)),
        ("torch.fake_quantize_per_tensor_affine", lambda: torch.fake_quantize_per_tensor_affine(
            xt, 0.25, 8, *INT4)),
        ("servebook numpy, per channel: quantize + dequantize", lambda: q_dq(x, per_channel)),
        ("servebook numpy, per channel: fake_quantize", lambda: quant.fake_quantize(x, per_channel, even)),
        ("servebook numpy, per channel: fake_quantize half-up", lambda: quant.fake_quantize(
            x, per_channel, Rounding.HALF_UP)),
        (f"servebook numpy, g={g}: quantize + dequantize", lambda: q_dq(x, grouped)),
        (f"servebook numpy, g={g}: fake_quantize", lambda: quant.fake_quantize(x, grouped, even)),
        ("servebook torch CPU, per channel: quantize + dequantize", lambda: q_dq(xt, per_channel_t)),
        (f"servebook torch CPU, g={g}: quantize + dequantize", lambda: q_dq(xt, grouped_t)),
        ("servebook torch ops (device path), per channel: q + dq", device_path(lambda: q_dq(xt, per_channel_t))),
        (f"servebook torch ops (device path), g={g}: q + dq", device_path(lambda: q_dq(xt, grouped_t))),
        ("servebook numpy, per channel: choose_qparams", lambda: quant.choose_qparams(x, 4, axis=0)),
        (f"servebook numpy, g={g}: choose_qparams", lambda: quant.choose_qparams(x, 4, group_size=g)),
    ]
    # the paths must agree with torch before their speed means anything
    reference = torch.fake_quantize_per_channel_affine(xt, scale_t, zero_t, 0, *INT4).numpy()
    assert np.array_equal(q_dq(x, per_channel), reference)
    assert np.array_equal(q_dq(xt, per_channel_t).numpy(), reference)
    assert np.array_equal(device_path(lambda: q_dq(xt, per_channel_t))().numpy(), reference)

    moved = 2 * x.nbytes
    results = [(name, median_seconds(function, args.repeats)) for name, function in cases]
    torch_time = results[2][1]
    print(f"INT4, {n} x {n} float32 ({x.nbytes / 2**20:.0f} MiB), median of {args.repeats}, "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads, numpy {np.__version__}")
    print(f"{'operation':<58} {'median ms':>10} {'GB/s':>7} {'vs torch fq':>12}")
    for name, seconds in results:
        bandwidth = "" if "choose" in name else f"{moved / seconds / 1e9:7.1f}"
        print(f"{name:<58} {seconds * 1e3:10.1f} {bandwidth:>7} {seconds / torch_time:11.2f}x")


if __name__ == "__main__":
    main()
