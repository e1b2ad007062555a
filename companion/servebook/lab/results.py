"""The results document of a lab run: its schema and validation, the recorded runs, tables for display."""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checks import choice, flag
from ..units import GiB, MiB
from .load import FLOAT_VARIANTS, VARIANTS

SCHEMA_VERSION = 1
QUANTITIES = {
    "weight_bytes": "B", "allocated_bytes": "B", "kv_bytes": "B", "peak_bytes": "B",
    "prefill_s": "s", "decode_s": "s", "prefill_tokens_per_s": "tokens/s", "decode_tokens_per_s": "tokens/s",
    "perplexity": "1",
    # a decode step over a static cache, launched from Python and replayed from a CUDA graph (servebook.lab.graph)
    "decode_static_s": "s", "decode_graph_s": "s",
}


def measurement_row(model, quantity: str, measured: float, predicted: float | None, basis: str,
                    batch: int | None = None, seq_len: int | None = None) -> dict[str, Any]:
    """One row of the document: a measurement of ``model`` (a LabModel) beside its prediction and their ratio."""
    ratio = None if predicted in (None, 0) else measured / predicted
    return {"model": model.name, "variant": model.variant, "quantity": quantity, "unit": QUANTITIES[quantity],
            "batch": batch, "seq_len": seq_len, "measured": measured, "predicted": predicted,
            "ratio": ratio, "basis": basis}


_NUMBER_OR_NULL = {"type": ["number", "null"]}
_ROW = {
    "type": "object",
    "required": ["model", "variant", "quantity", "unit", "batch", "seq_len", "measured", "predicted", "ratio",
                 "basis"],
    "additionalProperties": False,
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "variant": {"enum": list(VARIANTS)},
        "quantity": {"enum": list(QUANTITIES)},
        "unit": {"enum": sorted(set(QUANTITIES.values()))},
        "batch": {"type": ["integer", "null"], "minimum": 1},
        "seq_len": {"type": ["integer", "null"], "minimum": 1},
        "measured": {"type": "number", "minimum": 0},
        "predicted": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "ratio": _NUMBER_OR_NULL,
        "basis": {"type": "string", "minLength": 1},
    },
}
_FRACTION = {"type": ["number", "null"], "minimum": 0}
_KERNEL_ROW = {
    "type": "object",
    "required": ["layers", "n", "k", "m", "path", "timing", "seconds", "bytes", "bytes_per_s", "fraction_of_copy",
                 "fraction_of_datasheet", "flops_per_s", "fraction_of_fp16_peak", "tiles"],
    "additionalProperties": False,
    "properties": {
        "layers": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "n": {"type": "integer", "minimum": 1}, "k": {"type": "integer", "minimum": 1},
        "m": {"type": "integer", "minimum": 1},
        "path": {"enum": ["fused", "unfused", "fp16"]},
        "timing": {"enum": ["cuda-graph", "eager"]},
        "seconds": {"type": "number", "exclusiveMinimum": 0},
        "bytes": {"type": "integer", "minimum": 1},
        "bytes_per_s": {"type": "number", "exclusiveMinimum": 0},
        "fraction_of_copy": {"type": "number", "minimum": 0},
        "fraction_of_datasheet": _FRACTION,
        "flops_per_s": {"type": "number", "minimum": 0},
        "fraction_of_fp16_peak": _FRACTION,
        "tiles": {"type": ["object", "null"]},
    },
}
_KERNEL = {  # servebook.lab.kernel.measure_kernel: the fused kernel alone, layer shape by layer shape
    "type": "object",
    "required": ["model", "group_size", "dtype", "copy", "datasheet_bytes_per_s", "rows", "max_relative_error"],
    "properties": {
        "model": {"type": "string"}, "group_size": {"type": "integer", "minimum": 1},
        "copy": {"type": "object", "required": ["bytes", "seconds", "bytes_per_s", "basis"]},
        "datasheet_bytes_per_s": {"type": ["number", "null"]},
        "max_relative_error": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
        "rows": {"type": "array", "items": _KERNEL_ROW},
    },
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "servebook lab results",
    "type": "object",
    "required": ["schema_version", "date", "device", "versions", "config", "models", "rows", "skipped", "vllm",
                 "run_seconds", "note"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"},
        "device": {
            "type": "object", "required": ["kind", "name", "total_memory", "threads", "roofline_gpu"],
            "properties": {"kind": {"enum": ["cpu", "cuda"]}, "name": {"type": "string", "minLength": 1},
                           "index": {"type": "integer", "minimum": 0},
                           "total_memory": {"type": ["integer", "null"], "minimum": 1},
                           "threads": {"type": ["integer", "null"], "minimum": 1},
                           "roofline_gpu": {"type": ["string", "null"]}},
        },
        "versions": {"type": "object", "required": ["python", "servebook", "torch", "transformers"],
                     "additionalProperties": {"type": ["string", "null"]}},
        "config": {"type": "object"},
        "models": {"type": "array", "items": {
            "type": "object", "required": ["name", "source", "variant", "dtype", "spec", "reduced_from", "note"],
            "properties": {"name": {"type": "string"}, "source": {"enum": ["hub", "project", "random"]},
                           "variant": {"enum": list(VARIANTS)}, "dtype": {"enum": list(FLOAT_VARIANTS)},
                           "spec": {"type": "object", "required": ["n_layers", "d_model", "n_kv_heads", "head_dim"]},
                           "reduced_from": {"type": ["string", "null"]}, "note": {"type": "string"}}}},
        "rows": {"type": "array", "items": _ROW},
        "skipped": {"type": "array", "items": {
            "type": "object", "required": ["what", "reason"], "additionalProperties": False,
            "properties": {"what": {"type": "string"}, "reason": {"type": "string", "minLength": 1}}}},
        "vllm": {"type": "object", "required": ["status"],
                 "properties": {"status": {"enum": ["measured", "skipped"]}}},
        "run_seconds": {"type": "number", "minimum": 0},
        "note": {"type": "string"},
        "kernel": _KERNEL,
    },
}
"""The JSON schema of a results document (draft 2020-12)."""


