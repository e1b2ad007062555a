"""The command line: the book's questions about one model on one GPU, answered without writing Python.

``servebook`` (or ``python -m servebook``) has one command per question:

- ``kv MODEL --context S``: KV-cache bytes per token, per request of S tokens, per batch;
- ``fit MODEL --gpu G --weights int4``: how many users of S tokens fit next to the weights;
- ``plan MODEL --gpu G``: the whole budget behind that count (weights, overhead, KV pool, leftover);
- ``advise MODEL --gpu G --prompt P --output N``: which wall a workload hits, and the levers ranked;
- ``models``, ``gpus``: the registries' ids.

MODEL is a registry id (``servebook models``) or the path of a Hugging Face ``config.json`` (or of
the folder holding it).  Every number comes from :mod:`servebook.memory`, :mod:`servebook.gpus` and
:mod:`servebook.advisor`; the command line only reads arguments and formats.  Tables by default,
``--json`` for scripts.  An unknown model or GPU is an error that lists the known ids.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import shlex
import sys
import textwrap
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO

from . import __version__, advisor, gpus, memory, models
from .checks import byte_count, choice, group_size, whole
from .models import ModelSpec
from .text import WIDTH, pairs, table
from .units import DTYPE_BYTES, UNITS, GiB, canonical_dtype, fmt_both, fmt_bytes

__all__ = ["DEFAULT_OVERHEAD", "WIDTH", "argument_parser", "main", "size", "transcript"]

SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
WEIGHT_DTYPES = tuple(DTYPE_BYTES)
DEFAULT_OVERHEAD = 4 * GiB  # the book's: CUDA context, activations, fragmentation


class CommandError(Exception):
    """A question the library refused (unknown id, impossible budget): shown as one line, exit status 2."""


# ---------------------------------------------------------------------------
# Reading arguments.


def size(text: str) -> int:
    """Bytes from a size with its unit (``"4GiB"``, ``"80 GB"``, ``"0"``): floor, a partial byte holds nothing."""
    match = SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"a size is a number and a unit, e.g. 4GiB; got {text!r}")
    value, unit = Fraction(match.group(1)), match.group(2)
    if not unit and value:
        raise argparse.ArgumentTypeError(f"{text!r} needs a unit: one of {', '.join(UNITS)}")
    try:
        return byte_count("size", math.floor(value * (UNITS[choice("unit", unit, UNITS)] if unit else 1)))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def dtype(text: str) -> str:
    """A dtype name or alias (``"fp16"``, ``"float16"``, ``"int4"``), as its canonical name."""
    try:
        return canonical_dtype(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def model_spec(model: str) -> ModelSpec:
    """A registry id, or a ``config.json`` path (the file or its folder) read by ``from_hf_config``."""
    path = Path(model)
    if path.suffix == ".json" or path.exists() or len(path.parts) > 1:
        if not path.exists():
            raise CommandError(f"no such config.json: {model}")
        return ModelSpec.from_hf_config(path)
    return models.get(model)


def parameters(spec: ModelSpec) -> int:
    """The model's parameter count: the registry's, else counted from its shape."""
    return spec.n_params if spec.n_params is not None else spec.count_params()


# ---------------------------------------------------------------------------
# The answers, as plain data (what --json prints) and as text.


def kv_answer(args: argparse.Namespace) -> dict[str, Any]:
    spec = model_spec(args.model)
    context = whole("context", args.context)
    batch = whole("batch", args.batch)
    return {"model": spec.name, "model_name": spec.display_name, "attention": spec.attention,
            "layers": spec.n_layers, "dtype": args.dtype,
            "context": context, "batch": batch,
            "bytes_per_token": memory.kv_bytes_per_token(spec, args.dtype),
            "bytes_per_request": memory.kv_cache_bytes(spec, seq_len=context, dtype=args.dtype),
            "bytes": memory.kv_cache_bytes(spec, seq_len=context, batch=batch, dtype=args.dtype)}


def kv_text(a: dict[str, Any]) -> str:
    return pairs([
        ("model", f"{a['model_name']}: {a['layers']} layers, {a['attention']}"),
        ("KV dtype", a["dtype"]),
        ("per token", f"{a['bytes_per_token']:,} B = {fmt_bytes(a['bytes_per_token'], 'KiB')}"),
        ("per request", f"{a['context']:,} tokens: {a['bytes_per_request']:,} B = {fmt_both(a['bytes_per_request'])}"),
        (f"batch of {a['batch']:,}", f"{a['bytes']:,} B = {fmt_both(a['bytes'])}"),
    ])


def plan_answer(args: argparse.Namespace) -> dict[str, Any]:
    """The capacity plan of ``fit`` and ``plan``: the GPU split into weights, overhead and KV pool."""
    spec = model_spec(args.model)
    device = gpus.get(args.gpu)
    gpu_bytes = device.memory if args.memory is None else byte_count("memory", args.memory, allow_zero=False)
    n_params = parameters(spec)
    group = group_size(args.group_size)
    weights = memory.weight_bytes(n_params, args.weights, group_size=group)
    per_user = memory.kv_cache_bytes(spec, seq_len=whole("context", args.context), dtype=args.kv_dtype)
    plan = memory.capacity_plan(gpu_bytes, weights, per_user, overhead=args.overhead)
    return {"model": spec.name, "model_name": spec.display_name, "parameters": n_params, "gpu": device.name,
            "gpu_name": device.display_name, "gpu_bytes": plan.gpu,
            "weights_dtype": args.weights, "group_size": group, "weights_bytes": plan.weights,
            "overhead_bytes": plan.overhead, "kv_pool_bytes": plan.kv_pool, "context": args.context,
            "kv_dtype": args.kv_dtype, "bytes_per_user": plan.per_request, "users": plan.requests,
            "kv_used_bytes": plan.kv_used, "leftover_bytes": plan.leftover}


def fit_text(a: dict[str, Any]) -> str:
    grouped = f", groups of {a['group_size']}" if a["group_size"] else ""
    return (f"{a['model_name']} on {a['gpu_name']}: {a['users']:,} users of {a['context']:,} tokens\n"
            f"({a['weights_dtype']} weights{grouped}, {a['kv_dtype']} KV cache, "
            f"{fmt_bytes(a['overhead_bytes'], 'GiB')} overhead)")


def plan_text(a: dict[str, Any]) -> str:
    grouped = f" (groups of {a['group_size']})" if a["group_size"] else ""
    rows = [("GPU", a["gpu_bytes"]), ("- weights", a["weights_bytes"]), ("- overhead", a["overhead_bytes"]),
            ("= KV pool", a["kv_pool_bytes"]), ("per user", a["bytes_per_user"])]
    cells = [(key, f"{n / GiB:,.3f}", f"{n:,}") for key, n in rows]
    cells += [("users", f"{a['users']:,}", ""),
              ("left over", f"{a['leftover_bytes'] / GiB:,.3f}", f"{a['leftover_bytes']:,}")]
    width = [max(len(c[i]) for c in cells) for i in range(3)]
    lines = textwrap.wrap(f"{a['model_name']} ({a['parameters']:,} parameters) in {a['weights_dtype']}{grouped} "
                          f"on {a['gpu_name']}; each user holds {a['context']:,} tokens of {a['kv_dtype']} KV cache",
                          WIDTH)
    lines.append(f"{'':{width[0]}}  {'GiB':>{width[1]}}  {'bytes':>{width[2]}}")
    lines += [f"{k:{width[0]}}  {g:>{width[1]}}  {b:>{width[2]}}".rstrip() for k, g, b in cells]
    return "\n".join([*lines, "users = floor(KV pool / per user); left over = KV pool - users * per user"])


def advise_answer(args: argparse.Namespace) -> advisor.Advice:
    options = {"batch": args.batch, "max_len": args.max_len, "goal": args.goal, "output_len_max": args.output_max,
               "batching": args.batching, "weights": args.scheme, "kv_dtype": args.kv_dtype,
               "overhead": args.overhead, "block_size": args.block_size}
    given = {key: value for key, value in options.items() if value is not None}
    workload = advisor.Workload(prompt_len=args.prompt, output_len=args.output, **given)
    return advisor.advise(model_spec(args.model), args.gpu, workload)


def advice_data(advice: advisor.Advice) -> dict[str, Any]:
    return {"model": advice.model, "gpu": advice.gpu, "workload": asdict(advice.workload),
            "dominant": advice.dominant, "diagnosis": list(advice.diagnosis), "ranking": advice.rows()}


def advice_text(advice: advisor.Advice) -> str:
    """The advisor's report, as the book prints it (:meth:`servebook.advisor.Advice.__str__`)."""
    return str(advice)


