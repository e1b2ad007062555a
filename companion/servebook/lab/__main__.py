"""The lab's command line: ``python -m servebook.lab --out results.json`` (``--help`` lists the options)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import models
from ..checks import whole
from .device import detect_device, require_torch
from .load import DEFAULT_HUB_MODEL, FLOAT_VARIANTS
from .results import format_table, table, write_results
from .run import LabConfig, run_lab


def argument_parser() -> argparse.ArgumentParser:
    """The options of ``python -m servebook.lab``."""
    from .. import lab

    parser = argparse.ArgumentParser(prog="python -m servebook.lab", description=lab.__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("lab-results.json"), help="where to write the JSON")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--hub-model", default=DEFAULT_HUB_MODEL,
                        help="a Hugging Face model id (GPU runs); 'none' to leave it out")
    parser.add_argument("--random-models", nargs="*", default=None,
                        help=f"registry names measured with random weights; known: {', '.join(models.names())}")
    parser.add_argument("--dtype", choices=FLOAT_VARIANTS, default=None,
                        help="float precision (default: fp16 on a GPU, fp32 on a CPU)")
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--prompt-lens", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    parser.add_argument("--no-vllm", action="store_true", help="do not try the vLLM comparison")
    return parser


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`LabConfig` settings the options change; the rest keep the device's defaults."""
    overrides: dict[str, Any] = {"hub_model": None if args.hub_model.lower() == "none" else args.hub_model,
                                 "vllm": not args.no_vllm}
    for key, value in (("random_models", args.random_models), ("dtype", args.dtype), ("batches", args.batches),
                       ("prompt_lens", args.prompt_lens)):
        if value is not None:
            overrides[key] = tuple(value) if isinstance(value, list) else value
    return overrides


def main(argv: list[str] | None = None) -> int:
    options = argument_parser()
    args = options.parse_args(argv)
    if args.threads is not None:
        try:
            whole("--threads", args.threads, 1)
        except ValueError as error:
            options.error(str(error))
        require_torch().set_num_threads(args.threads)

    device = detect_device(args.device)
    try:
        config = LabConfig.for_device(device, **config_overrides(args))
    except (TypeError, ValueError) as error:
        options.error(str(error))
    results = run_lab(config, device)
    print(format_table(table(results)))
    print(f"\n{len(results['rows'])} rows, {len(results['skipped'])} skipped, on {device.describe()}, "
          f"in {results['run_seconds']:.1f} s -> {write_results(results, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
