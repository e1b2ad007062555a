"""A KV-cache calculator: a model (from the registry or custom), S, B, dtype and a budget in GiB or GB.

:func:`kv_calculator_rows` computes everything the calculator shows and
:func:`kv_calculator_text` lays it out; the widget from :func:`kv_calculator`
only collects inputs and displays that text, so what a test checks is what a
reader sees.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real

from ... import checks, memory, models
from ...models import CHUNKED, GLOBAL, MLA, SLIDING, ModelSpec
from ...units import DTYPE_BYTES, UNITS, bytes_per_element, canonical_dtype
from ..scenarios import KV_BUDGET

CUSTOM = "custom"
BUDGET_UNITS = ("GiB", "GB")

# (binary, decimal) unit pairs, largest first: a size is shown in the largest pair it reaches.
_UNIT_PAIRS = (("GiB", "GB"), ("MiB", "MB"), ("KiB", "KB"))


def custom_model(n_layers: int, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 head_dim: int | None = None, *, window: int | None = None, local_layers: int | None = None,
                 local_kind: str = SLIDING, kv_rank: int | None = None, rope_dim: int | None = None) -> ModelSpec:
    """A model from its shape alone (``n_kv_heads`` defaults to ``n_heads``: multi-head attention).

    ``head_dim`` is the width of one head (default d_model / n_heads).  With
    ``window`` W, ``local_layers`` of the layers (default: all) are sliding-
    window layers, or chunked ones with ``local_kind="chunked"``; which layers
    they are does not change a byte.  ``kv_rank`` and ``rope_dim`` make it
    multi-head latent attention: a latent of ``kv_rank`` and a rope key of
    ``rope_dim`` elements per token and layer, the heads being ``head_dim`` wide.
    """
    checks.choice("local_kind", local_kind, (SLIDING, CHUNKED))
    if window is None and local_layers is not None:
        raise ValueError(f"local_layers ({local_layers}) needs a window: give window, the tokens a local layer holds")
    n_layers = checks.whole("n_layers", n_layers)
    n_local = n_layers if local_layers is None else checks.whole("local_layers", local_layers, 0, n_layers)
    layer_types = None if window is None else (local_kind,) * n_local + (GLOBAL,) * (n_layers - n_local)
    if (kv_rank is None) != (rope_dim is None):
        raise ValueError(f"kv_rank ({kv_rank}) and rope_dim ({rope_dim}) make multi-head latent attention "
                         "together: give both or neither")
    mla = None
    if kv_rank is not None:
        width = d_model // n_heads if head_dim is None else head_dim
        mla = MLA(kv_rank=kv_rank, rope_dim=rope_dim, nope_dim=width - checks.whole("rope_dim", rope_dim, 1, width))
    return ModelSpec(CUSTOM, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads,
                     head_dim=head_dim, layer_types=layer_types, mla=mla,
                     sliding_window=window if local_kind == SLIDING else None,
                     attention_chunk=window if local_kind == CHUNKED else None)


def budget_bytes(budget: Real, unit: str = "GiB") -> int:
    """``budget`` of ``unit`` ("GiB" or "GB") in whole bytes (a partial byte holds nothing: floor)."""
    checks.choice("budget_unit", unit, BUDGET_UNITS)
    checks.positive(f"budget ({unit})", budget)
    # Through str, so that 69.5 means 69.5 and not the binary float nearest to it.
    return math.floor(Fraction(str(budget)) * UNITS[unit])


def _number(value: float) -> str:
    # At most three decimals, and none that are trailing zeros: 800 KiB, 3.125 GiB, 3.355 GB.
    return f"{value:,.3f}".rstrip("0").rstrip(".")


def _plural(count, noun: str) -> str:
    return f"{_number(float(count))} {noun}{'' if count == 1 else 's'}"


def element_text(dtype: str) -> str:
    """"2 bytes per element", "0.5 bytes per element": what one element of ``dtype`` occupies."""
    return f"{_plural(bytes_per_element(dtype), 'byte')} per element"


def fmt_unit(n_bytes: int, family: str = "binary") -> str:
    """``n_bytes`` in the largest unit of ``family`` ("binary": KiB..GiB, "decimal": KB..GB) it reaches."""
    checks.choice("family", family, ("binary", "decimal"))
    index = 0 if family == "binary" else 1
    for pair in _UNIT_PAIRS:
        if n_bytes >= UNITS[pair[index]]:
            return f"{_number(n_bytes / UNITS[pair[index]])} {pair[index]}"
    return f"{n_bytes:,} bytes"


def fmt_size(n_bytes: int) -> str:
    """``n_bytes`` exactly, then in the binary and the decimal unit of its size: both readings, always."""
    if n_bytes < UNITS["KiB"]:
        return f"{n_bytes:,} bytes"
    return f"{n_bytes:,} bytes = {fmt_unit(n_bytes, 'binary')} = {fmt_unit(n_bytes, 'decimal')}"


def attention_text(spec: ModelSpec) -> str:
    """The attention and the width one token stores per layer, in the words of the chapters."""
    if spec.mla is not None:
        return (f"MLA, L = {spec.n_layers} layers, latent {spec.mla.kv_rank:,} + rope key {spec.mla.rope_dim:,} "
                f"= {spec.cached_width:,} elements per layer, stored once")
    return (f"{spec.attention}, L = {spec.n_layers} layers, "
            f"kv_dim = {_plural(spec.n_kv_heads, 'KV head')} × {spec.head_dim} = {spec.kv_dim:,}")


def layer_pattern_text(spec: ModelSpec) -> str:
    """How many layers are global and how many local, and the most tokens a local layer holds."""
    kind, span = spec.local_kind, spec.local_span
    return (f"{spec.layers_of(GLOBAL)} global + {spec.layers_of(kind)} {kind} (W = {span:,}): "
            f"a {kind} layer holds at most {span:,} tokens of a request")


def _past_the_window(spec: ModelSpec) -> str:
    if spec.local_kind is None:
        return ""
    grows = spec.layers_of(GLOBAL)
    return (f" while S <= {spec.local_span:,}; past it "
            + (f"only the {grows} global layers grow" if grows else "the cache stops growing"))


def kv_calculator_rows(model: ModelSpec | str, seq_len: int, batch: int = 1, dtype: str = "fp16",
                       budget: Real = 40, budget_unit: str = "GiB") -> list[tuple[str, str]]:
    """Everything the KV-cache calculator shows, as (label, value) rows.

    The KV bytes per token, per request and for the batch (each exactly and in
    both unit systems), the largest batch of ``seq_len``-token requests that
    fits ``budget`` (floor), whether ``batch`` fits, and the longest sequence
    each of ``batch`` requests could have within the budget.
    """
    spec = models.resolve(model)
    dtype = canonical_dtype(dtype)
    budget_b = budget_bytes(budget, budget_unit)
    per_token = memory.kv_bytes_per_token(spec, dtype)
    per_request = memory.kv_cache_bytes(spec, seq_len=seq_len, dtype=dtype)
    total = memory.kv_cache_bytes(spec, seq_len=seq_len, batch=batch, dtype=dtype)
    fits = memory.max_batch(budget_b, per_request)
    longest = memory.longest_seq_len(spec, budget_b, batch, dtype)  # None: the cache stops growing
    family = "binary" if budget_unit == "GiB" else "decimal"

    def short(n: int) -> str:
        return fmt_unit(n, family)

    rows = [
        ("model", f"{spec.display_name}: {attention_text(spec)}"),
        *([("layers", layer_pattern_text(spec))] if spec.local_kind else []),
        ("dtype", f"{dtype}, {element_text(dtype)}"),
        ("per token", fmt_size(per_token) + _past_the_window(spec)),
        ("per request", f"S = {seq_len:,}: {fmt_size(per_request)}"),
        ("batch", f"B = {batch:,}: {fmt_size(total)}"),
        ("budget", f"{budget:g} {budget_unit} = {fmt_size(budget_b)}"),
        ("fits", f"{fits:,} requests of S = {seq_len:,} ({short(budget_b - fits * per_request)} left over; "
                 f"request {fits + 1:,} would overflow it by {short((fits + 1) * per_request - budget_b)})"),
        ("your batch", f"B = {batch:,} fits, with {short(budget_b - total)} to spare" if total <= budget_b else
                       f"B = {batch:,} does NOT fit: {short(total - budget_b)} over the budget"),
        ("longest S", f"{longest:,} tokens per request for B = {batch:,} within the budget" if longest is not None
                      else f"any: every layer is {spec.local_kind}, so a request's cache stops growing at "
                           f"{spec.local_span:,} tokens, and B = {batch:,} such caches fit"),
    ]
    if spec.max_seq_len is not None and seq_len > spec.max_seq_len:
        rows.append(("note", f"S = {seq_len:,} is beyond {spec.display_name}'s context window "
                             f"({spec.max_seq_len:,} tokens)"))
    return rows


def kv_calculator_text(model: ModelSpec | str, seq_len: int, batch: int = 1, dtype: str = "fp16",
                       budget: Real = 40, budget_unit: str = "GiB") -> str:
    """The calculator's text: the rows of :func:`kv_calculator_rows`, one per line, labels aligned."""
    rows = kv_calculator_rows(model, seq_len, batch=batch, dtype=dtype, budget=budget, budget_unit=budget_unit)
    return "\n".join(f"{label:<12} {value}" for label, value in rows)