def models_rows() -> list[dict[str, Any]]:
    rows = []
    for name in models.names():
        spec = models.get(name)
        rows.append({"id": name, "attention": spec.attention, "layers": spec.n_layers,
                     "parameters": spec.n_params, "KV B/token": memory.kv_bytes_per_token(spec)})
    return rows


def gpus_rows() -> list[dict[str, Any]]:
    return [{"id": name, "GiB": round(g.memory / GiB, 2), "datasheet": g.memory_label,
             "GB/s": round(g.bandwidth / 1e9), "FP16 TFLOP/s": round(g.peak("fp16") / 1e12, 1),
             "INT8 TOP/s": round(g.peak("int8") / 1e12, 1)}
            for name, g in ((name, gpus.get(name)) for name in gpus.names())]


# ---------------------------------------------------------------------------
# Text layout.


# ---------------------------------------------------------------------------
# The parser.


def _add_model_options(parser: argparse.ArgumentParser, gpu: bool = True) -> None:
    parser.add_argument("model", help="a registry id (see `servebook models`) or the path of a config.json")
    if gpu:
        parser.add_argument("--gpu", required=True, help="a GPU id (see `servebook gpus`)")
        parser.add_argument("--kv-dtype", type=dtype, default="fp16", help="dtype of the KV cache (default fp16)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _add_budget_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=dtype, default="fp16", help=f"weight dtype: {', '.join(WEIGHT_DTYPES)}")
    parser.add_argument("--group-size", type=int, default=None,
                        help="quantization group size: each group also stores a scale and a zero point")
    parser.add_argument("--context", type=int, default=4096, help="tokens per user, prompt and output (4096)")
    parser.add_argument("--overhead", type=size, default=DEFAULT_OVERHEAD, help="memory kept back (default 4GiB)")
    parser.add_argument("--memory", type=size, default=None, help="the GPU's memory if not the datasheet's")


def argument_parser() -> argparse.ArgumentParser:
    """The ``servebook`` command and its sub-commands."""
    parser = argparse.ArgumentParser(prog="servebook", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"servebook {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    kv = commands.add_parser("kv", help="KV-cache bytes per token, per request, per batch")
    _add_model_options(kv, gpu=False)
    kv.add_argument("--dtype", type=dtype, default="fp16", help="dtype of the KV cache (default fp16)")
    kv.add_argument("--context", type=int, required=True, help="tokens per request S")
    kv.add_argument("--batch", type=int, default=1, help="requests B (default 1)")
    for name, text in (("fit", "how many users fit on a GPU"), ("plan", "the GPU's memory budget, line by line")):
        sub = commands.add_parser(name, help=text)
        _add_model_options(sub)
        _add_budget_options(sub)
    advise = commands.add_parser("advise", help="which wall a workload hits, and the levers ranked")
    _add_model_options(advise)
    advise.add_argument("--prompt", type=int, required=True, help="prompt tokens per request")
    advise.add_argument("--output", type=int, required=True, help="output tokens per request (mean)")
    advise.add_argument("--output-max", type=int, help="the longest output in a batch")
    advise.add_argument("--batch", type=int, help="requests in flight (default: as many as fit)")
    advise.add_argument("--max-len", type=int, help="KV slots reserved per request (default: paged)")
    advise.add_argument("--goal", help=f"one of {', '.join(advisor.GOALS)} (default throughput)")
    advise.add_argument("--batching", help=f"the server's: one of {', '.join(advisor.BATCHING)} (default static)")
    advise.add_argument("--scheme", help="the server's weights, e.g. W16A16 (default), W8A8, W4A16")
    advise.add_argument("--overhead", type=size, help="memory kept back, e.g. 4GiB (default)")
    advise.add_argument("--block-size", type=int, help="tokens per KV block when paged (default 16)")
    for name, text in (("models", "the registry's models"), ("gpus", "the registry's GPUs")):
        commands.add_parser(name, help=text).add_argument("--json", action="store_true", help="print JSON")
    return parser


def answer(args: argparse.Namespace) -> str:
    """What one parsed command prints."""
    if args.command in ("models", "gpus"):
        rows = models_rows() if args.command == "models" else gpus_rows()
        return json.dumps(rows, indent=2) if args.json else table(rows)
    if args.command == "advise":
        advice = advise_answer(args)
        return json.dumps(advice_data(advice), indent=2) if args.json else advice_text(advice)
    found = kv_answer(args) if args.command == "kv" else plan_answer(args)
    if args.json:
        return json.dumps(found, indent=2)
    return {"kv": kv_text, "fit": fit_text, "plan": plan_text}[args.command](found)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command; 0 on success, 2 (and one line on stderr) when the library refuses the question."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    try:
        text = answer(args)
    except (CommandError, ValueError, TypeError) as error:
        parser.exit(2, f"servebook {args.command}: error: {error}\n")
    print(text, file=out or sys.stdout)
    return 0


def transcript(command: str) -> str:
    """``$ servebook COMMAND`` followed by what it prints: the book shows the command line this way."""
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        try:
            main(shlex.split(command), out=captured)
        except SystemExit:
            pass  # an error: its message is in the transcript, as a terminal shows it
    # A command longer than a line continues with a backslash, as it would be typed; an error line
    # (the one output not already laid out to WIDTH) wraps as a terminal of that width shows it.
    typed = ["$ servebook"]
    for option in re.split(r" (?=--)", command):  # an option stays on one line with its value
        if len(typed[-1]) + 1 + len(option) > WIDTH - 2:
            typed.append("    " + option)
        else:
            typed[-1] += " " + option
    shown = [part for line in captured.getvalue().rstrip().splitlines()
             for part in (textwrap.wrap(line, WIDTH, subsequent_indent="  ") if len(line) > WIDTH else [line])]
    return "\n".join([" \\\n".join(typed), *shown])
