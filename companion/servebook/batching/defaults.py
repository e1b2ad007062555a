"""The vLLM defaults the book cites, read from the committed facts file of the one version it describes.

``data/vllm-0.33.0.json`` is written by ``scripts/vllm_reference.py`` from the
vLLM 0.33.0 wheel itself (block size, memory utilisation, watermark, chunked
prefill, the KV-cache dtypes, and the per-device caps of
``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``), so that the
library and the prose read the same numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..checks import choice
from ..gpus import GPU, get
from ..units import GiB

VLLM_VERSION = "0.33.0"
CONTEXTS = ("OPENAI_API_SERVER", "LLM_CLASS")


@cache
def vllm_facts() -> dict:
    """The facts file of vLLM :data:`VLLM_VERSION`, as a dict."""
    text = resources.files("servebook").joinpath(f"data/vllm-{VLLM_VERSION}.json").read_text()
    return json.loads(text)


@dataclass(frozen=True)
class Limits:
    """A scheduler's caps: running sequences and tokens per step (``max_num_seqs``, ``max_num_batched_tokens``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    tier: str

    def as_options(self) -> dict[str, int]:
        """The two caps as keyword arguments of :func:`servebook.batching.simulate`."""
        return {"max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens}


def device_tier(gpu: GPU | str) -> str:
    """Which row of vLLM's batch defaults a GPU falls in, by its memory and name, as vLLM decides."""
    device = get(gpu)
    if device.memory >= 160 * GiB:
        return "large"
    if device.memory >= 70 * GiB and "a100" not in f"{device.name} {device.display_name}".lower():
        return "h100_class"
    return "other"


def vllm_limits(gpu: GPU | str, context: str = "OPENAI_API_SERVER") -> Limits:
    """vLLM 0.33.0's default caps for ``gpu``: for a server (``OPENAI_API_SERVER``) or offline (``LLM_CLASS``)."""
    choice("context", context, CONTEXTS)
    tier = device_tier(gpu)
    seqs, tokens = vllm_facts()["batch_defaults"][tier][context]
    return Limits(seqs, tokens, tier)