# The boxes a "custom" model's shape is typed in: field -> (label, smallest value, largest value).
# A 0 in a box whose smallest value is 0 means "none": no window, all layers local, no latent.
_SHAPE_BOXES = {"n_layers": ("layers L", 1, 10_000), "d_model": ("d_model", 1, 10**6),
                "n_heads": ("heads", 1, 10_000), "n_kv_heads": ("KV heads", 1, 10_000),
                "head_dim": ("head width", 1, 10_000), "window": ("window W", 0, 10**8),
                "local_layers": ("local layers", 0, 10_000), "kv_rank": ("MLA latent", 0, 10**5),
                "rope_dim": ("MLA rope key", 0, 10_000)}


def shape_fields(spec: ModelSpec) -> dict[str, int | str]:
    """The calculator's shape boxes for ``spec``: what picking a registry model fills in (0 where it has none)."""
    kind = spec.local_kind
    return {"n_layers": spec.n_layers, "d_model": spec.d_model, "n_heads": spec.n_heads,
            "n_kv_heads": spec.n_kv_heads, "head_dim": spec.head_dim, "window": spec.local_span or 0,
            "local_layers": spec.layers_of(kind) if kind else 0, "local_kind": kind or SLIDING,
            "kv_rank": spec.mla.kv_rank if spec.mla else 0, "rope_dim": spec.mla.rope_dim if spec.mla else 0}


