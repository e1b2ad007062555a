"""Reading a Hugging Face ``config.json``: the families readers serve, and a clear refusal for the rest.

:func:`from_hf_config` takes a dict, a path (the file or its folder) or a
transformers ``PretrainedConfig``, finds the language model in a multimodal
wrapper (``text_config``), and reads it with the reader of its ``model_type``
(:mod:`.families`).  Each reader knows the fields its transformers config
class reads and what they mean for the bytes (a window, latent attention,
experts, biases, norms, tied embeddings).

A field the config leaves out takes the default of the family's transformers
5 config class, as transformers itself would build the model: a rule
(``head_dim`` = hidden / heads, one key/value head per query head) or a value
(``tie_word_embeddings``, Gemma 3's ``vocab_size`` of 262,208, which its
multimodal configs leave out).  Many of those values are the family's flagship
model's, so each default used is written into the spec's ``notes``.  Three
fields have no default, because without them a config describes no model:
the layer count, the hidden width and the query heads.  A value the library
has no formula for, and a ``model_type`` it does not know, are refused: never
a dense fallback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks import whole
from .spec import ModelSpec


class Fields:
    """The fields of one (possibly nested) config, read by name; every error names the field.

    ``defaults`` collects each field that was absent and took its transformers
    default, so the spec can say so (:func:`from_hf_config` puts them in its notes).
    """

    def __init__(self, cfg: Mapping[str, Any], family: str, prefix: str = "") -> None:
        self.cfg, self.family, self.prefix = cfg, family, prefix
        self.defaults: list[str] = []

    def label(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def present(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def raw(self, *keys: str) -> Any:
        """The first of ``keys`` that is present (not null), or ``None``."""
        return next((self.cfg[k] for k in keys if self.cfg.get(k) is not None), None)

    def number(self, key: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
        """``value`` of field ``key`` as a whole number in range; a JSON value of another type is a ValueError too."""
        try:
            return whole(self.label(key), value, minimum, maximum)
        except TypeError as error:  # a string or a float in a JSON file is bad input, not a programming error
            raise ValueError(f"config.json field {self.label(key)!r} must be a whole number, got {value!r}") from error

    def need(self, key: str, *aliases: str, minimum: int = 1, why: str = "") -> int:
        """A whole number the spec cannot do without: absent, it is refused with the field's name."""
        value = self.raw(key, *aliases)
        if value is None:
            tried = f" (also tried: {', '.join(aliases)})" if aliases else ""
            raise ValueError(f"config.json is missing {self.label(key)!r}{tried}" + (f": {why}" if why else ""))
        return self.number(key, value, minimum)

    def _defaulted(self, key: str, default: Any) -> Any:
        self.defaults.append(f"{key}={default!r}")
        return default

    def get(self, key: str, *aliases: str, default: int | None = None, minimum: int = 1) -> int | None:
        """A whole number; absent or null, ``default`` (transformers' class default, or ``None``: its rule)."""
        value = self.raw(key, *aliases)
        if value is None:
            return None if default is None else self._defaulted(key, default)
        return self.number(key, value, minimum)

    def nullable(self, key: str, default: int | None, minimum: int = 1) -> int | None:
        """A whole number where null means none (a window, a low-rank query): only an absent key takes ``default``."""
        if key not in self.cfg:
            return self._defaulted(key, default)
        value = self.cfg[key]
        return None if value is None else self.number(key, value, minimum)

    def switch(self, key: str, default: bool) -> bool:
        """A true/false field; absent or null, transformers' default for the family."""
        value = self.cfg.get(key)
        if value is None:
            return self._defaulted(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"config.json field {self.label(key)!r} must be true or false, got {value!r}")
        return value

    def layer_list(self, key: str, n_layers: int) -> list[int]:
        """A list of layer indices (``mlp_only_layers``, ``moe_layers``), each in 0..n_layers-1."""
        value = self.cfg.get(key) or []
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"config.json field {self.label(key)!r} must be a list of layer indices, got {value!r}")
        return [self.number(key, i, 0, n_layers - 1) for i in value]

    def refuse(self, key: str, value: Any, supported: str) -> None:
        raise ValueError(f"config.json field {self.label(key)!r} = {value!r} is not supported for "
                         f"model_type {self.family!r}: {supported}")


def _as_dict(config: Any) -> tuple[dict[str, Any], str | None]:
    """The config as a plain dict, and a default name (the folder of a config.json)."""
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        return json.loads(path.read_text()), path.parent.name
    if isinstance(config, Mapping):
        return dict(config), None
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):  # a transformers PretrainedConfig, without importing transformers
        return dict(to_dict()), None
    raise TypeError("config must be a dict, a path to config.json or a transformers PretrainedConfig, "
                    f"got {type(config).__name__}")


WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text"}
"""Multimodal wrappers whose ``text_config`` may omit its own ``model_type``."""


def language_model(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The language model's config (a wrapper's ``text_config``) and the prefix its field names get in errors.

    The wrapper's ``tie_word_embeddings`` applies when the text config does
    not set its own (Gemma 3 and Llama 4 write it at the top).  Only the
    language model is described: a vision encoder's parameters are not counted.
    """
    text = cfg.get("text_config")
    if text is None:
        return dict(cfg), ""
    if not isinstance(text, Mapping):
        raise ValueError(f"config.json field 'text_config' must be an object, got {type(text).__name__}")
    inner = dict(text)
    if inner.get("model_type") is None:
        outer = cfg.get("model_type")
        if outer not in WRAPPERS:
            raise ValueError(f"config.json field 'text_config.model_type' is missing and the wrapper's model_type "
                             f"{outer!r} does not imply one (known wrappers: {', '.join(WRAPPERS)})")
        inner["model_type"] = WRAPPERS[outer]
    if inner.get("tie_word_embeddings") is None and cfg.get("tie_word_embeddings") is not None:
        inner["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    return inner, "text_config."


def from_hf_config(config: Mapping[str, Any] | str | os.PathLike | Any, name: str | None = None,
                   n_params: int | None = None, *, source: str = "Hugging Face config.json") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` (a dict, a path or a ``PretrainedConfig``).

    The ``model_type`` picks the reader (:data:`servebook.models.families.FAMILIES`);
    a config without one is read with the Llama field names and their GPT-style
    aliases (``n_layer``, ``n_embd``, ``n_head``, ``multi_query``), and refused
    if it carries a field that only a family reader understands.  A missing or
    invalid field raises a ``ValueError`` naming it; an unknown ``model_type``
    one that lists the supported ones.
    """
    from .families import CONFIG_CLASSES, FAMILIES, generic

    cfg, folder = _as_dict(config)
    cfg, prefix = language_model(cfg)
    model_type = cfg.get("model_type")
    if model_type is not None and model_type not in FAMILIES:
        raise ValueError(f"config.json field {prefix + 'model_type'!r} = {model_type!r} is not supported; "
                         f"servebook reads: {', '.join(FAMILIES)}")
    fields = Fields(cfg, model_type or "generic", prefix)
    kwargs = FAMILIES[model_type](fields) if model_type is not None else generic(fields)
    notes = ""
    if fields.defaults:
        config_class = CONFIG_CLASSES.get(model_type, "the Llama reading")
        notes = f"fields absent from config.json, set to {config_class}'s defaults: {', '.join(fields.defaults)}"
    return ModelSpec(name=name or folder or cfg.get("_name_or_path") or model_type or "hf-model",
                     n_params=n_params, source=source, notes=notes, **kwargs)
