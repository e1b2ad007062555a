"""Count every registry model's parameters with transformers itself, and keep the counts as a golden file.

transformers builds a model from its config on the ``meta`` device (shapes, no
memory), and ``sum(p.numel() for p in model.parameters())`` is then the exact
count of the tensors the config describes (tied weights once).  That is the
oracle for ``ModelSpec.count_params()``.  A multimodal model is counted twice:
its language model (what the spec describes) and the whole model with its
vision encoder (what its authors usually publish).

usage: python scripts/count_params_oracle.py            # write tests/golden/param-counts.json
       python scripts/count_params_oracle.py --check    # compare with it, exit 1 on a difference

Needs torch and transformers (the ``torch`` extra).  The largest models take a
few seconds each on a CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "param-counts.json"


def _loadable(config: dict) -> dict:
    """The config as transformers 5's strict config classes accept it.

    Llama 4's published text_config writes ``attn_temperature_tuning: 4`` where
    Llama4TextConfig now wants a bool; the value changes no tensor's shape.
    """
    config = copy.deepcopy(config)
    config.pop("_name_or_path", None)
    text = config.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("attn_temperature_tuning"), int):
        text["attn_temperature_tuning"] = bool(text["attn_temperature_tuning"])
    return config


def transformers_count(config: dict, whole_model: bool = False) -> int:
    """Parameters of the model transformers builds from ``config`` (its language model, or the whole model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    built = AutoConfig.for_model(**_loadable(config))
    with torch.device("meta"):
        if whole_model:
            model = AutoModelForImageTextToText.from_config(built)
        else:
            model = AutoModelForCausalLM.from_config(built.get_text_config())
    return sum(p.numel() for p in model.parameters())


def oracle_counts() -> dict[str, dict[str, int]]:
    """Every registry model's counts, by id: ``language_model`` and, for a multimodal config, ``whole_model``."""
    sys.path.insert(0, str(ROOT / "companion"))
    from servebook import models

    counts = {}
    for model_id in models.names():
        config = models.record(model_id)["config"]
        entry = {"language_model": transformers_count(config)}
        if "text_config" in config:
            entry["whole_model"] = transformers_count(config, whole_model=True)
        counts[model_id] = entry
        print(f"{model_id:20} {entry}", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the golden file instead of writing it")
    args = parser.parse_args(argv)
    import transformers

    counts = oracle_counts()
    document = {"about": "sum(p.numel() for p in model.parameters()) of each registry config built by transformers "
                         "on the meta device (scripts/count_params_oracle.py)",
                "transformers": transformers.__version__, "counts": counts}
    if args.check:
        stored = json.loads(GOLDEN.read_text(encoding="utf-8"))["counts"]
        differ = {k: (stored.get(k), v) for k, v in counts.items() if stored.get(k) != v}
        print(json.dumps(differ, indent=2) if differ else "identical")
        return 1 if differ else 0
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
