"""The book's GPU run in one go: the lab, the fused W4A16 kernel and CUDA graphs, into one results JSON.

On an H100/H200-class GPU it is sized to take a few minutes (not yet recorded) and measures, with no network:

- the project's small Llama and a random-weight Llama-2-7B at full size, each in FP16, W8A16 and
  W4A16 (the fused kernel, and again with it turned off: dequantize-then-matmul): weight bytes, KV
  bytes, prefill and decode step times at batches 1, 8, 32 and prompts of 256 and 1,024 tokens,
  tokens per second, each beside servebook's prediction; the small model's held-out perplexity;
- a decode step at batch 1, launched from Python and replayed from a CUDA graph;
- the fused kernel alone on the 7B model's layer shapes (decode and prefill sizes), beside
  dequantize-then-matmul, FP16 torch.matmul and a device-to-device copy of the same run: time,
  bytes moved, achieved bandwidth and its fraction of the copy's and of the datasheet's.

Where servebook is not installed it is imported from companion/ beside this script, and where
jsonschema is missing the document is checked without its schema (it is checked in full when the
book reads it from companion/servebook/data/lab/).

    python benchmarks/gpu_run.py --out companion/servebook/data/lab/h200-2026-12-01.json
    python benchmarks/gpu_run.py --cpu-smoke --out /tmp/smoke.json   # the same code, small, on a CPU
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The GPU run: full sizes, fp16, every extra measurement; the Hub model and vLLM need a network, so not here.
GPU_RUN = dict(hub_model=None, project_model=True, random_models=("llama-2-7b",), dtype="fp16",
               variants=("w8a16", "w4a16"), group_size=128, batches=(1, 8, 32), prompt_lens=(256, 1024),
               decode_steps=16, repeats=5, quantize_random=True, unfused=True, decode_graph=True,
               kernel_benchmark=True, kernel_batches=(1, 16, 64, 512, 4096), vllm=False)
# The same code on a CPU in seconds: Llama-3.2-1B's shape divided by 8 stands in for the 7B (groups of 128
# divide its layers too) in FP32 and W4A16 (the fused kernel stays off in a CPU model); the kernel alone runs
# in Triton's interpreter.  The project's model is left out: the lab's own tests measure it.
CPU_SMOKE = {**GPU_RUN, "project_model": False, "random_models": ("llama-3.2-1b",), "reduce": 8, "dtype": "fp32",
             "variants": ("w4a16",), "batches": (1,), "prompt_lens": (8,), "decode_steps": 1, "repeats": 1,
             "kernel_batches": (1,)}

def _servebook():
    if importlib.util.find_spec("servebook") is None:
        sys.path.insert(0, str(ROOT / "companion"))
    from servebook import lab

    return lab


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the results JSON")
    parser.add_argument("--cpu-smoke", action="store_true", help="a small run on the CPU that exercises the code")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")   # the kernel alone runs in Triton's interpreter
    lab = _servebook()
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    device = lab.detect_device("cpu" if args.cpu_smoke else "cuda", log=log)
    if device.kind != "cuda" and not args.cpu_smoke:
        print("gpu_run.py measures a GPU; there is none here (use --cpu-smoke for a dry run)")
        return 2
    log(f"the fused kernel against dequantize-then-matmul, first: {lab.check_kernel(device)}")
    schema = importlib.util.find_spec("jsonschema") is not None
    config = lab.LabConfig.for_device(device, **(CPU_SMOKE if args.cpu_smoke else GPU_RUN))
    results = lab.run_lab(config, device, log=log, schema=schema)
    path = lab.write_results(results, args.out, schema=schema)
    print(lab.format_table(lab.table(results)))
    if "kernel" in results:
        print("\n" + lab.format_table(lab.kernel_table(results["kernel"])))
        errors = results["kernel"]["max_relative_error"]
        print(f"fused vs dequantize-then-matmul, largest relative difference per shape: {errors}")
    print(f"\n{len(results['rows'])} rows, {len(results['skipped'])} skipped, on {device.describe()}, in "
          f"{results['run_seconds']:.1f} s -> {path}" + ("" if schema else " (schema not checked: no jsonschema)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
