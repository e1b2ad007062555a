"""GPUs: datasheet numbers, with their sources.

One table of the GPUs the book uses.  Every GPU a chapter names is here, so a
number about a GPU has one producer.  Rates are *dense* (a datasheet that
prints 2:4-sparse rates is halved, see :class:`Quoted`); memory is what
``nvidia-smi`` reports; bandwidth is bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checks import choice, lookup
from .units import GB, MiB


@dataclass(frozen=True)
class Quoted:
    """A peak rate exactly as a datasheet prints it, and whether that print assumes 2:4 sparsity.

    NVIDIA's Ampere, Hopper and Ada datasheets print tensor-core rates "with
    sparsity" (a 2:4 structured-sparse matrix), twice the dense rate a serving
    engine gets from a dense model.  :attr:`dense` undoes that.
    """

    value: float  # in the datasheet's unit (TFLOPS or TOPS) as printed
    sparse: bool  # True where the printed figure is the sparse one (marked * on the datasheet)

    @property
    def dense(self) -> float:
        """The dense rate in operations per second."""
        return self.value * 1e12 / (2 if self.sparse else 1)


@dataclass(frozen=True)
class GPU:
    """One GPU's memory and peak rates, from its datasheet.

    ``memory`` is what ``nvidia-smi`` reports as the card's total (bytes): the
    datasheet's capacity label is given in ``memory_label`` as printed, and the
    two differ (the A100's "80GB" is 81,920 MiB = 80 GiB).  ``bandwidth`` is
    in bytes per second (datasheets print decimal GB/s and TB/s).
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

    def peak(self, precision: str = "fp16") -> float:
        """Dense peak of the ``"fp16"`` or ``"int8"`` tensor cores, or the ``"fp32"`` CUDA cores."""
        rates = {"fp16": self.fp16_flops, "bf16": self.fp16_flops, "int8": self.int8_ops, "fp32": self.fp32_flops}
        return rates[choice("precision", precision, rates)]


_SPARSE_NOTE = "The datasheet prints tensor-core rates with sparsity (*); dense is half."

GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in [
        GPU("a100-80gb-sxm", memory=81_920 * MiB, memory_label="80GB HBM2e", bandwidth=2_039 * GB,
            fp16=Quoted(312, sparse=False), int8=Quoted(624, sparse=False), fp32_tflops=19.5,
            source="nvidiaa100",
            url="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            notes="SXM column. The datasheet prints dense and sparse side by side: FP16 312 | 624*, "
                  "INT8 624 | 1,248* TOPS. The PCIe 80GB card has 1,935 GB/s."),
        GPU("a100-40gb-sxm", memory=40_960 * MiB, memory_label="40GB HBM2", bandwidth=1_555 * GB,
            fp16=Quoted(312, sparse=False), int8=Quoted(624, sparse=False), fp32_tflops=19.5,
            source="nvidiaa100",
            url="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            notes="A100 40GB SXM column: the 80GB card's compute with 1,555 GB/s of HBM2. nvidia-smi "
                  "reports 40,960 MiB (CUDA's deviceQuery 42,298,834,944 bytes usable)."),
        GPU("h100-sxm", memory=81_559 * MiB, memory_label="80GB HBM3", bandwidth=3_350 * GB,
            fp16=Quoted(1_979, sparse=True), int8=Quoted(3_958, sparse=True), fp32_tflops=67,
            source="nvidiah100", url="https://www.nvidia.com/en-us/data-center/h100/",
            notes="SXM column. " + _SPARSE_NOTE + " FP16/BF16 1,979* -> 989.5 dense "
                  "(the Hopper whitepaper lists 989.4); INT8 3,958* -> 1,979 dense."),
        GPU("h200", memory=143_771 * MiB, memory_label="141GB HBM3e", bandwidth=4_800 * GB,
            fp16=Quoted(1_979, sparse=True), int8=Quoted(3_958, sparse=True), fp32_tflops=67,
            source="nvidiah200", url="https://www.nvidia.com/en-us/data-center/h200/",
            notes="SXM column: the H100's compute with more, faster memory. " + _SPARSE_NOTE),
        GPU("l4", memory=23_034 * MiB, memory_label="24GB GDDR6", bandwidth=300 * GB,
            fp16=Quoted(242, sparse=True), int8=Quoted(485, sparse=True), fp32_tflops=30.3,
            source="nvidial4", url="https://www.nvidia.com/en-us/data-center/l4/",
            notes=_SPARSE_NOTE + " FP16 242* -> 121 dense; INT8 485* -> 242.5 dense."),
        GPU("t4", memory=15_360 * MiB, memory_label="16GB GDDR6", bandwidth=320 * GB,
            fp16=Quoted(65, sparse=False), int8=Quoted(130, sparse=False), fp32_tflops=8.1,
            source="nvidiat4", url="https://www.nvidia.com/en-us/data-center/tesla-t4/",
            notes="Turing has no sparse tensor cores: the datasheet's figures are dense. "
                  "FP16 is 'mixed precision (FP16/FP32)'; bandwidth is printed as '320+ GB/s'."),
    ]
}
"""The GPU table.  ``memory`` is the total ``nvidia-smi`` reports (public logs: A100-SXM4-40GB
40,960 MiB; A100-SXM4-80GB 81,920 MiB; H100 80GB HBM3 81,559 MiB; H200 143,771 MiB; L4 23,034 MiB; T4 15,360 MiB)."""


def get(name: GPU | str) -> GPU:
    """Look a GPU up by name (case-insensitive); an unknown name lists the known ones."""
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu must be a GPU or a name such as 'a100-80gb-sxm', got {type(name).__name__}")
    return lookup("GPU", name, GPUS)




def names() -> list[str]:
    return list(GPUS)
