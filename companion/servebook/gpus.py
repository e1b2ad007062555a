"""GPUs: datasheet numbers, with their sources.

One table of GPUs, kept as data (``servebook/data/gpus.json``, whose
``schema`` entry says what each field means), so a number about a GPU has one
producer.  Rates are *dense* (a datasheet that prints 2:4-sparse rates is
halved, see :class:`Quoted`) and name the precision they accumulate in;
memory is what ``nvidia-smi`` (``rocm-smi``) reports where that is
published; bandwidth and links are bytes per second, links per direction.
Each GPU states the rule used for its odd case (``rule``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checks import choice, lookup

DATA = Path(__file__).resolve().parent / "data" / "gpus.json"


@dataclass(frozen=True)
class Quoted:
    """A peak rate exactly as a datasheet prints it, and whether that print assumes 2:4 sparsity.

    NVIDIA's Ampere, Hopper, Ada and Blackwell datasheets print tensor-core
    rates "with sparsity" (a 2:4 structured-sparse matrix), twice the dense
    rate a serving engine gets from a dense model.  :attr:`dense` undoes that.
    ``accumulate`` is the precision the printed rate accumulates in.
    """

    value: float  # in the datasheet's unit (TFLOPS or TOPS) as printed
    sparse: bool  # True where the printed figure is the sparse one (marked * on the datasheet)
    accumulate: str = "fp32"

    @property
    def dense(self) -> float:
        """The dense rate in operations per second."""
        return self.value * 1e12 / (2 if self.sparse else 1)


@dataclass(frozen=True)
class Link:
    """An interconnect: its bandwidth per direction, and what the datasheet printed.

    Datasheets print NVLink (and Infinity Fabric) with both directions added:
    the H100's "900GB/s" is 450 GB/s each way, and a ring all-reduce, which
    sends to one neighbour while it receives from the other, moves data at the
    one-way rate.  ``joins`` is how many GPUs the link joins at that rate (8 on
    an NVSwitch baseboard, 2 for a bridged pair of PCIe cards; ``None`` for
    PCIe, which joins whatever the host holds); ``topology`` says how, with its source.
    """

    name: str
    per_direction: int  # bytes per second, one direction
    as_printed: str
    printed_is: str     # "both directions together" or "per direction"
    joins: int | None = None
    topology: str = ""


@dataclass(frozen=True)
class GPU:
    """One GPU's memory, peak rates and links, from its datasheet.

    ``memory`` is what ``nvidia-smi`` reports as the card's total (bytes): the
    datasheet's capacity label is given in ``memory_label`` as printed, and the
    two differ (the A100's "80GB" is 81,920 MiB = 80 GiB).  ``bandwidth`` is
    in bytes per second (datasheets print decimal GB/s and TB/s).  ``fp8`` and
    ``fp4`` are ``None`` on GPUs without such tensor cores.
    """

    name: str
    memory: int
    memory_label: str
    bandwidth: int
    fp16: Quoted       # FP16/BF16 tensor core
    int8: Quoted       # INT8 tensor core
    fp32_tflops: float  # non-tensor FP32 (CUDA cores): where W4A16 dequantizes
    source: str        # references.bib key of the datasheet
    url: str
    notes: str = ""
    display_name: str = ""
    vendor: str = "NVIDIA"
    memory_basis: str = "nvidia-smi"
    memory_source: str = ""
    fp8: Quoted | None = None
    fp4: Quoted | None = None
    nvlink: Link | None = None
    pcie: Link | None = None
    rule: str = ""

    @property
    def fp16_flops(self) -> float:
        """Dense FP16/BF16 tensor-core peak, FLOP/s."""
        return self.fp16.dense

    @property
    def int8_ops(self) -> float:
        """Dense INT8 tensor-core peak, OP/s."""
        return self.int8.dense

    @property
    def fp32_flops(self) -> float:
        """Non-tensor FP32 peak, FLOP/s."""
        return self.fp32_tflops * 1e12

    def _tensor_rates(self) -> dict[str, Quoted | None]:
        return {"fp16": self.fp16, "bf16": self.fp16, "int8": self.int8, "fp8": self.fp8, "fp4": self.fp4}

    def has_tensor_cores(self, precision: str) -> bool:
        """Whether the GPU has ``"fp16"`` (``"bf16"``), ``"int8"``, ``"fp8"`` or ``"fp4"`` tensor cores."""
        rates = self._tensor_rates()
        return rates[choice("precision", precision, rates)] is not None

    def peak(self, precision: str = "fp16") -> float:
        """Dense peak of the ``"fp16"`` (``"bf16"``), ``"int8"``, ``"fp8"`` or ``"fp4"`` tensor cores, or the
        ``"fp32"`` CUDA cores; a precision the GPU has no tensor cores for is refused, naming the GPU."""
        rates = self._tensor_rates()
        if choice("precision", precision, (*rates, "fp32")) == "fp32":
            return self.fp32_flops
        if rates[precision] is None:
            raise ValueError(f"{self.display_name or self.name} has no {precision.upper()} tensor cores "
                             f"(its datasheet prints no {precision.upper()} rate)")
        return rates[precision].dense


def _quoted(rate: dict[str, Any] | None) -> Quoted | None:
    return None if rate is None else Quoted(rate["printed"], rate["sparse"], rate["accumulate"])


def _link(entry: dict[str, Any] | None) -> Link | None:
    return None if entry is None else Link(entry["name"], entry["per_direction_bytes_per_s"], entry["as_printed"],
                                           entry["printed_is"], entry.get("joins"), entry.get("topology", ""))


def _gpu(entry: dict[str, Any]) -> GPU:
    memory, rates, links = entry["memory"], entry["rates"], entry["interconnect"]
    return GPU(entry["id"], memory=memory["bytes"], memory_label=memory["as_printed"],
               bandwidth=entry["bandwidth"]["bytes_per_s"], fp16=_quoted(rates["fp16"]), int8=_quoted(rates["int8"]),
               fp32_tflops=rates["fp32"]["printed"], source=entry["source"], url=entry["url"], notes=entry["notes"],
               display_name=entry["display_name"], vendor=entry["vendor"], memory_basis=memory["basis"],
               memory_source=memory["source"], fp8=_quoted(rates["fp8"]), fp4=_quoted(rates["fp4"]),
               nvlink=_link(links["nvlink"]), pcie=_link(links["pcie"]), rule=entry["rule"])


def record(name: str) -> dict[str, Any]:
    """The GPU's entry in ``gpus.json`` as stored (every printed figure and its source)."""
    entries = {e["id"]: e for e in json.loads(DATA.read_text(encoding="utf-8"))["gpus"]}
    return lookup("GPU", name, entries)


GPUS: dict[str, GPU] = {gpu.name: gpu for gpu in map(_gpu, json.loads(DATA.read_text(encoding="utf-8"))["gpus"])}
"""The GPU table, in the order tables list it (the first edition's six first)."""


def get(name: GPU | str) -> GPU:
    """Look a GPU up by name (case-insensitive); an unknown name lists the known ones."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu must be a GPU or a name such as 'a100-80gb-sxm', got {type(name).__name__}")
    return lookup("GPU", name, GPUS)


def names() -> list[str]:
    return list(GPUS)


def display_name(gpu: GPU | str) -> str:
    """The name figures and tables show ("A100 80GB SXM")."""
    return get(gpu).display_name