def validate(results: dict[str, Any], schema: bool = True) -> None:
    """Check ``results`` against :data:`SCHEMA` and its internal consistency; raise ``ValueError`` naming the fault.

    Beyond the schema: each row's model was measured, units match quantities,
    and each ratio is measured / predicted.  ``schema=False`` checks only
    those (where ``jsonschema`` is not installed; a recorded run is checked
    in full whenever it is read).
    """
    if flag("schema", schema):
        import jsonschema

        try:
            jsonschema.validate(results, SCHEMA)
        except jsonschema.ValidationError as error:
            where = "/".join(str(p) for p in error.absolute_path) or "the document"
            raise ValueError(f"lab results do not match the schema at {where}: {error.message}") from None
    measured = {(m["name"], m["variant"]) for m in results["models"]}
    for i, row in enumerate(results["rows"]):
        if (row["model"], row["variant"]) not in measured:
            raise ValueError(f"rows/{i}: {row['model']} [{row['variant']}] is not in the models list")
        if row["unit"] != QUANTITIES[row["quantity"]]:
            raise ValueError(f"rows/{i}: {row['quantity']} is in {QUANTITIES[row['quantity']]!r}, not {row['unit']!r}")
        if (row["predicted"] is None) != (row["ratio"] is None):
            raise ValueError(f"rows/{i}: a ratio needs a prediction, and a prediction its ratio")
        if row["predicted"] is not None and not math.isclose(row["ratio"], row["measured"] / row["predicted"],
                                                             rel_tol=1e-9):
            raise ValueError(f"rows/{i}: ratio {row['ratio']} is not measured / predicted")


def recorded_dir() -> Path:
    """Where the book keeps recorded runs (``servebook/data/lab``)."""
    return Path(str(importlib.resources.files("servebook") / "data" / "lab"))


def recorded_runs(directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Every recorded run, oldest first (by date), each validated."""
    folder = Path(directory) if directory is not None else recorded_dir()
    runs = []
    for path in sorted(folder.glob("*.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        validate(results)
        runs.append(results)
    return sorted(runs, key=lambda r: r["date"])


def latest_recorded(prefer: str = "cuda", directory: str | Path | None = None) -> dict[str, Any]:
    """The most recent recorded run, from a GPU if one was recorded (``prefer="cuda"``), else any."""
    choice("prefer", prefer, ("cuda", "cpu", "any"))
    runs = recorded_runs(directory)
    if not runs:
        raise FileNotFoundError(f"no recorded lab runs in {directory or recorded_dir()}")
    preferred = [r for r in runs if r["device"]["kind"] == prefer]
    return (preferred or runs)[-1]


def write_results(results: dict[str, Any], path: str | Path, schema: bool = True) -> Path:
    """Validate (``schema``: see :func:`validate`) and write ``results`` as indented JSON (numbers as measured)."""
    validate(results, schema)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return path


def _show(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "B":
        return f"{value / MiB:,.3f} MiB"
    if unit == "s":
        return f"{value * 1e3:,.3f} ms"
    if unit == "tokens/s":
        return f"{value:,.0f}"
    return f"{value:,.3f}"


_NUMERIC_COLUMNS = {"B", "S", "predicted", "measured", "ratio"}  # right-aligned in both table formats


def table(results: dict[str, Any], quantities: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Rows for display: predicted, measured and ratio side by side, in readable units."""
    out = []
    for row in results["rows"]:
        if quantities is not None and row["quantity"] not in quantities:
            continue
        out.append({
            "model": row["model"], "variant": row["variant"], "quantity": row["quantity"],
            "B": "" if row["batch"] is None else str(row["batch"]),
            "S": "" if row["seq_len"] is None else str(row["seq_len"]),
            "predicted": _show(row["predicted"], row["unit"]), "measured": _show(row["measured"], row["unit"]),
            "ratio": "-" if row["ratio"] is None else f"{row['ratio']:.3f}",
        })
    return out


def format_table(rows: list[dict[str, str]]) -> str:
    """A plain-text table of :func:`table`'s rows."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}

    def line(values):
        return "  ".join(values[c].rjust(widths[c]) if c in _NUMERIC_COLUMNS else values[c].ljust(widths[c])
                         for c in columns)

    return "\n".join([line({c: c for c in columns}), line({c: "-" * widths[c] for c in columns}),
                      *(line(r) for r in rows)])


def markdown_table(rows: list[dict[str, str]]) -> str:
    """A Markdown pipe table of :func:`table`'s rows (numbers right-aligned)."""
    if not rows:
        return "*(no rows)*"
    columns = list(rows[0])
    align = {c: "--:" if c in _NUMERIC_COLUMNS else ":--" for c in columns}
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(align[c] for c in columns) + "|"]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def provenance(results: dict[str, Any]) -> str:
    """One sentence: on which device, when, with which libraries, and how long the run took."""
    device, versions = results["device"], results["versions"]
    threads = f", {device['threads']} torch thread{'s' if device['threads'] != 1 else ''}" if device["threads"] else ""
    memory_note = f", {device['total_memory'] / GiB:.1f} GiB" if device["total_memory"] else ""
    return (f"{device['name']}{memory_note}{threads}, on {results['date'][:10]} at {results['date'][11:16]} UTC, "
            f"with servebook {versions['servebook']}, PyTorch {versions['torch']} and transformers "
            f"{versions['transformers']}; the run took {results['run_seconds']:.1f} s")
