"""The lab: a real model on a real device, measured against the book's formulas.

For each model and precision, and for several batch sizes and prompt lengths,
the lab measures

- the weight bytes on the device (every tensor of the state dict, shared ones
  once; on CUDA also the allocator's own count),
- the KV-cache bytes during generation (the cache tensors' own sizes),
- the time of a prefill step and of a decode step (median of repeats, with the
  device synchronised around each), and tokens per second,
- the held-out perplexity,

and puts beside each measurement the prediction of :mod:`servebook.memory`
(bytes) or :mod:`servebook.roofline` (time, on a GPU in its table) and the
ratio measured / predicted.  Results are a JSON document (:data:`SCHEMA`) with
the device, the library versions and the date::

    python -m servebook.lab --out results.json

Bad input never crashes a run: a Hub model that cannot be loaded (no internet,
unknown name), a batch that does not fit, a missing optional library (vLLM) is
recorded under ``"skipped"`` with the reason, and the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import importlib.metadata
import importlib.resources
import importlib.util
import inspect
import json
import math
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import __version__, memory, models, roofline
from .checks import byte_count, whole
from .models import ModelSpec
from .units import GiB, MiB

SCHEMA_VERSION = 1
DEFAULT_HUB_MODEL = "Qwen/Qwen2.5-0.5B"
FLOAT_VARIANTS = ("fp32", "fp16", "bf16")
QUANT_BITS = {"w8a16": 8, "w4a16": 4}  # weight-only: the codes' width; activations stay in the float dtype
QUANT_VARIANTS = tuple(QUANT_BITS)
VARIANTS = FLOAT_VARIANTS + QUANT_VARIANTS
QUANTITIES = {
    "weight_bytes": "B", "allocated_bytes": "B", "kv_bytes": "B", "peak_bytes": "B",
    "prefill_s": "s", "decode_s": "s", "prefill_tokens_per_s": "tokens/s", "decode_tokens_per_s": "tokens/s",
    "perplexity": "1",
}


class ModelUnavailable(RuntimeError):
    """A model could not be loaded (offline, unknown name, missing files); the message says why."""


class MeasurementSkipped(RuntimeError):
    """One measurement cannot run here (it would not fit, or ran out of memory); the message says why."""


def _torch():
    try:
        import torch
    except ImportError as error:  # pragma: no cover - the lab is optional; the rest of the book runs without torch
        raise ImportError("the lab needs PyTorch and transformers: pip install 'servebook[torch]'") from error
    return torch


# ---------------------------------------------------------------------------
# The device.


@dataclass(frozen=True)
class Device:
    """Where the lab runs: a CUDA GPU or the CPU, with what a reader needs to compare runs."""

    kind: str                      # "cuda" or "cpu"
    name: str                      # "NVIDIA L4", "CPU: Intel(R) Xeon(R) ..."
    index: int = 0
    total_memory: int | None = None  # bytes (CUDA: the card's total; CPU: not measured)
    threads: int | None = None     # CPU threads torch uses
    roofline_gpu: str | None = None  # key of servebook.roofline.GPUS, or None when the table lacks this device

    @property
    def torch_device(self):
        torch = _torch()
        return torch.device(f"cuda:{self.index}") if self.kind == "cuda" else torch.device("cpu")

    def synchronize(self) -> None:
        """Wait for queued kernels: CUDA runs asynchronously, so a timer must wait on both sides."""
        if self.kind == "cuda":
            _torch().cuda.synchronize(self.index)

    def describe(self) -> str:
        if self.kind == "cuda":
            return f"{self.name} ({self.total_memory / GiB:.1f} GiB)"
        return f"{self.name} ({self.threads} torch threads)"


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


# CUDA device names (as torch reports them) -> servebook.roofline's GPU table.  A name that is not
# here gets no time prediction: an A100 40GB or an H100 PCIe has other bandwidth than the table's cards.
_ROOFLINE_NAMES = (
    (re.compile(r"\bH200\b(?!.*NVL)", re.I), "h200"),
    (re.compile(r"\bH100\b.*(SXM|HBM3)", re.I), "h100-sxm"),
    (re.compile(r"\bA100\b.*SXM.*80\s*GB", re.I), "a100-80gb-sxm"),
    (re.compile(r"\bL4\b", re.I), "l4"),
    (re.compile(r"\bT4\b", re.I), "t4"),
)


def roofline_gpu_for(device_name: str) -> str | None:
    """The key of ``device_name`` in :data:`servebook.roofline.GPUS`, or ``None`` if it is not there."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a string, got {type(device_name).__name__}")
    for pattern, key in _ROOFLINE_NAMES:
        if pattern.search(device_name) and key in roofline.GPUS:
            return key
    return None


def detect_device(requested: str = "auto", log: Callable[[str], None] = print) -> Device:
    """The device to measure on: ``"auto"`` (a GPU if there is one), ``"cuda"`` or ``"cpu"``.

    Asking for ``"cuda"`` where there is no GPU prints why and falls back to the CPU.
    """
    if requested not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device must be 'auto', 'cuda' or 'cpu', got {requested!r}")
    torch = _torch()
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        total = torch.cuda.get_device_properties(index).total_memory
        return Device("cuda", name, index, int(total), None, roofline_gpu_for(name))
    if requested == "cuda":
        log("No CUDA GPU is available here: measuring on the CPU instead. "
            "(In Colab: Runtime > Change runtime type > GPU.)")
    return Device("cpu", f"CPU: {_cpu_name()}", threads=torch.get_num_threads())


