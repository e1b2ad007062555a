"""Where the lab runs: a CUDA GPU or the CPU, what it is called in the GPU table, and its memory."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, gpus
from ..checks import choice
from ..units import GiB


class MeasurementSkipped(RuntimeError):
    """One measurement cannot run here (it would not fit, or ran out of memory); the message says why."""


def require_torch():
    """The ``torch`` module, imported on first use: the rest of the book runs without it."""
    try:
        import torch
    except ImportError as error:  # pragma: no cover - the lab is optional; the rest of the book runs without torch
        raise ImportError("the lab needs PyTorch and transformers: pip install 'servebook[torch]'") from error
    return torch


@dataclass(frozen=True)
class Device:
    """Where the lab runs: a CUDA GPU or the CPU, with what a reader needs to compare runs."""

    kind: str                      # "cuda" or "cpu"
    name: str                      # "NVIDIA L4", "CPU: Intel(R) Xeon(R) ..."
    index: int = 0
    total_memory: int | None = None  # bytes (CUDA: the card's total; CPU: not measured)
    threads: int | None = None     # CPU threads torch uses
    roofline_gpu: str | None = None  # key of servebook.gpus.GPUS, or None when the table lacks this device

    @property
    def torch_device(self):
        torch = require_torch()
        return torch.device(f"cuda:{self.index}") if self.kind == "cuda" else torch.device("cpu")

    def synchronize(self) -> None:
        """Wait for queued kernels: CUDA runs asynchronously, so a timer must wait on both sides."""
        if self.kind == "cuda":
            require_torch().cuda.synchronize(self.index)

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


# CUDA device names (as torch reports them) -> servebook.gpus' table; gpus.get fails at import if a key
# leaves the table.  A name that is not here gets no time prediction: an H100 PCIe or an H200 NVL has
# other bandwidth than the table's cards.
_TABLE_NAMES = tuple((re.compile(pattern, re.I), gpus.get(key).name) for pattern, key in (
    (r"\bH200\b(?!.*NVL)", "h200"),
    (r"\bH100\b.*(SXM|HBM3)", "h100-sxm"),
    (r"\bA100\b.*SXM.*80\s*GB", "a100-80gb-sxm"),
    (r"\bL4\b", "l4"),
    (r"\bT4\b", "t4"),
))


def roofline_gpu_for(device_name: str) -> str | None:
    """The key of ``device_name`` in :data:`servebook.gpus.GPUS`, or ``None`` if it is not there."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a string, got {type(device_name).__name__}")
    return next((key for pattern, key in _TABLE_NAMES if pattern.search(device_name)), None)


def detect_device(requested: str = "auto", log: Callable[[str], None] = print) -> Device:
    """The device to measure on: ``"auto"`` (a GPU if there is one), ``"cuda"`` or ``"cpu"``.

    Asking for ``"cuda"`` where there is no GPU prints why and falls back to the CPU.
    """
    choice("device", requested, ("auto", "cuda", "cpu"))
    torch = require_torch()
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
    for name in ("torch", "transformers", "numpy", "safetensors", "triton", "vllm"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    torch = require_torch()
    versions["cuda"] = torch.version.cuda if device.kind == "cuda" else None
    versions["platform"] = platform.platform()
    return versions


# ---------------------------------------------------------------------------
# The device's memory, as the CUDA allocator counts it.


def cuda_allocated(device: Device) -> int | None:
    """Bytes the CUDA allocator has handed out on ``device`` (``None`` on a CPU)."""
    return int(require_torch().cuda.memory_allocated(device.index)) if device.kind == "cuda" else None


def cuda_growth(device: Device, before: int | None) -> int | None:
    """How far the allocator's count grew since it was ``before`` (``None`` on a CPU)."""
    after = cuda_allocated(device)
    return None if before is None or after is None else after - before


def cuda_graph(function: Callable[[], object], device: Device):
    """``function`` recorded in a CUDA graph (after a warm-up on a side stream, as capture wants): the graph.

    Raises ``RuntimeError`` where the capture is refused: something in ``function`` waits on the host.
    """
    torch = require_torch()
    side = torch.cuda.Stream(device.index)
    side.wait_stream(torch.cuda.current_stream(device.index))
    with torch.cuda.stream(side):
        function()
    torch.cuda.current_stream(device.index).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        function()
    return graph


def cuda_seconds(function: Callable[[], object], device: Device) -> float:
    """Seconds of ``function``'s work on the device, between two CUDA events (the host's time not counted)."""
    torch = require_torch()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(torch.cuda.current_stream(device.index))
    function()
    end.record(torch.cuda.current_stream(device.index))
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def free_device_memory(device: Device) -> None:
    """Hand freed blocks back to CUDA, so the next measurement sees the device's real free memory.

    On a CPU there is nothing to do (and ``gc.collect`` would cost more than a step).
    """
    if device.kind == "cuda":
        gc.collect()
        require_torch().cuda.empty_cache()
