"""A capacity planner: a model on a GPU, weights at some precision, an overhead, and users that fit.

:func:`capacity_text` computes everything the planner shows, from
:func:`servebook.memory.capacity_plan`; the widget from :func:`capacity_planner`
only collects inputs and displays that text, so what a test checks is what a
reader sees.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real

from ... import checks, models, roofline
from ...models import ModelSpec
from ...units import DTYPE_BYTES, UNITS, GiB, canonical_dtype
from .. import scenarios

SIZE_UNITS = ("GiB", "GB")
WEIGHT_DTYPES = ("fp16", "int8", "int4")
CUSTOM_GPU = "custom"
DEFAULT = scenarios.CAPACITY  # the planner opens on chapter 07's case


def size_bytes(name: str, value: Real, unit: str, allow_zero: bool = True) -> int:
    """``value`` ``unit``s ("GiB" or "GB") as whole bytes (floor: a partial byte holds nothing)."""
    checks.choice("unit", unit, SIZE_UNITS)
    checks.positive(name, value, allow_zero=allow_zero)
    # Through str, so that 69.5 means 69.5 and not the binary float nearest to it.
    return math.floor(Fraction(str(value)) * UNITS[unit])


def experts_text(spec: ModelSpec) -> str | None:
    """For a mixture of experts: memory holds every expert, whatever a token uses (None for a dense model)."""
    if spec.moe is None:
        return None
    return (f"all {spec.moe.n_experts} experts are held; {spec.count_active_params():,} parameters "
            "are active per token (they set the FLOPs, not the memory)")


def _experts_line(spec: ModelSpec) -> list[str]:
    text = experts_text(spec)
    return [] if text is None else [f"experts      {text}"]


def _window_note(spec: ModelSpec) -> str:
    kind = spec.local_kind
    return "" if kind is None else (f" ({spec.layers_of(kind)} of {spec.n_layers} layers {kind}, "
                                    f"at most {spec.local_span:,} tokens each)")


def capacity_text(model: ModelSpec | str = DEFAULT.model, gpu: str = DEFAULT.gpu, weights: str = "fp16",
                  overhead: Real = DEFAULT.overhead // GiB, seq_len: int = DEFAULT.seq_len,
                  kv_dtype: str = DEFAULT.kv_dtype, unit: str = "GiB", group_size: int | None = None,
                  gpu_memory: Real | None = None) -> str:
    """Everything the capacity planner shows, as plain text.

    ``gpu`` is a name from :data:`servebook.roofline.GPUS` (its memory is what
    ``nvidia-smi`` reports), or ``"custom"`` with ``gpu_memory`` in ``unit``.
    ``overhead`` is in ``unit`` too.  The plan, then the users that fit with
    each weight precision, so the gain of quantizing is one glance away.
    """
    spec = models.resolve(model)
    if spec.n_params is None:
        raise ValueError(f"{spec.display_name}: a capacity plan needs the model's parameter count (n_params)")
    weights = canonical_dtype(weights)
    if gpu == CUSTOM_GPU:
        if gpu_memory is None:
            raise ValueError("gpu 'custom' needs gpu_memory (in the chosen unit)")
        gpu_bytes, gpu_name = size_bytes("gpu_memory", gpu_memory, unit, allow_zero=False), "custom GPU"
    else:
        device = roofline.gpu(gpu)
        gpu_bytes, gpu_name = device.memory, f"{device.display_name} ({device.memory_label} on the datasheet)"
    overhead_bytes = size_bytes("overhead", overhead, unit)
    if overhead_bytes >= gpu_bytes:
        raise ValueError(f"overhead ({overhead} {unit}) must be smaller than the GPU's memory "
                         f"({gpu_bytes / UNITS[unit]:,.2f} {unit})")
    case = scenarios.CapacityCase(spec, gpu, overhead_bytes, seq_len, kv_dtype, gpu_bytes=gpu_bytes)
    per_request = case.per_user
    u = UNITS[unit]

    def groups(dtype: str) -> int | None:
        return group_size if dtype == "int4" else None  # group scales are an INT4 checkpoint's

    weight_bytes = case.weights(weights, groups(weights))
    lines = [
        f"GPU          {gpu_name}: {gpu_bytes:,} bytes = {gpu_bytes / u:,.3f} {unit}",
        f"weights      {spec.display_name}, {spec.n_params:,} parameters in {weights}"
        + (f" (groups of {group_size})" if group_size and weights == "int4" else "")
        + f": {weight_bytes / u:,.3f} {unit}",
        *_experts_line(spec),
        f"overhead     {overhead_bytes / u:,.3f} {unit}",
        f"per user     S = {seq_len:,} tokens of {canonical_dtype(kv_dtype)} KV: {per_request / u:,.3f} {unit}"
        + _window_note(spec),
    ]
    plan = case.plan(weight_bytes)
    if plan is None:
        fixed = weight_bytes + overhead_bytes
        lines.append(f"plan         does NOT fit: weights + overhead = {fixed / u:,.3f} {unit}"
                     f" > {gpu_bytes / u:,.3f} {unit}")
    else:
        lines.append(f"plan         {plan.describe(unit)}")
    users = {dtype: case.users(dtype, groups(dtype)) for dtype in WEIGHT_DTYPES}
    counts = [f"{dtype} {'no fit' if n is None else n}" for dtype, n in users.items()]
    lines.append(f"by precision {' | '.join(counts)} users")
    return "\n".join(lines)


GROUP_CHOICES = (("none", 0), ("32", 32), ("64", 64), ("128", 128))
"""The INT4 group menu: 0 stands for "no groups" (a menu whose value is None shows a blank box)."""


def capacity_planner(model: str = DEFAULT.model, gpu: str = DEFAULT.gpu, weights: str = "fp16",
                     overhead: float = DEFAULT.overhead / GiB, seq_len: int = DEFAULT.seq_len,
                     kv_dtype: str = DEFAULT.kv_dtype, unit: str = "GiB"):
    """The interactive planner (ipywidgets): change the model, GPU, precisions, overhead or S; see who fits.

    Bad input shows its error message instead of a number.  A :class:`~.layout.Panel`
    whose ``controls`` are named after :func:`capacity_text`'s arguments.
    """
    import ipywidgets as w

    from .layout import Panel

    gpus = [(device.display_name, name) for name, device in roofline.GPUS.items()] + [(CUSTOM_GPU, CUSTOM_GPU)]
    planned = [(models.display_name(n), n) for n in models.names() if models.get(n).n_params]
    panel = Panel({
        "model": ("model", w.Dropdown(options=planned, value=model)),
        "gpu": ("GPU", w.Dropdown(options=gpus, value=gpu)),
        "gpu_memory": ("custom memory", w.BoundedFloatText(value=80.0, min=0.001, max=10**6,
                                                           disabled=gpu != CUSTOM_GPU)),
        "weights": ("weights", w.Dropdown(options=list(WEIGHT_DTYPES), value=weights)),
        "group_size": ("INT4 group", w.Dropdown(options=GROUP_CHOICES, value=0)),
        "overhead": ("overhead", w.BoundedFloatText(value=overhead, min=0, max=10**6)),
        "seq_len": ("seq len S", w.BoundedIntText(value=seq_len, min=1, max=10**8)),
        "kv_dtype": ("KV dtype", w.Dropdown(options=list(DTYPE_BYTES), value=canonical_dtype(kv_dtype))),
        "unit": ("unit", w.ToggleButtons(options=list(SIZE_UNITS), value=unit)),
    })
    boxes = panel.controls

    def refresh(*_) -> None:
        boxes["gpu_memory"].disabled = boxes["gpu"].value != CUSTOM_GPU
        values = {name: box.value for name, box in boxes.items()}
        values["group_size"] = values["group_size"] or None
        panel.show(lambda: capacity_text(**values))

    panel.follow(refresh)
    return panel
