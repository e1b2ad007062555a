"""Weight and activation precision (W16A16, W8A8 in INT8, W8A8-FP8, W4A16) and the compute time of a
step's FLOPs under each."""

from __future__ import annotations

from dataclasses import dataclass

from .. import memory
from ..checks import lookup
from ..gpus import GPU


@dataclass(frozen=True)
class Scheme:
    """How weights are stored and how the matmuls run.

    ``dequant_flops_per_weight`` and ``dequant_tile_tokens`` model W4A16's extra
    work: a kernel converts each 4-bit weight back to FP16 (unpack, subtract the
    zero point, multiply by the scale: counted as one fused multiply-add, 2 FLOPs)
    once for every ``dequant_tile_tokens`` rows of activations it multiplies, on
    the CUDA cores at the FP32 rate.  These are modelling assumptions, not
    datasheet facts; kernels differ, so change them to match yours.
    """

    name: str
    weight_dtype: str
    matmul_precision: str            # "fp16" or "int8": which tensor cores run the matmuls
    group_size: int | None = None    # group-wise scales (and zero points) stored with the weights
    dequant_flops_per_weight: int = 0
    dequant_tile_tokens: int = 64

    def weight_bytes(self, n_params: int) -> int:
        """Bytes of ``n_params`` weights in this scheme (group scales included)."""
        return memory.weight_bytes(n_params, self.weight_dtype, group_size=self.group_size)


SCHEMES: dict[str, Scheme] = {
    "W16A16": Scheme("W16A16", "fp16", "fp16"),
    "W8A8": Scheme("W8A8", "int8", "int8"),
    # FP8 weights and activations, matmuls on the FP8 tensor cores (Ada, Hopper, Blackwell; not the A100)
    "W8A8-FP8": Scheme("W8A8-FP8", "fp8", "fp8"),
    "W4A16": Scheme("W4A16", "int4", "fp16", group_size=128, dequant_flops_per_weight=2),
}


def scheme(name: Scheme | str) -> Scheme:
    """Look a scheme up by name (``"W16A16"``, ``"W8A8"``, ``"W8A8-FP8"``, ``"W4A16"``)."""
    if isinstance(name, Scheme):
        return name
    if not isinstance(name, str):
        raise TypeError(f"scheme must be a Scheme or a name, got {type(name).__name__}")
    return lookup("scheme", name, SCHEMES, key=str.upper)



def runs_on(device: GPU, recipe: Scheme) -> bool:
    """Whether ``device`` has tensor cores for ``recipe``'s matmuls (W8A8-FP8 needs FP8 ones)."""
    return device.has_tensor_cores(recipe.matmul_precision)


def peak_rates(device: GPU, recipe: Scheme) -> tuple[float, float, float]:
    """The rates :func:`compute_time` divides by: the matmuls' (at the scheme's precision),
    attention's (FP16 tensor cores) and dequantization's (FP32 CUDA cores), FLOP/s."""
    return device.peak(recipe.matmul_precision), device.peak("fp16"), device.peak("fp32")


def compute_time(device: GPU, recipe: Scheme, matmul_flops: int, attention_flops: int, dequant_flops: int,
                 rates: tuple[float, float, float] | None = None) -> float:
    """Tensor-core time of the matmuls (at the scheme's precision) and of attention (FP16), plus the
    CUDA-core time of W4A16's dequantization, which competes with the matmuls for the same SMs.

    ``rates``: :func:`peak_rates` of ``device`` and ``recipe``, for a caller that looked them up once."""
    matmul, attention, dequant = peak_rates(device, recipe) if rates is None else rates
    return matmul_flops / matmul + attention_flops / attention + dequant_flops / dequant
