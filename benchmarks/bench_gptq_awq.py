"""Time GPTQ and AWQ on the book's tiny Llama: per layer shape, and for the whole model.

Per layer: one weight of each shape in the model (q/o/gate/up: 256 inputs, k/v: 256 inputs and
128 outputs, down: 768 inputs), quantized to INT4 g128 from the same calibration statistics, with
round-to-nearest (the quantizer alone) as the reference in the same run.  Whole model:
``quantize_model`` end to end (block-by-block calibration passes included) for RTN, GPTQ and AWQ,
and the held-out perplexity of the result.  Times are medians of ``--repeats`` runs on one CPU
thread (what ``gptq`` and ``awq`` use on a CPU).

    python benchmarks/bench_gptq_awq.py [--repeats 3] [--group-size 128] [--act-order]
"""

from __future__ import annotations

import argparse

import torch

from servebook import awq, gptq, qmodel, smallmodel
from timing import median_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--act-order", action="store_true")
    parser.add_argument("--calibration", type=int, default=64, help="calibration windows of 128 tokens")
    args = parser.parse_args()
    g = args.group_size

    model, tokenizer = smallmodel.load("tiny-llama")
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               n_samples=args.calibration, seq_len=128)
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    stats = smallmodel.layer_statistics(model, calibration)

    print(f"tiny Llama, INT4 g{g}, calibration {tuple(calibration.shape)}, torch {torch.__version__}, "
          f"median of {args.repeats}\n")
    print(f"{'layer':<32} {'shape':>10} {'RTN ms':>8} {'GPTQ ms':>9} {'AWQ ms':>8} {'GPTQ/RTN':>9} {'AWQ/RTN':>8}")
    shapes_seen = set()
    for name, layer in qmodel.linear_layers(model).items():
        W = layer.weight.detach()
        kind = name.rsplit(".", 1)[-1]
        if (kind, tuple(W.shape)) in shapes_seen:
            continue
        shapes_seen.add((kind, tuple(W.shape)))
        acc = stats[name]
        H, mean_abs = acc.H, acc.mean_abs
        with gptq.one_thread_on_cpu():
            t_rtn = median_seconds(lambda W=W: qmodel.rtn_quantize(W, 4, g), args.repeats)
        t_gptq = median_seconds(lambda W=W, H=H: gptq.gptq_quantize(W, H, 4, g, act_order=args.act_order),
                                args.repeats)
        t_awq = median_seconds(lambda W=W, H=H, m=mean_abs: awq.awq_quantize(W, None, 4, g, mean_abs=m, gram=H / 2),
                               args.repeats)
        shape = f"{W.shape[0]}x{W.shape[1]}"
        print(f"{name:<32} {shape:>10} {1e3 * t_rtn:8.1f} {1e3 * t_gptq:9.1f} {1e3 * t_awq:8.1f} "
              f"{t_gptq / t_rtn:9.0f} {t_awq / t_rtn:8.0f}")

    print(f"\n{'whole model':<20} {'seconds':>8} {'per layer ms':>13} {'bytes after':>12} {'perplexity':>11}")
    for method in ("rtn", "gptq", "awq"):
        options = dict(bits=4, group_size=g, calibration=None if method == "rtn" else calibration)
        if method == "gptq":
            options["act_order"] = args.act_order
        seconds = median_seconds(lambda m=method, o=options: qmodel.quantize_model(model, m, **o), args.repeats)
        report = qmodel.quantize_model(model, method, **options)
        ppl = smallmodel.perplexity(report.model, held)
        print(f"{method.upper():<20} {seconds:8.2f} {1e3 * seconds / len(report.layers):13.1f} "
              f"{report.bytes_after:12,} {ppl:11.3f}")
    print(f"{'FP32':<20} {'':>8} {'':>13} {4 * report.n_params:12,} {smallmodel.perplexity(model, held):11.3f}")


if __name__ == "__main__":
    main()
