"""The fused W4A16 kernel against dequantize-then-matmul and FP16 torch.matmul, layer shape by layer shape.

For each linear-layer shape of a model (Llama-2-7B by default) and each number of tokens: the time
of each path, the bytes it must move, the bandwidth that makes, and the fused kernel's fraction of
a device-to-device copy measured in the same run and of the datasheet's bandwidth
(servebook.lab.kernel says how each is timed).  It needs a CUDA GPU; elsewhere it says so.

    python benchmarks/bench_w4a16.py [--model llama-2-7b] [--batches 1 16 64 512 4096] [--group-size 128]
"""

from __future__ import annotations

import argparse

import torch

from servebook import kernels, lab, models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-2-7b", help=f"a registry name: {', '.join(models.names())}")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 512, 4096])
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or not kernels.triton_available():
        print("bench_w4a16.py needs a CUDA GPU and Triton (pip install 'servebook[kernels]'); nothing to measure here")
        return 0
    device = lab.detect_device("cuda")
    section = lab.measure_kernel(models.get(args.model), device, args.batches, args.group_size, args.repeats)
    copy = section["copy"]
    print(f"{device.describe()}: device-to-device copy {copy['bytes_per_s'] / 1e9:,.0f} GB/s"
          + ("" if section["datasheet_bytes_per_s"] is None else
             f", datasheet {section['datasheet_bytes_per_s'] / 1e9:,.0f} GB/s"))
    print(lab.format_table(lab.kernel_table(section)))
    print(f"fused vs dequantize-then-matmul, largest relative difference per shape: {section['max_relative_error']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
