"""The registry: real models, each a transcribed ``config.json`` read by :func:`~servebook.models.hf.from_hf_config`.

Every model is one file, ``servebook/data/models/<id>.json``: the config as
published on the Hugging Face Hub (``config``), where it was read and when
(``source``), the display name figures and tables use, the parameter count of
the tensors the config describes (``n_params``, which ``count_params()`` must
reproduce), and the count its authors published with its source
(``published_params``: equal, rounded, or different and why).  ``index.json``
gives the order.  Building every spec through the reader means the registry
exercises it on every import.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from ..checks import lookup
from .hf import from_hf_config
from .spec import ModelSpec

DATA = Path(__file__).resolve().parents[1] / "data" / "models"


def record(model_id: str) -> dict[str, Any]:
    """The registry file of ``model_id`` as stored (config, sources, published count)."""
    return json.loads((DATA / f"{model_id}.json").read_text(encoding="utf-8"))


def _spec(entry: dict[str, Any]) -> ModelSpec:
    source = entry["source"]
    spec = from_hf_config(entry["config"], name=entry["id"], n_params=entry["n_params"],
                          source=f"config.json of huggingface.co/{source['repo']} (read {source['read_on']})")
    notes = "; ".join(n for n in (entry.get("notes", ""), spec.notes) if n)
    return replace(spec, display_name=entry["display_name"], notes=notes)


@cache
def order() -> tuple[str, ...]:
    """The registry's ids in the order tables list them (the first edition's nine first)."""
    return tuple(json.loads((DATA / "index.json").read_text(encoding="utf-8"))["order"])


def _load() -> dict[str, ModelSpec]:
    ids = order()
    stored = sorted(p.stem for p in DATA.glob("*.json") if p.name != "index.json")
    if sorted(ids) != stored:
        raise RuntimeError(f"data/models/index.json lists {sorted(ids)} but the folder holds {stored}")
    return {model_id: _spec(record(model_id)) for model_id in ids}


REGISTRY: dict[str, ModelSpec] = _load()


def get(name: str) -> ModelSpec:
    """Look a model up in the registry by name (case-insensitive)."""
    return lookup("model", name, REGISTRY)


def resolve(model: ModelSpec | str) -> ModelSpec:
    """A spec as given, or the registry's spec for a name: what functions taking ``model`` accept."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return get(model)
    raise TypeError(f"model must be a ModelSpec or a registry name, got {type(model).__name__}")


def names() -> list[str]:
    return list(REGISTRY)


def display_name(model: ModelSpec | str) -> str:
    """The name figures and tables show ("Llama-2-13B"), for a registry id or a spec."""
    return resolve(model).display_name
