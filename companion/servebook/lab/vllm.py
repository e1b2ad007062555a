"""vLLM's own KV-cache sizing, read from its start-up log, against servebook's from the same free memory."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import memory
from ..checks import byte_count, interval, whole
from ..models import ModelSpec
from ..units import GiB, ceil_div
from .device import Device, free_device_memory

_VLLM_PATTERNS = {
    "available_kv_gib": re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB"),
    "kv_cache_tokens": re.compile(r"KV cache size:\s*([\d,]+)\s*tokens"),
    "gpu_blocks": re.compile(r"# (?:GPU|CUDA) blocks:\s*([\d,]+)"),
    "max_concurrency": re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x"),
}


def parse_vllm_log(lines: Iterable[str]) -> dict[str, float | int]:
    """The KV-cache sizing that vLLM logs at start-up, from its log lines.

    V1 engines log ``Available KV cache memory: 4.80 GiB`` and ``GPU KV cache
    size: 34,952 tokens, Maximum concurrency for 8,192 tokens per request:
    4.27x``; V0 engines logged ``# GPU blocks: 2184``.  Keys found:
    ``available_kv_gib``, ``kv_cache_tokens``, ``gpu_blocks``,
    ``max_model_len``, ``max_concurrency``.
    """
    found: dict[str, float | int] = {}
    for line in lines:
        for key, pattern in _VLLM_PATTERNS.items():
            match = pattern.search(line)
            if not match:
                continue
            if key == "max_concurrency":
                found["max_model_len"] = int(match.group(1).replace(",", ""))
                found["max_concurrency"] = float(match.group(2))
            elif key == "available_kv_gib":
                found[key] = float(match.group(1))
            else:
                found[key] = int(match.group(1).replace(",", ""))
    return found


def servebook_vllm_prediction(spec: ModelSpec, kv_memory: int, max_model_len: int, block_size: int = 16,
                              dtype: str = "fp16") -> dict[str, float | int]:
    """What servebook predicts vLLM will size, from the KV memory vLLM says it has.

    Blocks hold ``block_size`` tokens of every layer's keys and values; a
    request of ``max_model_len`` tokens needs ceil(max_model_len / block_size)
    of them, so the concurrency is blocks over that (vLLM prints it as a ratio).
    """
    kv_memory = byte_count("kv_memory", kv_memory)
    max_model_len = whole("max_model_len", max_model_len)
    block_size = whole("block_size", block_size)
    per_block = block_size * memory.kv_bytes_per_token(spec, dtype)
    blocks = memory.max_batch(kv_memory, per_block)
    blocks_per_request = ceil_div(max_model_len, block_size)
    return {"gpu_blocks": blocks, "kv_cache_tokens": blocks * block_size,
            "max_concurrency": blocks / blocks_per_request,
            "requests_that_fit": memory.max_batch(blocks, blocks_per_request)}


@dataclass(frozen=True)
class _EngineSizing:
    """What a started vLLM engine said about its KV cache: its log lines, and what its config holds."""

    log_lines: list[str]
    block_size: int
    gpu_blocks: int | None
    spec: ModelSpec


class _LogLines(logging.Handler):
    """Keeps the messages of a logger, for reading vLLM's start-up report."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _why_no_vllm(device: Device) -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install vllm, on a CUDA machine): vLLM comparison skipped"
    if device.kind != "cuda":
        return "vLLM needs a CUDA GPU here: vLLM comparison skipped"
    return None


def _start_engine(model_name: str, device: Device, gpu_memory_utilization: float, max_model_len: int
                  ) -> _EngineSizing:
    """Start vLLM on ``model_name``, keep what it sized, and shut it down again."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine (and its log) in this process
    handler = _LogLines()
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(handler)
    try:
        from vllm import LLM

        llm = LLM(model=model_name, dtype="float16", gpu_memory_utilization=gpu_memory_utilization,
                  max_model_len=max_model_len, enforce_eager=True)
        cache_config = getattr(getattr(llm.llm_engine, "vllm_config", None), "cache_config", None) or getattr(
            llm.llm_engine, "cache_config", None)
        block_size = int(getattr(cache_config, "block_size", 16) or 16)
        engine_blocks = getattr(cache_config, "num_gpu_blocks", None)
        spec = ModelSpec.from_hf_config(llm.llm_engine.model_config.hf_config.to_dict(), name=model_name)
        del llm
    finally:
        vllm_logger.removeHandler(handler)
        free_device_memory(device)
    return _EngineSizing(handler.lines, block_size, engine_blocks, spec)


def _compare_sizing(model_name: str, engine: _EngineSizing, gpu_memory_utilization: float,
                    max_model_len: int) -> dict[str, Any]:
    """vLLM's logged sizing beside servebook's prediction from the KV memory vLLM reports."""
    logged = parse_vllm_log(engine.log_lines)
    if engine.gpu_blocks is not None:
        logged.setdefault("gpu_blocks", int(engine.gpu_blocks))
    if "available_kv_gib" not in logged:
        return {"status": "skipped", "reason": "vLLM's log had no 'Available KV cache memory' line to compare from",
                "vllm": logged}
    kv_memory = round(logged["available_kv_gib"] * GiB)
    predicted = servebook_vllm_prediction(engine.spec, kv_memory, int(logged.get("max_model_len", max_model_len)),
                                          engine.block_size, "fp16")
    # vLLM prints the memory to 0.01 GiB, so servebook's side is uncertain by half of that.
    tolerance = 0.005 * GiB / kv_memory
    comparison = {key: {"vllm": logged[key], "servebook": predicted[key], "ratio": logged[key] / predicted[key]}
                  for key in ("gpu_blocks", "kv_cache_tokens", "max_concurrency") if key in logged and predicted[key]}
    return {"status": "measured", "model": model_name, "block_size": engine.block_size,
            "gpu_memory_utilization": gpu_memory_utilization, "kv_memory_bytes": kv_memory,
            "relative_tolerance": tolerance, "vllm": logged, "servebook": predicted, "comparison": comparison}


def compare_vllm(model_name: str, device: Device, log: Callable[[str], None] = print,
                 gpu_memory_utilization: float = 0.5, max_model_len: int = 2048) -> dict[str, Any]:
    """Serve ``model_name`` with vLLM (where importable, on a GPU) and set its KV sizing beside servebook's.

    Returns ``{"status": "skipped", "reason": ...}`` when vLLM is not installed,
    there is no GPU, or vLLM fails; never raises for those.
    """
    gpu_memory_utilization = interval("gpu_memory_utilization", gpu_memory_utilization, 0, 1, include_low=False)
    max_model_len = whole("max_model_len", max_model_len)
    reason = _why_no_vllm(device)
    if reason is None:
        try:
            engine = _start_engine(model_name, device, gpu_memory_utilization, max_model_len)
        except Exception as error:  # vLLM raises many types; any of them means "no comparison", not a crash
            reason = f"vLLM could not serve {model_name}: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
    if reason is not None:
        log(reason)
        return {"status": "skipped", "reason": reason}
    return _compare_sizing(model_name, engine, gpu_memory_utilization, max_model_len)