def model_from_fields(**fields: int | str) -> ModelSpec:
    """The custom model the shape boxes describe (the inverse of :func:`shape_fields`)."""
    none_if_zero = {name: fields.pop(name) or None for name in ("window", "local_layers", "kv_rank", "rope_dim")}
    if none_if_zero["window"] is None:
        none_if_zero["local_layers"] = None  # without a window there are no local layers to count
    return custom_model(**fields, **none_if_zero)


def kv_calculator(model: str = KV_BUDGET.model, seq_len: int = KV_BUDGET.seq_len, batch: int = 1,
                  dtype: str = KV_BUDGET.dtype, budget: float = float(KV_BUDGET.budget_gib), budget_unit: str = "GiB"):
    """The interactive calculator (ipywidgets): pick a model or type a shape, see the KV bytes and what fits.

    Picking a registry model fills in its shape; picking "custom" lets you type
    layers, d_model, heads, KV heads and the head width, a window W with the
    number of local layers (sliding or chunked; 0 local layers: all of them),
    and MLA's latent and rope key (0: no window, no latent).  Bad input shows
    its error message instead of a number.  A :class:`~.layout.Panel`: its
    ``controls`` are named after :func:`kv_calculator_rows`'s arguments and the shape fields.
    """
    import ipywidgets as w

    from .layout import Panel

    checks.choice("model", model, [*models.names(), CUSTOM])
    choices = [(models.display_name(name), name) for name in models.names()] + [(CUSTOM, CUSTOM)]
    shape = {field: (label, w.BoundedIntText(min=low, max=high)) for field, (label, low, high) in _SHAPE_BOXES.items()}
    shape["local_kind"] = ("local kind", w.Dropdown(options=[SLIDING, CHUNKED]))
    panel = Panel({
        "model": ("model", w.Dropdown(options=choices, value=model)), **shape,
        "seq_len": ("seq len S", w.BoundedIntText(value=seq_len, min=1, max=10**8)),
        "batch": ("batch B", w.BoundedIntText(value=batch, min=1, max=10**6)),
        "dtype": ("dtype", w.Dropdown(options=list(DTYPE_BYTES), value=canonical_dtype(dtype))),
        "budget": ("budget", w.BoundedFloatText(value=budget, min=0.001, max=10**6)),
        "budget_unit": ("unit", w.ToggleButtons(options=list(BUDGET_UNITS), value=budget_unit)),
    })
    boxes = panel.controls
    shape_boxes = [boxes[field] for field in shape]

    def fill_shape(name: str) -> None:
        if name != CUSTOM:
            for field, value in shape_fields(models.get(name)).items():
                boxes[field].value = value
        for box in shape_boxes:
            box.disabled = name != CUSTOM

    def spec() -> ModelSpec:
        if boxes["model"].value == CUSTOM:
            return model_from_fields(**{field: boxes[field].value for field in shape})
        return models.get(boxes["model"].value)

    def refresh(change=None) -> None:
        if change is not None and change["owner"] is boxes["model"]:
            fill_shape(change["new"])
        panel.show(lambda: kv_calculator_text(spec(), seq_len=boxes["seq_len"].value, batch=boxes["batch"].value,
                                              dtype=boxes["dtype"].value, budget=boxes["budget"].value,
                                              budget_unit=boxes["budget_unit"].value))

    fill_shape(model)
    panel.follow(refresh)
    return panel