def environment(device: Device) -> dict[str, str | None]:
    """Library versions of this run (``None`` where a library is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "servebook": __version__}
    for name in ("torch", "transformers", "numpy", "safetensors", "vllm"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    torch = _torch()
    versions["cuda"] = torch.version.cuda if device.kind == "cuda" else None
    versions["platform"] = platform.platform()
    return versions


# ---------------------------------------------------------------------------
# Models: a Hub model, the project's small trained model, or a real shape with random weights.


@dataclass
class LabModel:
    """A loaded model and everything the predictions need about it."""

    name: str                  # how rows name it: "tiny-llama", "llama-2-7b/8", "Qwen/Qwen2.5-0.5B"
    source: str                # "hub", "project" or "random"
    variant: str               # one of VARIANTS
    dtype: str                 # dtype of activations and of the KV cache ("fp32", "fp16", "bf16")
    spec: ModelSpec
    module: Any = field(repr=False)
    predicted_weight_bytes: int | None
    weight_basis: str
    tokenizer: Any = field(default=None, repr=False)
    heldout_text: str | None = field(default=None, repr=False)
    reduced_from: str | None = None
    group_size: int | None = None  # of the quantized variants
    note: str = ""
    load_seconds: float = 0.0
    allocated_bytes: int | None = None  # CUDA: what the allocator's count grew by while loading

    def entry(self) -> dict[str, Any]:
        """This model as the results' ``models`` list records it."""
        spec = {k: getattr(self.spec, k) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim",
                                                    "vocab_size", "intermediate_size", "n_params",
                                                    "tied_embeddings")}
        return {"name": self.name, "source": self.source, "variant": self.variant, "dtype": self.dtype,
                "spec": spec, "reduced_from": self.reduced_from, "group_size": self.group_size,
                "note": self.note, "load_seconds": round(self.load_seconds, 3)}


def torch_dtype(dtype: str):
    """The torch dtype of ``"fp32"``, ``"fp16"`` or ``"bf16"``."""
    torch = _torch()
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise ValueError(f"dtype must be one of {', '.join(table)}, got {dtype!r}")
    return table[dtype]


def _dtype_kwarg(dtype: str) -> dict[str, Any]:
    """``{"dtype": ...}`` for transformers >= 4.56, ``{"torch_dtype": ...}`` before (where ``dtype`` is ignored)."""
    import transformers

    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch_dtype(dtype)}


def _ensure_dtype(module, dtype: str):
    """Cast ``module`` if its weights are not in ``dtype``: a transformers that ignores the dtype argument
    would otherwise load FP32 and double every byte the lab measures."""
    wanted = torch_dtype(dtype)
    if next(module.parameters()).dtype != wanted:
        module.to(dtype=wanted)
    return module


def _allocated(device: Device) -> int | None:
    return int(_torch().cuda.memory_allocated(device.index)) if device.kind == "cuda" else None


def _grown(device: Device, before: int | None) -> int | None:
    after = _allocated(device)
    return None if before is None or after is None else after - before


def llama_config(spec: ModelSpec):
    """A transformers ``LlamaConfig`` with the shape of ``spec`` (a Llama-style decoder)."""
    from transformers import LlamaConfig

    if spec.vocab_size is None or spec.intermediate_size is None:
        raise ValueError(f"{spec.name}: a random-weight model needs vocab_size and intermediate_size "
                         "(a Llama-style spec)")
    return LlamaConfig(vocab_size=spec.vocab_size, hidden_size=spec.d_model,
                       intermediate_size=spec.intermediate_size, num_hidden_layers=spec.n_layers,
                       num_attention_heads=spec.n_heads, num_key_value_heads=spec.n_kv_heads,
                       head_dim=spec.head_dim, max_position_embeddings=spec.max_seq_len or 4096,
                       tie_word_embeddings=spec.tied_embeddings)


