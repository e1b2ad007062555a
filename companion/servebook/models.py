"""Model shapes: the facts every memory formula needs.

A :class:`ModelSpec` holds the numbers that decide where GPU memory goes:
layers, hidden size, query heads, key/value heads, head dimension and the
parameter count.  The registry holds real models, each with the source of its
numbers, and :meth:`ModelSpec.from_hf_config` reads a Hugging Face
``config.json`` so a reader can check any model on the Hub.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checks import lookup, whole


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a decoder-only transformer.

    ``n_kv_heads`` is what separates the attention variants: equal to
    ``n_heads`` for multi-head attention (MHA), 1 for multi-query attention
    (MQA), anything in between that divides ``n_heads`` for grouped-query
    attention (GQA).
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    head_dim: int | None = None
    n_params: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    max_seq_len: int | None = None
    tied_embeddings: bool = False
    source: str = ""
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        whole("n_layers", self.n_layers)
        whole("d_model", self.d_model)
        whole("n_heads", self.n_heads)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        whole("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}): "
                "each key/value head serves a whole group of query heads"
            )
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) is not divisible by n_heads ({self.n_heads}); "
                    "give head_dim explicitly"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        whole("head_dim", self.head_dim)
        for name in ("n_params", "vocab_size", "intermediate_size", "max_seq_len"):
            if getattr(self, name) is not None:
                whole(name, getattr(self, name))

    @property
    def attention(self) -> str:
        """``"MHA"``, ``"GQA"`` or ``"MQA"``."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def kv_dim(self) -> int:
        """Width of the stored K (or V) vector per token per layer: n_kv_heads * head_dim.

        For MHA this is d_model, the seeds' formula; GQA and MQA shrink it.
        """
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head."""
        return self.n_heads // self.n_kv_heads

    def count_params(self) -> int:
        """Parameters of a Llama-style decoder computed from the shape.

        Attention (q, k, v, o), a gated MLP (gate, up, down), two RMSNorms per
        layer, the final norm, the embedding and (unless tied) the LM head.
        Needs ``vocab_size`` and ``intermediate_size``.
        """
        if self.vocab_size is None or self.intermediate_size is None:
            raise ValueError(f"{self.name}: count_params needs vocab_size and intermediate_size")
        d, q_dim = self.d_model, self.n_heads * self.head_dim
        attn = d * q_dim + 2 * d * self.kv_dim + q_dim * d
        mlp = 3 * d * self.intermediate_size
        per_layer = attn + mlp + 2 * d
        embeddings = self.vocab_size * d * (1 if self.tied_embeddings else 2)
        return self.n_layers * per_layer + d + embeddings

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | str | os.PathLike, name: str | None = None,
                       n_params: int | None = None) -> ModelSpec:
        """Build a spec from a Hugging Face ``config.json`` (a dict or a path).

        Reads the Llama/Mistral/Qwen field names and the GPT-style aliases
        (``n_layer``, ``n_embd``, ``n_head``).  A missing field raises a
        ``ValueError`` naming it.
        """
        if isinstance(config, (str, os.PathLike)):
            path = Path(config)
            if path.is_dir():
                path = path / "config.json"
            config = json.loads(path.read_text())
            name = name or path.parent.name
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a dict or a path to config.json, got {type(config).__name__}")
        cfg = dict(config)
        if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers nest the LM config
            cfg = {**cfg, **cfg["text_config"]}

        def read(*keys: str, required: bool = True) -> Any:
            for key in keys:
                if cfg.get(key) is not None:
                    return cfg[key]
            if required:
                raise ValueError(f"config.json is missing {keys[0]!r} (also tried: {', '.join(keys[1:]) or 'none'})")
            return None

        n_heads = read("num_attention_heads", "n_head", "num_heads")
        n_kv_heads = read("num_key_value_heads", "n_head_kv", "num_kv_heads", required=False)
        if n_kv_heads is None and cfg.get("multi_query"):
            n_kv_heads = 1
        return cls(
            name=name or cfg.get("_name_or_path") or cfg.get("model_type") or "hf-model",
            n_layers=read("num_hidden_layers", "n_layer", "num_layers"),
            d_model=read("hidden_size", "n_embd", "d_model"),
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=read("head_dim", required=False),
            n_params=n_params,
            vocab_size=read("vocab_size", required=False),
            intermediate_size=read("intermediate_size", "ffn_hidden_size", required=False),
            max_seq_len=read("max_position_embeddings", "n_positions", required=False),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            source="Hugging Face config.json",
        )


def _hf(repo: str) -> str:
    return f"config.json of huggingface.co/{repo}"


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec("llama-2-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
                  n_params=6_738_415_616, vocab_size=32_000, intermediate_size=11_008, max_seq_len=4096,
                  source=_hf("meta-llama/Llama-2-7b-hf") + "; Touvron et al. 2023"),
        ModelSpec("llama-2-13b", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40,
                  n_params=13_015_864_320, vocab_size=32_000, intermediate_size=13_824, max_seq_len=4096,
                  source=_hf("meta-llama/Llama-2-13b-hf") + "; Touvron et al. 2023"),
        ModelSpec("llama-2-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                  n_params=68_976_648_192, vocab_size=32_000, intermediate_size=28_672, max_seq_len=4096,
                  source=_hf("meta-llama/Llama-2-70b-hf") + "; Touvron et al. 2023"),
        ModelSpec("llama-3-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                  n_params=8_030_261_248, vocab_size=128_256, intermediate_size=14_336, max_seq_len=8192,
                  source=_hf("meta-llama/Meta-Llama-3-8B")),
        ModelSpec("llama-3-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                  n_params=70_553_706_496, vocab_size=128_256, intermediate_size=28_672, max_seq_len=8192,
                  source=_hf("meta-llama/Meta-Llama-3-70B")),
        ModelSpec("llama-3.2-1b", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64,
                  n_params=1_235_814_400, vocab_size=128_256, intermediate_size=8192, max_seq_len=131_072,
                  tied_embeddings=True, source=_hf("meta-llama/Llama-3.2-1B")),
        ModelSpec("mistral-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                  n_params=7_241_732_096, vocab_size=32_000, intermediate_size=14_336, max_seq_len=32_768,
                  source=_hf("mistralai/Mistral-7B-v0.1") + "; Jiang et al. 2023"),
        ModelSpec("qwen2.5-0.5b", n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, head_dim=64,
                  n_params=494_032_768, vocab_size=151_936, intermediate_size=4864, max_seq_len=32_768,
                  tied_embeddings=True, source=_hf("Qwen/Qwen2.5-0.5B"),
                  notes="q/k/v projections carry biases, which count_params() leaves out"),
        ModelSpec("falcon-7b", n_layers=32, d_model=4544, n_heads=71, n_kv_heads=1, head_dim=64,
                  n_params=6_921_720_704, vocab_size=65_024, max_seq_len=2048,
                  source=_hf("tiiuae/falcon-7b") + " (multi_query: true)",
                  notes="multi-query attention: one key/value head for all 71 query heads; "
                        "not Llama-style (parallel attention, non-gated MLP), so count_params() does not apply"),
    ]
}


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
