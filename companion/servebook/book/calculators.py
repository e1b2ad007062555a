"""The numbers the web site's calculators read, written by servebook when the book is built.

On the site, the KV-cache calculator and the capacity planner are Observable JS cells
that run in the reader's browser, where there is no Python.  So servebook writes what
they need to ``ojs/calculators.json`` (read by the cells with ``FileAttachment``), and
the cells' JavaScript (``ojs/calculators.js``) only multiplies, sums, caps and floors it:

- per registry model and KV dtype, each layer kind's KV bytes per token (all layers of
  that kind together: K and V of every key/value head, or MLA's latent and rope key) and
  the most tokens one such layer holds (its window or chunk; none for a global layer);
- per model and weight precision, the weight bytes (INT4 also with groups of 32, 64, 128);
- per GPU, its memory as ``nvidia-smi`` reports it;
- the units, and the values each calculator opens on (the chapters' worked examples).

Every count is a whole number below 2^53, so JSON and JavaScript carry it exactly; the
JavaScript turns it into a BigInt before any arithmetic.  A model whose bytes per token
would not be whole (an odd width in a half-byte dtype) is refused, never rounded.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from .. import gpus, memory, models
from ..models import LAYER_KINDS, ModelSpec
from ..units import DTYPE_BYTES, UNITS, GiB, bytes_per_element
from . import scenarios
from .widgets import capacity, kv

FILE_NAME = "calculators.json"
MAX_SAFE_INTEGER = 2**53 - 1   # JavaScript's Number.MAX_SAFE_INTEGER: larger integers are not exact there
GROUP_SIZES = tuple(size for _, size in capacity.GROUP_CHOICES if size)
NO_GROUPS = "none"


def most_tokens_held(spec: ModelSpec, kind: str) -> int | None:
    """The most tokens one layer of ``kind`` holds, however long the request: its window or chunk (None: it grows)."""
    beyond = 1 + max(spec.sliding_window or 0, spec.attention_chunk or 0)  # longer than any window of the model
    held = memory.tokens_held(spec, kind, beyond)
    return held if held < beyond else None


def kv_layers(spec: ModelSpec, dtype: str) -> list[dict]:
    """Each layer kind of ``spec``: its layers, the most tokens one holds, and their KV bytes per token in ``dtype``."""
    found = []
    for kind in LAYER_KINDS:
        layers = spec.layers_of(kind)
        if not layers:
            continue
        per_token = memory.kv_bytes_by_layer_kind(spec, seq_len=1, dtype=dtype)[kind]
        exact = Fraction(layers * spec.cached_width) * bytes_per_element(dtype)
        if per_token != exact:  # servebook rounded a half byte up: summed over tokens, that would not add up
            raise ValueError(f"{spec.display_name} in {dtype}: {layers} {kind} layers store {float(exact):g} bytes "
                             "per token, not a whole number; the calculators' data holds whole bytes only")
        found.append({"kind": kind, "layers": layers, "cap": most_tokens_held(spec, kind),
                      "bytes_per_token": per_token})
    return found


def weight_table(spec: ModelSpec) -> dict[str, dict[str, int]] | None:
    """Weight bytes per precision, as the planner counts them (INT4 also group-wise); None without a parameter count."""
    if spec.n_params is None:
        return None
    case = scenarios.CapacityCase(spec)
    table = {dtype: {NO_GROUPS: case.weights(dtype)} for dtype in capacity.WEIGHT_DTYPES}
    table["int4"] |= {str(size): case.weights("int4", size) for size in GROUP_SIZES}
    return table


def model_entry(spec: ModelSpec) -> dict:
    """Everything the calculators know of one model: what it is called, its cache, its weights."""
    return {
        "id": spec.name, "name": spec.display_name, "attention": kv.attention_text(spec),
        "layer_pattern": kv.layer_pattern_text(spec) if spec.local_kind else None,
        "max_seq_len": spec.max_seq_len, "n_params": spec.n_params,
        "experts": capacity.experts_text(spec),
        "kv": {dtype: kv_layers(spec, dtype) for dtype in DTYPE_BYTES},
        "weights": weight_table(spec),
    }


def defaults() -> dict:
    """What each calculator opens on: the chapters' worked examples, as the notebooks' widgets do."""
    budget, plan = scenarios.KV_BUDGET, capacity.DEFAULT
    return {
        "kv": {"model": budget.model, "seq_len": budget.seq_len, "batch": 1, "dtype": budget.dtype,
               "budget": budget.budget_gib, "unit": "GiB"},
        "capacity": {"model": plan.model, "gpu": plan.gpu, "weights": "fp16", "group": NO_GROUPS,
                     "overhead": plan.overhead // GiB, "seq_len": plan.seq_len, "kv_dtype": plan.kv_dtype,
                     "unit": "GiB", "gpu_memory": 80},
    }


def data() -> dict:
    """The calculators' data: every registry model, every KV dtype, every GPU of the table."""
    return {
        "units": {unit: UNITS[unit] for unit in kv.BUDGET_UNITS},
        "kv_dtypes": {dtype: kv.element_text(dtype) for dtype in DTYPE_BYTES},
        "weight_dtypes": list(capacity.WEIGHT_DTYPES),
        "group_sizes": [NO_GROUPS, *map(str, GROUP_SIZES)],
        "models": [model_entry(models.get(name)) for name in models.names()],
        "gpus": [{"id": name, "name": device.display_name, "memory": device.memory, "label": device.memory_label}
                 for name, device in gpus.GPUS.items()],
        "defaults": defaults(),
    }


def _unsafe(value, where: str = "data") -> list[str]:
    """Where ``value`` holds an integer JavaScript cannot carry exactly."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if abs(value) <= MAX_SAFE_INTEGER else [f"{where} = {value:,}"]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _unsafe(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _unsafe(item, f"{where}[{index}]")]
    return []


def data_text(content: dict | None = None) -> str:
    """The JSON the site's calculators read: the same bytes for the same servebook, one model per block."""
    content = data() if content is None else content
    unsafe = _unsafe(content)
    if unsafe:
        raise ValueError(f"integers above 2^53 - 1 are not exact in JavaScript: {', '.join(unsafe)}")
    return json.dumps(content, indent=1, ensure_ascii=False) + "\n"


def write(folder: Path) -> Path:
    """Write :data:`FILE_NAME` into ``folder`` (the book's ``ojs/``) and return its path."""
    target = Path(folder) / FILE_NAME
    target.write_text(data_text(), encoding="utf-8")
    return target