def reduced_spec(spec: ModelSpec | str, factor: int = 8) -> ModelSpec:
    """``spec`` with depth, width, MLP and vocabulary divided by ``factor``, keeping head_dim and the GQA ratio.

    The memory and time formulas hold at any size, so a CPU checks them on a
    shape that runs in seconds; a GPU runs the real size.
    """
    spec = models.resolve(spec)
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor must be an int >= 1, got {factor!r}")
    if factor == 1:
        return spec
    if spec.vocab_size is None or spec.intermediate_size is None:
        raise ValueError(f"{spec.name}: reducing needs vocab_size and intermediate_size (a Llama-style spec)")
    n_kv_heads = max(1, spec.n_kv_heads // factor)
    n_heads = n_kv_heads * spec.group_size  # each key/value head keeps its group of query heads
    reduced = ModelSpec(
        name=f"{spec.name}/{factor}", n_layers=max(1, spec.n_layers // factor), d_model=n_heads * spec.head_dim,
        n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=spec.head_dim, vocab_size=max(256, spec.vocab_size // factor),
        intermediate_size=max(1, spec.intermediate_size // factor), max_seq_len=spec.max_seq_len,
        tied_embeddings=spec.tied_embeddings, source=f"{spec.name} divided by {factor}",
        notes=f"{spec.name}'s shape with depth, width, MLP and vocabulary divided by {factor}; head_dim kept",
    )
    return replace(reduced, n_params=reduced.count_params())


def _weight_prediction(spec: ModelSpec, dtype: str) -> tuple[int | None, str]:
    if spec.n_params is None:
        return None, "no prediction: the model's parameter count is unknown"
    return (memory.weight_bytes(spec.n_params, dtype),
            f"servebook.memory.weight_bytes({spec.n_params:,} parameters, {dtype})")


def load_random(spec: ModelSpec | str, device: Device, dtype: str = "fp16", reduce: int = 1,
                budget: int | None = None) -> LabModel:
    """A Llama-style model of ``spec``'s shape with random weights, built on ``device`` without downloading.

    Bytes and time do not depend on the weights' values, so this measures a
    7B model's memory and speed without its 13 GB download.  ``reduce`` > 1
    divides the shape (see :func:`reduced_spec`).  Raises
    :class:`MeasurementSkipped`, before building anything, if the predicted
    weights exceed ``budget`` bytes.
    """
    torch = _torch()
    from transformers import LlamaForCausalLM

    full = models.resolve(spec)
    shaped = reduced_spec(full, reduce)
    if shaped.n_params is None:
        shaped = replace(shaped, n_params=shaped.count_params())
    predicted, basis = _weight_prediction(shaped, dtype)
    if budget is not None and predicted > budget:
        raise MeasurementSkipped(f"its {predicted / GiB:.2f} GiB of weights do not fit the {budget / GiB:.2f} GiB free")
    config = llama_config(shaped)
    started, before = time.perf_counter(), _allocated(device)
    torch.manual_seed(0)
    # Built on the device in its dtype: a 7B model never exists in FP32 in host memory.
    with torch.device(device.torch_device):
        module = LlamaForCausalLM._from_config(config, **_dtype_kwarg(dtype))
    module.eval()
    note = "random weights: bytes and time are real, perplexity is meaningless"
    if reduce > 1:
        note += f"; {full.name}'s shape divided by {reduce} so the CPU run takes seconds"
    return LabModel(name=shaped.name, source="random", variant=dtype, dtype=dtype, spec=shaped, module=module,
                    predicted_weight_bytes=predicted, weight_basis=basis,
                    reduced_from=full.name if reduce > 1 else None, note=note,
                    load_seconds=time.perf_counter() - started, allocated_bytes=_grown(device, before))


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers (and offline mode is not set): a quick check, not a download."""
    if any(os.environ.get(flag, "0") not in ("", "0") for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _registry_spec(repo: str) -> ModelSpec | None:
    """The registry's entry for a Hub repo (``Qwen/Qwen2.5-0.5B`` -> ``qwen2.5-0.5b``), if there is one."""
    key = repo.rsplit("/", 1)[-1].lower().removesuffix("-hf")
    return models.REGISTRY.get(key)


def load_hub(name: str, device: Device, dtype: str = "fp16", online: bool | None = None) -> LabModel:
    """A pretrained causal LM from the Hugging Face Hub (or the local cache when offline).

    Raises :class:`ModelUnavailable` with the reason (offline and not cached,
    unknown name, gated model) instead of a deep traceback, quickly: without
    internet it does not wait for retries.
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a Hub model id such as {DEFAULT_HUB_MODEL!r}, got {name!r}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    online = hub_reachable() if online is None else online
    started, before = time.perf_counter(), _allocated(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=not online)
        module = AutoModelForCausalLM.from_pretrained(name, local_files_only=not online, **_dtype_kwarg(dtype))
    except (OSError, ValueError, KeyError) as error:
        where = "the Hub" if online else "the local cache (no internet: the Hub is not reachable)"
        raise ModelUnavailable(f"cannot load {name!r} from {where}: {str(error).splitlines()[0]}") from error
    _ensure_dtype(module.to(device.torch_device), dtype).eval()
    spec = ModelSpec.from_hf_config(module.config.to_dict(), name=name)
    known = _registry_spec(name)
    if known is not None and known.kv_dim == spec.kv_dim and known.n_layers == spec.n_layers:
        spec = replace(spec, n_params=known.n_params)
        basis_note = f"n_params from servebook's registry ({known.name})"
    else:
        try:
            spec = replace(spec, n_params=spec.count_params())
            basis_note = "n_params from ModelSpec.count_params() (Llama-style; biases not counted)"
        except ValueError:
            basis_note = "n_params unknown"
    predicted, basis = _weight_prediction(spec, dtype)
    return LabModel(name=name, source="hub", variant=dtype, dtype=dtype, spec=spec, module=module,
                    predicted_weight_bytes=predicted, weight_basis=f"{basis}; {basis_note}", tokenizer=tokenizer,
                    heldout_text=_project_heldout_text(), note="pretrained weights from the Hugging Face Hub",
                    load_seconds=time.perf_counter() - started, allocated_bytes=_grown(device, before))


def _project_heldout_text() -> str | None:
    from . import smallmodel

    return smallmodel.heldout_text() if (smallmodel.TINY_LLAMA / "heldout.txt").exists() else None


def load_project(device: Device, dtype: str = "fp32") -> LabModel:
    """The project's small Llama (:mod:`servebook.smallmodel`), trained on the CPython documentation."""
    from . import smallmodel

    if not (smallmodel.TINY_LLAMA / "config.json").exists():
        raise ModelUnavailable("the project's model is not in servebook/data/tiny-llama "
                               "(scripts/train_tiny_llama.py writes it)")
    started, before = time.perf_counter(), _allocated(device)
    module, tokenizer = smallmodel.load("tiny-llama", dtype=torch_dtype(dtype), device=device.torch_device)
    spec = ModelSpec.from_hf_config(module.config.to_dict(), name="tiny-llama")
    spec = replace(spec, n_params=spec.count_params())
    predicted, basis = _weight_prediction(spec, dtype)
    return LabModel(name="tiny-llama", source="project", variant=dtype, dtype=dtype, spec=spec, module=module,
                    predicted_weight_bytes=predicted, weight_basis=basis, tokenizer=tokenizer,
                    heldout_text=_project_heldout_text(),
                    note="the book's small Llama, trained on the CPython documentation (held-out topics unseen)",
                    load_seconds=time.perf_counter() - started, allocated_bytes=_grown(device, before))


def linear_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """(out, in) of the linear layers of one Llama-style block: q, k, v, o, gate, up, down."""
    if spec.intermediate_size is None:
        raise ValueError(f"{spec.name}: linear shapes need intermediate_size (a Llama-style spec)")
    d, q, kv, f = spec.d_model, spec.n_heads * spec.head_dim, spec.kv_dim, spec.intermediate_size
    return [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f)]


def quantized_weight_prediction(spec: ModelSpec, variant: str, group_size: int, dtype: str) -> tuple[int, str]:
    """Bytes of a model whose block linears are quantized group-wise and the rest kept in ``dtype``.

    Each (out x in) linear costs ``memory.weight_bytes(out*in, int4|int8,
    group_size)`` (codes, FP16 scales, zero points as wide as the codes); the
    embeddings, norms and LM head stay in ``dtype``, as servebook.qmodel leaves them.
    """
    if variant not in QUANT_BITS:
        raise ValueError(f"variant must be one of {', '.join(QUANT_BITS)}, got {variant!r}")
    if spec.n_params is None:
        raise ValueError(f"{spec.name}: the prediction needs n_params")
    code = f"int{QUANT_BITS[variant]}"
    shapes = linear_shapes(spec)
    quantized = spec.n_layers * sum(memory.weight_bytes(o * i, code, group_size=group_size) for o, i in shapes)
    kept = spec.n_params - spec.n_layers * sum(o * i for o, i in shapes)
    total = quantized + memory.weight_bytes(kept, dtype)
    return total, (f"servebook.memory.weight_bytes: {spec.n_layers} x 7 linears in {code} g{group_size} "
                   f"(FP16 scales, {code} zero points) + {kept:,} other parameters in {dtype}")


def quantize(base: LabModel, variant: str, device: Device, group_size: int = 128, method: str = "rtn") -> LabModel:
    """A copy of ``base`` whose block linears are servebook :class:`~servebook.qmodel.QuantizedLinear` layers.

    ``variant`` is ``"w8a16"`` or ``"w4a16"`` (group-wise, ``group_size``
    input features per scale); ``method`` is qmodel's ``"rtn"``, ``"gptq"`` or
    ``"awq"`` (the last two calibrate on the project's calibration text).
    The activations keep ``base``'s dtype: FP32 on a CPU.
    """
    if variant not in QUANT_BITS:
        raise ValueError(f"variant must be one of {', '.join(QUANT_BITS)}, got {variant!r}")
    from . import qmodel, smallmodel

    calibration = None
    if method != "rtn":
        if base.tokenizer is None:
            raise ModelUnavailable(f"{method} needs calibration text and a tokenizer; {base.name} has none")
        ids = smallmodel.encode(base.tokenizer, smallmodel.calibration_text())
        calibration = smallmodel.calibration_batch(ids)
    started, before = time.perf_counter(), _allocated(device)
    try:
        report = qmodel.quantize_model(base.module, method, bits=QUANT_BITS[variant], group_size=group_size,
                                       calibration=calibration)
    except ValueError as error:
        raise ModelUnavailable(f"cannot quantize {base.name} to {variant}: {error}") from error
    predicted, basis = quantized_weight_prediction(base.spec, variant, group_size, base.dtype)
    note = f"{method.upper()} {variant.upper()} g{group_size} by servebook.qmodel (dequantize, then matmul)"
    if base.dtype != "fp16":
        note += f"; activations in {base.dtype}"
    return replace(base, variant=variant, module=report.model, predicted_weight_bytes=predicted,
                   weight_basis=basis, group_size=group_size, note=note,
                   load_seconds=base.load_seconds + time.perf_counter() - started,
                   allocated_bytes=_grown(device, before))


# ---------------------------------------------------------------------------
# Measuring: bytes of tensors, the cache, synchronised timings.


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of ``tensors``, each storage counted once (tied embeddings share one matrix)."""
    seen: set[tuple[int, int, str]] = set()
    total = 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), str(t.dtype))
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def weight_bytes_of(module) -> int:
    """Bytes of a model's state dict: parameters and persistent buffers (quantized codes, scales), shared once.

    Non-persistent buffers (rotary-embedding frequencies) are left out: they
    are recomputed, not weights, and no formula counts them.
    """
    return tensor_bytes(module.state_dict(keep_vars=True).values())


def other_buffer_bytes(module) -> int:
    """Bytes of buffers outside the state dict (e.g. rotary frequencies): on the device, not weights."""
    stored = {id(t) for t in module.state_dict(keep_vars=True).values()}
    return tensor_bytes(b for b in module.buffers() if id(b) not in stored)


def cache_tensors(cache) -> list[Any]:
    """The key and value tensors of a transformers cache, across versions.

    transformers 5.x: ``cache.layers[i].keys`` / ``.values``; 4.x:
    ``cache.key_cache`` / ``cache.value_cache``; older: a tuple of
    ``(key, value)`` pairs per layer.
    """
    if cache is None:
        raise ValueError("the model returned no cache: was use_cache=False?")
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values) if t is not None]
    if hasattr(cache, "key_cache"):
        return [*cache.key_cache, *cache.value_cache]
    if isinstance(cache, (tuple, list)):
        return [t for pair in cache for t in pair[:2]]
    raise TypeError(f"do not know how to read the tensors of a {type(cache).__name__}")


def cache_bytes(cache) -> int:
    """KV-cache bytes held by ``cache``: the sum of its key and value tensors' sizes."""
    return sum(t.numel() * t.element_size() for t in cache_tensors(cache))


def _forward_kwargs(module) -> tuple[str, bool]:
    """(name of the cache argument, whether ``logits_to_keep`` exists) for this transformers version."""
    parameters = inspect.signature(module.forward).parameters
    return ("cache" if "cache" in parameters else "past_key_values"), "logits_to_keep" in parameters


def _returned_cache(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def prefill_cache(module, input_ids):
    """Run one prefill of ``input_ids`` (batch x tokens) and return the KV cache the model filled."""
    torch = _torch()
    with torch.inference_mode():
        return _returned_cache(module(input_ids=input_ids, use_cache=True))


def timed(function: Callable[[], Any], device: Device) -> tuple[float, Any]:
    """(seconds, result) of ``function()``, with the device synchronised before and after.

    Without the second synchronisation a CUDA timer measures only the kernel
    launches, which return at once.
    """
    device.synchronize()
    start = time.perf_counter()
    result = function()
    device.synchronize()
    return time.perf_counter() - start, result


@dataclass(frozen=True)
class Generation:
    """What one (batch, prompt length) measurement found."""

    batch: int
    prompt_len: int
    decode_steps: int
    prefill_s: list[float]
    decode_s: list[float]
    kv_bytes_after_prefill: int
    kv_bytes_after_decode: int
    # CUDA only: the allocator's peak during the timed steps above what was allocated before them
    # (weights and anything else resident): the KV cache plus transient activations and logits.
    peak_bytes: int | None

    @property
    def prefill_median(self) -> float:
        return statistics.median(self.prefill_s)

    @property
    def decode_median(self) -> float:
        return statistics.median(self.decode_s)


def _is_out_of_memory(error: BaseException) -> bool:
    torch = _torch()
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(error, (oom, MemoryError)) or "out of memory" in str(error).lower()


def _free_device_memory(device: Device) -> None:
    """Hand freed blocks back to CUDA, so the next measurement sees the device's real free memory.

    On a CPU there is nothing to do (and ``gc.collect`` would cost more than a step).
    """
    if device.kind == "cuda":
        gc.collect()
        _torch().cuda.empty_cache()


def measure_generation(module, device: Device, batch: int, prompt_len: int, decode_steps: int = 8,
                       repeats: int = 3, seed: int = 0) -> Generation:
    """Prefill ``batch`` random prompts of ``prompt_len`` tokens, then decode ``decode_steps`` tokens.

    The first prefill and decode step are a warm-up (kernel selection, caches)
    and are not timed; then ``repeats`` prefills and ``decode_steps`` decode
    steps are, each synchronised.  A decode step feeds one token per sequence
    and reads the whole cache, as a serving engine's step does.  Raises
    :class:`MeasurementSkipped` if the device runs out of memory.
    """
    for name, value, minimum in (("batch", batch, 1), ("prompt_len", prompt_len, 1),
                                 ("decode_steps", decode_steps, 1), ("repeats", repeats, 1)):
        whole(name, value, minimum)
    torch = _torch()
    cache_arg, has_logits_to_keep = _forward_kwargs(module)
    keep = {"logits_to_keep": 1} if has_logits_to_keep else {}
    generator = torch.Generator().manual_seed(seed)
    vocab = module.config.vocab_size
    prompts = torch.randint(0, vocab, (batch, prompt_len), generator=generator).to(device.torch_device)

    def prefill():
        return module(input_ids=prompts, use_cache=True, **keep)

    def decode(token, cache):
        return module(input_ids=token, use_cache=True, **{cache_arg: cache})

    def next_token(output):
        return output.logits[:, -1:].argmax(-1)

    peak = None
    try:
        with torch.inference_mode():
            warm = prefill()
            decode(next_token(warm), _returned_cache(warm))
            del warm
            _free_device_memory(device)
            if device.kind == "cuda":
                torch.cuda.reset_peak_memory_stats(device.index)
                resident = torch.cuda.memory_allocated(device.index)
            prefill_s, output = [], None
            for _ in range(repeats):
                output = None  # the previous prefill's cache must not sit in memory (and in the peak) during this one
                seconds, output = timed(prefill, device)
                prefill_s.append(seconds)
            cache = _returned_cache(output)
            after_prefill = cache_bytes(cache)
            token = next_token(output)
            del output
            decode_s = []
            for _ in range(decode_steps):
                seconds, output = timed(lambda token=token, cache=cache: decode(token, cache), device)
                decode_s.append(seconds)
                token = next_token(output)
            after_decode = cache_bytes(cache)
            if device.kind == "cuda":
                peak = int(torch.cuda.max_memory_allocated(device.index) - resident)
            del output, cache, token
    except (RuntimeError, MemoryError) as error:
        if not _is_out_of_memory(error):
            raise
        _free_device_memory(device)
        raise MeasurementSkipped(f"batch {batch} x {prompt_len} tokens ran out of memory on the device: "
                                 f"{str(error).splitlines()[0][:200]}") from error
    _free_device_memory(device)
    return Generation(batch, prompt_len, decode_steps, prefill_s, decode_s, after_prefill, after_decode, peak)


def perplexity(module, tokenizer, text: str, window: int = 128, max_tokens: int = 8192) -> float:
    """Held-out perplexity by :func:`servebook.smallmodel.perplexity`, over the first ``max_tokens`` tokens.

    Non-overlapping windows of ``window`` tokens; the same text, window and
    cut-off give the same number on any device, up to rounding.
    """
    from . import smallmodel

    whole("window", window, 2)
    whole("max_tokens", max_tokens, window)
    ids = smallmodel.encode(tokenizer, text)
    return float(smallmodel.perplexity(module, ids, seq_len=window, max_windows=max_tokens // window))


# ---------------------------------------------------------------------------
# Predictions beside the measurements, as rows.


def _row(model: LabModel, quantity: str, measured: float, predicted: float | None, basis: str,
         batch: int | None = None, seq_len: int | None = None) -> dict[str, Any]:
    ratio = None if predicted in (None, 0) else measured / predicted
    return {"model": model.name, "variant": model.variant, "quantity": quantity, "unit": QUANTITIES[quantity],
            "batch": batch, "seq_len": seq_len, "measured": measured, "predicted": predicted,
            "ratio": ratio, "basis": basis}


def _roofline_scheme(model: LabModel) -> roofline.Scheme:
    """The roofline scheme of a variant: 16-bit weights, or servebook.qmodel's weight-only quantization.

    qmodel dequantizes each weight once per forward pass, whatever the number
    of tokens (``dequant_tile_tokens`` larger than any step): a fused kernel's
    per-tile dequantization (roofline's W4A16) would charge more work than
    qmodel does, and the bound would no longer be a lower bound.
    """
    if model.variant in ("fp16", "bf16"):
        return roofline.scheme("W16A16")
    return roofline.Scheme(model.variant.upper(), f"int{QUANT_BITS[model.variant]}", "fp16",
                           group_size=model.group_size, dequant_flops_per_weight=2, dequant_tile_tokens=sys.maxsize)


def _last_logits_only(step: roofline.StepCost, spec: ModelSpec) -> roofline.StepCost:
    """``step`` with the LM head applied to the last token of each sequence only, as the lab's prefill does.

    The lab asks for ``logits_to_keep=1``; a bound that multiplied every prompt
    token by the LM head would count work that never runs (over a quarter of a
    Qwen2.5-0.5B prefill) and could exceed the measured time.
    """
    if spec.vocab_size is None:
        return step
    unused = 2 * spec.vocab_size * spec.d_model * (step.tokens - step.batch)
    return replace(step, matmul_flops=step.matmul_flops - unused)


def time_predictions(model: LabModel, device: Device, batch: int, prompt_len: int, last_logits_only: bool = False
                     ) -> tuple[roofline.Bound | None, roofline.Bound | None, str]:
    """Roofline lower bounds of the prefill step and of a decode step, or ``None`` with the reason.

    ``last_logits_only``: the prefill computes logits for the last token of
    each sequence only (what :func:`measure_generation` asks for), so its bound
    leaves out the LM head for the other tokens.
    """
    if device.roofline_gpu is None:
        return None, None, f"no prediction: {device.name} is not in servebook.roofline's GPU table"
    if model.variant == "fp32":
        return None, None, "no prediction: servebook.roofline models 16-bit and quantized weights, not FP32"
    if model.spec.n_params is None:
        return None, None, "no prediction: the model's parameter count is unknown"
    recipe = _roofline_scheme(model)
    prefill_step = roofline.prefill_step(model.spec, batch, prompt_len, recipe, model.dtype)
    if last_logits_only:
        prefill_step = _last_logits_only(prefill_step, model.spec)
    prefill = roofline.bound(prefill_step, device.roofline_gpu)
    decode = roofline.bound(roofline.decode_step(model.spec, batch, prompt_len, recipe, model.dtype),
                            device.roofline_gpu)
    return prefill, decode, f"servebook.roofline lower bound on {device.roofline_gpu}"


def generation_rows(model: LabModel, device: Device, g: Generation) -> list[dict[str, Any]]:
    """Rows of one measurement: KV bytes, times and tokens/s, each beside its prediction."""
    spec, dtype, b, s, n = model.spec, model.dtype, g.batch, g.prompt_len, g.decode_steps
    kv_basis = f"servebook.memory.kv_cache_bytes(S, B={b}, {dtype})"
    kv_prefill = memory.kv_cache_bytes(spec, s, b, dtype)
    kv_decode = memory.kv_cache_bytes(spec, s + n, b, dtype)
    rows = [_row(model, "kv_bytes", g.kv_bytes_after_prefill, kv_prefill, kv_basis, b, s),
            _row(model, "kv_bytes", g.kv_bytes_after_decode, kv_decode, kv_basis, b, s + n)]
    prefill, decode, time_basis = time_predictions(model, device, b, s, last_logits_only=True)
    rows += [
        _row(model, "prefill_s", g.prefill_median, prefill and prefill.time, time_basis, b, s),
        _row(model, "decode_s", g.decode_median, decode and decode.time, time_basis, b, s),
        _row(model, "prefill_tokens_per_s", b * s / g.prefill_median, prefill and prefill.tokens_per_s,
             time_basis.replace("lower", "upper"), b, s),
        _row(model, "decode_tokens_per_s", b / g.decode_median, decode and decode.tokens_per_s,
             time_basis.replace("lower", "upper"), b, s),
    ]
    if g.peak_bytes is not None:
        rows.append(_row(model, "peak_bytes", g.peak_bytes, kv_decode,
                         "peak allocated above the resident weights vs the predicted KV cache "
                         "(the excess is activations and logits)", b, s + n))
    return rows


# ---------------------------------------------------------------------------
# A whole run.


@dataclass
class LabConfig:
    """What to measure.  :meth:`for_device` gives the book's defaults for a GPU and for a CPU."""

    hub_model: str | None = DEFAULT_HUB_MODEL
    project_model: bool = True
    random_models: tuple[str, ...] = ("llama-2-7b",)
    reduce: int = 1                    # divide the random models' shape (CPU runs)
    dtype: str = "fp16"
    variants: tuple[str, ...] = ("w8a16", "w4a16")  # quantized variants of the Hub and project models
    group_size: int = 128
    quant_method: str = "rtn"          # servebook.qmodel's "rtn", "gptq" or "awq"
    batches: tuple[int, ...] = (1, 8, 32)
    prompt_lens: tuple[int, ...] = (256, 1024)
    decode_steps: int = 16
    repeats: int = 5
    perplexity_window: int = 128
    perplexity_tokens: int = 16_384
    # Bytes free for a measurement's KV cache (and, before a random model is built, for its weights);
    # None: the device's free memory on CUDA, no check on a CPU.
    memory_budget: int | None = None
    vllm: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dtype not in FLOAT_VARIANTS:
            raise ValueError(f"dtype must be one of {', '.join(FLOAT_VARIANTS)}, got {self.dtype!r}")
        if self.quant_method not in ("rtn", "gptq", "awq"):
            raise ValueError(f"quant_method must be 'rtn', 'gptq' or 'awq', got {self.quant_method!r}")
        unknown = [v for v in self.variants if v not in QUANT_VARIANTS]
        if unknown:
            raise ValueError(f"variants must be among {', '.join(QUANT_VARIANTS)}, got {unknown}")
        for name in ("batches", "prompt_lens"):
            values = tuple(getattr(self, name))
            if not values:
                raise ValueError(f"{name} must name at least one size")
            for value in values:
                whole(name, value, 1)
            setattr(self, name, values)
        for name in ("reduce", "group_size", "decode_steps", "repeats", "perplexity_window", "perplexity_tokens"):
            whole(name, getattr(self, name), 1)
        for name in self.random_models:
            models.get(name)  # an unknown name fails here, naming the known ones
        if self.memory_budget is not None:
            byte_count("memory_budget", self.memory_budget, allow_zero=False)

    @classmethod
    def for_device(cls, device: Device, **overrides) -> LabConfig:
        """The book's settings: real sizes on a GPU; on a CPU, small ones that finish in seconds."""
        if device.kind == "cuda":
            return cls(**overrides)
        small = dict(dtype="fp32", reduce=8, batches=(1, 4), prompt_lens=(32, 128), decode_steps=8, repeats=3,
                     perplexity_tokens=4096)
        return cls(**{**small, **overrides})


def _budget(config: LabConfig, device: Device) -> int | None:
    if config.memory_budget is not None:
        return config.memory_budget
    if device.kind == "cuda":
        return int(_torch().cuda.mem_get_info(device.index)[0])
    return None


def check_fits(model: LabModel, batch: int, prompt_len: int, decode_steps: int, budget: int | None) -> None:
    """Raise :class:`MeasurementSkipped` if the predicted KV cache alone exceeds ``budget`` bytes.

    Skipping before the run is kinder than an out-of-memory error halfway
    through, and it is the book's own formula deciding.
    """
    if budget is None:
        return
    need = memory.kv_cache_bytes(model.spec, prompt_len + decode_steps, batch, model.dtype)
    if need > budget:
        raise MeasurementSkipped(
            f"batch {batch} x {prompt_len + decode_steps} tokens needs a {need / GiB:.2f} GiB KV cache "
            f"(servebook.memory), more than the {budget / GiB:.2f} GiB free: skipped")


class Run:
    """The state of one lab run: rows, skipped measurements, model entries and the log."""

    def __init__(self, config: LabConfig, device: Device, log: Callable[[str], None]):
        self.config, self.device, self.log = config, device, log
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[dict[str, str]] = []
        self.models: list[dict[str, Any]] = []

    def skip(self, what: str, reason: str) -> None:
        self.log(f"skipped {what}: {reason}")
        self.skipped.append({"what": what, "reason": reason})

    def measure(self, model: LabModel, reference_perplexity: float | None = None) -> float | None:
        """Every measurement of one loaded model; returns its perplexity (or None)."""
        device, config = self.device, self.config
        self.log(f"measuring {model.name} [{model.variant}] on {device.describe()}")
        self.models.append(model.entry())
        measured_weights = weight_bytes_of(model.module)
        self.rows.append(_row(model, "weight_bytes", measured_weights, model.predicted_weight_bytes,
                              model.weight_basis))
        if model.allocated_bytes is not None:
            self.rows.append(_row(model, "allocated_bytes", model.allocated_bytes, model.predicted_weight_bytes,
                                  "growth of torch.cuda.memory_allocated() while loading, vs " + model.weight_basis))
        budget = _budget(config, device)
        for batch, prompt_len in self.shapes(model):
            what = f"{model.name} [{model.variant}] batch {batch} x {prompt_len}"
            try:
                check_fits(model, batch, prompt_len, config.decode_steps, budget)
                g = measure_generation(model.module, device, batch, prompt_len, config.decode_steps,
                                       config.repeats, config.seed)
            except MeasurementSkipped as reason:
                self.skip(what, str(reason))
                continue
            self.rows += generation_rows(model, device, g)
        return self._perplexity(model, reference_perplexity)

    def shapes(self, model: LabModel) -> list[tuple[int, int]]:
        """(batch, prompt length) pairs to measure; a Hub model on a CPU gets the smallest only (it is slow there)."""
        batches, lens = self.config.batches, self.config.prompt_lens
        if self.device.kind == "cpu" and model.source == "hub":
            return [(min(batches), min(lens))]
        return [(b, s) for b in batches for s in lens]

    def _perplexity(self, model: LabModel, reference: float | None) -> float | None:
        what = f"{model.name} [{model.variant}] perplexity"
        if model.source == "random":
            self.skip(what, "random weights: perplexity would only measure the random initialisation")
            return None
        if model.tokenizer is None or not model.heldout_text:
            self.skip(what, "no held-out text or tokenizer for this model")
            return None
        tokens = self.config.perplexity_tokens
        if self.device.kind == "cpu" and model.source == "hub":
            tokens = min(tokens, 1024)
        ppl = perplexity(model.module, model.tokenizer, model.heldout_text, self.config.perplexity_window, tokens)
        basis = ("the unquantized model's perplexity (the reference)" if reference is not None
                 else "no prediction: the unquantized reference")
        self.rows.append(_row(model, "perplexity", ppl, reference, basis,
                              seq_len=self.config.perplexity_window))
        return ppl

    def measure_with_variants(self, load: Callable[[], LabModel], what: str, fallback: str = "") -> None:
        """Load a model, measure it, then its quantized variants against its perplexity."""
        try:
            base = load()
        except ModelUnavailable as reason:
            self.skip(what, str(reason) + fallback)
            return
        reference = self.measure(base)
        for variant in self.config.variants:
            try:
                quantized = quantize(base, variant, self.device, self.config.group_size, self.config.quant_method)
            except ModelUnavailable as reason:
                self.skip(f"{base.name} [{variant}]", str(reason))
                continue
            self.measure(quantized, reference)
            del quantized
            _free_device_memory(self.device)
        del base
        _free_device_memory(self.device)


def run_lab(config: LabConfig | None = None, device: Device | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure everything ``config`` asks for on ``device`` and return the results document (see :data:`SCHEMA`)."""
    torch = _torch()
    started = time.perf_counter()
    device = device or detect_device(log=log)
    config = config or LabConfig.for_device(device)
    run = Run(config, device, log)
    torch.manual_seed(config.seed)

    if config.hub_model:
        run.measure_with_variants(lambda: load_hub(config.hub_model, device, config.dtype), config.hub_model,
                                  fallback=" The lab goes on with the project's model and random-weight shapes.")
    if config.project_model:
        run.measure_with_variants(lambda: load_project(device, config.dtype), "tiny-llama")
    for name in config.random_models:
        try:
            model = load_random(name, device, config.dtype, config.reduce, budget=_budget(config, device))
        except (MeasurementSkipped, ValueError) as reason:
            run.skip(f"{name} (random weights)", str(reason))
            continue
        run.measure(model)
        del model
        _free_device_memory(device)

    vllm_result = compare_vllm(config.hub_model or DEFAULT_HUB_MODEL, device, log) if config.vllm else {
        "status": "skipped", "reason": "not requested"}
    results = {
        "schema_version": SCHEMA_VERSION,
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "device": asdict(device),
        "versions": environment(device),
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "models": run.models,
        "rows": run.rows,
        "skipped": run.skipped,
        "vllm": vllm_result,
        "run_seconds": round(time.perf_counter() - started, 2),
        "note": ("measured on a CPU at reduced size: bytes are checked exactly; times show the CPU, "
                 "not a GPU, and have no roofline prediction") if device.kind == "cpu" else
                "measured on a GPU at full size",
    }
    validate(results)
    return results


# ---------------------------------------------------------------------------
# vLLM: its own KV-cache sizing against servebook's, from the same free memory.

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
    blocks_per_request = math.ceil(max_model_len / block_size)
    return {"gpu_blocks": blocks, "kv_cache_tokens": blocks * block_size,
            "max_concurrency": blocks / blocks_per_request,
            "requests_that_fit": memory.max_batch(blocks, blocks_per_request)}


def compare_vllm(model_name: str, device: Device, log: Callable[[str], None] = print,
                 gpu_memory_utilization: float = 0.5, max_model_len: int = 2048) -> dict[str, Any]:
    """Serve ``model_name`` with vLLM (where importable, on a GPU) and set its KV sizing beside servebook's.

    Returns ``{"status": "skipped", "reason": ...}`` when vLLM is not installed,
    there is no GPU, or vLLM fails; never raises for those.
    """
    if importlib.util.find_spec("vllm") is None:
        reason = "vllm is not installed (pip install vllm, on a CUDA machine): vLLM comparison skipped"
        log(reason)
        return {"status": "skipped", "reason": reason}
    if device.kind != "cuda":
        reason = "vLLM needs a CUDA GPU here: vLLM comparison skipped"
        log(reason)
        return {"status": "skipped", "reason": reason}
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine (and its log) in this process
    import logging

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    handler = Lines()
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
    except Exception as error:  # vLLM raises many types; any of them means "no comparison", not a crash
        reason = f"vLLM could not serve {model_name}: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
        log(reason)
        return {"status": "skipped", "reason": reason}
    finally:
        vllm_logger.removeHandler(handler)
        _free_device_memory(device)
    logged = parse_vllm_log(handler.lines)
    if engine_blocks is not None:
        logged.setdefault("gpu_blocks", int(engine_blocks))
    if "available_kv_gib" not in logged:
        return {"status": "skipped", "reason": "vLLM's log had no 'Available KV cache memory' line to compare from",
                "vllm": logged}
    kv_memory = round(logged["available_kv_gib"] * GiB)
    predicted = servebook_vllm_prediction(spec, kv_memory, int(logged.get("max_model_len", max_model_len)),
                                          block_size, "fp16")
    # vLLM prints the memory to 0.01 GiB, so servebook's side is uncertain by half of that.
    tolerance = 0.005 * GiB / kv_memory
    comparison = {key: {"vllm": logged[key], "servebook": predicted[key], "ratio": logged[key] / predicted[key]}
                  for key in ("gpu_blocks", "kv_cache_tokens", "max_concurrency") if key in logged and predicted[key]}
    return {"status": "measured", "model": model_name, "block_size": block_size,
            "gpu_memory_utilization": gpu_memory_utilization, "kv_memory_bytes": kv_memory,
            "relative_tolerance": tolerance, "vllm": logged, "servebook": predicted, "comparison": comparison}


# ---------------------------------------------------------------------------
# The results document: schema, validation, recorded runs, a text table.

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
    },
}
"""The JSON schema of a results document (draft 2020-12)."""


def validate(results: dict[str, Any]) -> None:
    """Check ``results`` against :data:`SCHEMA` and its internal consistency; raise ``ValueError`` naming the fault.

    Beyond the schema: each row's model was measured, units match quantities,
    and each ratio is measured / predicted.
    """
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
    if prefer not in ("cuda", "cpu", "any"):
        raise ValueError(f"prefer must be 'cuda', 'cpu' or 'any', got {prefer!r}")
    runs = recorded_runs(directory)
    if not runs:
        raise FileNotFoundError(f"no recorded lab runs in {directory or recorded_dir()}")
    preferred = [r for r in runs if r["device"]["kind"] == prefer]
    return (preferred or runs)[-1]


def write_results(results: dict[str, Any], path: str | Path) -> Path:
    """Validate and write ``results`` as indented JSON (numbers as measured)."""
    validate(results)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servebook.lab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("lab-results.json"), help="where to write the JSON")
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--hub-model", default=DEFAULT_HUB_MODEL,
                        help="a Hugging Face model id (GPU runs); 'none' to leave it out")
    parser.add_argument("--random-models", nargs="*", default=None,
                        help=f"registry names measured with random weights; known: {', '.join(models.names())}")
    parser.add_argument("--dtype", choices=FLOAT_VARIANTS, default=None,
                        help="float precision (default: fp16 on a GPU, fp32 on a CPU)")
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--prompt-lens", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    parser.add_argument("--no-vllm", action="store_true", help="do not try the vLLM comparison")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        _torch().set_num_threads(args.threads)

    device = detect_device(args.device)
    overrides: dict[str, Any] = {"hub_model": None if args.hub_model.lower() == "none" else args.hub_model,
                                 "vllm": not args.no_vllm}
    for key, value in (("random_models", args.random_models), ("dtype", args.dtype), ("batches", args.batches),
                       ("prompt_lens", args.prompt_lens)):
        if value is not None:
            overrides[key] = tuple(value) if isinstance(value, list) else value
    try:
        config = LabConfig.for_device(device, **overrides)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    results = run_lab(config, device)
    print(format_table(table(results)))
    print(f"\n{len(results['rows'])} rows, {len(results['skipped'])} skipped, on {device.describe()}, "
          f"in {results['run_seconds']:.1f} s -> {write_results(results, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
