"""``w4a16_matmul``: 16-bit activations times INT4 weights in the book's packing, by the fused Triton kernel.

The weight is what :class:`servebook.qmodel.QuantizedLinear` stores: ``packed``
holds two 4-bit codes per byte along the input features, low nibble first
(:func:`servebook.quant.pack_int4`), shape ``(N, ceil(K / 2))``; ``scales`` is
FP16, ``(N, K // g)`` for groups of ``g`` input features or ``(N,)`` per output
channel; ``zeros`` holds the zero points packed like the codes and flattened
(``ceil(N * groups / 2)`` bytes), or is ``None`` for the symmetric mapping,
whose codes are stored offset by 8.  The result is ``x @ W_hat.T`` with
``W_hat[n, k] = s[n, k // g] * (q[n, k] - z[n, k // g])``.  Group sizes must be
multiples of 32 (a step of the kernel lies inside one group).

Tile sizes are chosen by :func:`choose_tiles` from the shape alone (no
autotuning, so a run is reproducible); a benchmark may pass its own
:class:`Tiles`.  Triton is imported only when the kernel runs.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from .. import checks, memory
from ..checks import choice, whole
from ..units import ceil_div

__all__ = ["Tiles", "choose_tiles", "w4a16_matmul", "fused_bytes", "unfused_bytes", "SYMMETRIC_OFFSET"]

SYMMETRIC_OFFSET = 8   # signed 4-bit codes -8..7 are stored as 0..15 (servebook.qmodel's packing)
_DOT_MIN = 16          # tl.dot needs every tile side to be at least 16
_STEP_MIN = 2 * _DOT_MIN   # a step of K is two dots (even and odd inputs) of block_k / 2 each


@dataclass(frozen=True)
class Tiles:
    """How the kernel cuts the work: output tiles of ``block_m x block_n``, steps of ``block_k`` inputs.

    ``split_k`` programs share one output tile, each taking every ``split_k``-th
    step of K (a decode step has too few output tiles to keep every SM busy);
    their FP32 partial sums are added in a fixed order, so results do not vary
    from run to run.  ``num_warps`` and ``num_stages`` are Triton's launch options.
    """

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self):
        for name, least in (("block_m", _DOT_MIN), ("block_n", _DOT_MIN), ("block_k", _STEP_MIN)):
            value = whole(name, getattr(self, name), least)
            if value & (value - 1):
                raise ValueError(f"{name} must be a power of two (a Triton block), got {value}")
        whole("split_k", self.split_k, 1)
        choice("num_warps", self.num_warps, (1, 2, 4, 8, 16))
        whole("num_stages", self.num_stages, 1)

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """Programs along tokens, output features and K."""
        return ceil_div(m, self.block_m), ceil_div(n, self.block_n), self.split_k


def _largest_power_of_two_dividing(n: int, cap: int) -> int:
    block = cap
    while n % block:
        block //= 2
    return block


def choose_tiles(m: int, n: int, k: int, group_size: int | None = None, sm_count: int = 132) -> Tiles:
    """Tiles for ``m`` tokens, ``n`` output and ``k`` input features, groups of ``group_size`` (None: per channel).

    Decode (a few tokens) reads the weight once and does little arithmetic, so
    it wants many small programs to pull the weight through every SM: narrow
    output tiles, and K split until there are about four programs per SM.
    Prefill (hundreds of tokens and more) is a matmul: large square tiles reuse
    each weight tile for many tokens.  ``block_k`` divides the group size, so a
    step of K meets one scale per output feature.
    """
    m, n, k = whole("m", m), whole("n", n), whole("k", k)
    sm_count = whole("sm_count", sm_count)
    group = k if group_size is None else checks.group_size(group_size, k)
    if m <= 64:
        block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
        block_n, cap_k, warps, stages = 64, 128, 4, 4
    else:
        block_m, block_n, cap_k, warps, stages = 128, 128, 64, 8, 3
    block_k = cap_k if group_size is None else _largest_power_of_two_dividing(group, cap_k)
    if block_k < _STEP_MIN:
        raise ValueError(f"group_size must be a multiple of {_STEP_MIN} for the fused kernel, got {group_size}")
    split_k = 1
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    steps = ceil_div(k, block_k)
    while m <= 64 and tiles * split_k < 4 * sm_count and split_k * 2 <= steps // 4:
        split_k *= 2   # each program keeps at least 4 steps of K
    return Tiles(block_m, block_n, block_k, split_k, warps, stages)


def fused_bytes(m: int, n: int, k: int, group_size: int | None = None, zero_points: bool = True) -> int:
    """Bytes the fused kernel must move: the activations and the stored weight read, the output written (FP16)."""
    m, n, k = whole("m", m), whole("n", n), whole("k", k)
    groups = 1 if group_size is None else k // checks.group_size(group_size, k)
    codes = n * ceil_div(k, 2)   # each row packed on its own: an odd row ends in half a byte of padding
    scales = n * groups * 2
    zeros = ceil_div(n * groups, 2) if zero_points else 0
    return 2 * m * k + codes + scales + zeros + 2 * m * n


def unfused_bytes(m: int, n: int, k: int, group_size: int | None = None, zero_points: bool = True) -> int:
    """The least dequantize-then-matmul can move: the stored weight read, the 16-bit weight written and read back.

    A lower bound: servebook.qmodel's path also writes and reads its unpacked
    codes and FP32 intermediates, so it moves more than this.
    """
    return fused_bytes(m, n, k, group_size, zero_points) + 2 * memory.weight_bytes(n * k, "fp16")


@functools.cache
def _kernel():
    from .triton_w4a16 import w4a16_kernel

    return w4a16_kernel


def _check_operands(x, packed, scales, zeros, bias, group_size):
    """(M, N, K, groups) of the operands, each checked against the packing; raises naming the argument."""
    import torch

    for name, tensor in (("x", x), ("packed", packed), ("scales", scales)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    choice("x.dtype", x.dtype, (torch.float16, torch.bfloat16))
    choice("packed.dtype", packed.dtype, (torch.uint8,))
    choice("scales.dtype", scales.dtype, (torch.float16,))
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have shape (..., in_features), got {tuple(x.shape)}")
    k = x.shape[-1]
    m = x.numel() // k
    if packed.ndim != 2 or packed.shape[1] != ceil_div(k, 2):
        raise ValueError(f"packed must have shape (out_features, ceil({k} / 2)) = (N, {ceil_div(k, 2)}) for "
                         f"{k} input features, got {tuple(packed.shape)}")
    n = packed.shape[0]
    groups = 1 if group_size is None else k // checks.group_size(group_size, k)
    allowed = [(n, groups)] + ([(n,)] if group_size is None else [])
    if tuple(scales.shape) not in allowed:
        grid = "one per output channel" if group_size is None else f"one per group of {group_size} inputs"
        raise ValueError(f"scales must have shape {' or '.join(map(str, allowed))} ({grid}), "
                         f"got {tuple(scales.shape)}")
    if zeros is not None:
        choice("zeros.dtype", zeros.dtype, (torch.uint8,))
        if zeros.numel() != ceil_div(n * groups, 2):
            raise ValueError(f"zeros must hold {n * groups} zero points packed two per byte "
                             f"({ceil_div(n * groups, 2)} bytes), got {zeros.numel()} bytes")
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,)):
        raise ValueError(f"bias must be a tensor of shape ({n},), one per output feature, got "
                         f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
    operands = {"packed": packed, "scales": scales, "zeros": zeros, "bias": bias}
    for name, tensor in ((name, t) for name, t in operands.items() if t is not None):
        if tensor.device != x.device:
            raise ValueError(f"{name} is on {tensor.device}, x on {x.device}: the kernel needs them on one device")
    return m, n, k, groups


def _check_runs_here(x):
    if x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("on a CPU the Triton kernel runs only in Triton's interpreter: set TRITON_INTERPRET=1 "
                           "before servebook.kernels runs it (or use the dequantize-then-matmul path)")


def w4a16_matmul(x, packed, scales, zeros=None, *, group_size: int | None = None, bias=None,
                 tiles: Tiles | None = None):
    """``x @ W_hat.T (+ bias)``: ``x`` (..., K) FP16 or BF16 times the packed INT4 weight, accumulated in FP32.

    ``group_size``: the group of input features each scale covers (``None``: one
    scale per output channel).  ``zeros``: packed zero points, or ``None`` for
    symmetric codes stored offset by 8.  Returns (..., N) in ``x``'s dtype.

    Each group's sum of ``x * (q - z)`` is multiplied by its scale in FP32, so
    the weight ``s * (q - z)`` is never rounded to 16 bits: the result differs
    from dequantize-then-matmul (which rounds ``W_hat`` to FP16 first) by at
    most ``2^-11`` of ``sum |x| |W_hat|``, besides the order of the sums.  Only
    shapes and dtypes are checked, not values, so the call can be captured in a
    CUDA graph.
    """
    import torch

    m, n, k, groups = _check_operands(x, packed, scales, zeros, bias, group_size)
    _check_runs_here(x)
    if tiles is None:
        sm_count = (torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4)
        tiles = choose_tiles(m, n, k, group_size, sm_count)
    elif not isinstance(tiles, Tiles):
        raise TypeError(f"tiles must be a Tiles or None, got {type(tiles).__name__}")
    group = k if group_size is None else group_size
    if group % tiles.block_k and group_size is not None:
        raise ValueError(f"tiles.block_k {tiles.block_k} must divide group_size {group_size}: a step of K "
                         "must lie inside one group")
    if m == 0:
        return x.new_empty(*x.shape[:-1], n)
    x2 = x.reshape(m, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    partial = tiles.split_k > 1
    out = torch.empty((tiles.split_k, m, n) if partial else (1, m, n),
                      dtype=torch.float32 if partial else x.dtype, device=x.device)
    _kernel()[tiles.grid(m, n)](
        x2, packed, scales, packed if zeros is None else zeros, packed if bias is None else bias, out,
        m, n, k, groups, group, x2.stride(0), packed.stride(0), scales.stride(0) if scales.ndim == 2 else 1,
        out.stride(1), out.stride(0), ZERO_POINTS=zeros is not None, BIAS=bias is not None, BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k, SPLIT_K=tiles.split_k, num_warps=tiles.num_warps,
        num_stages=tiles.num_stages)
    result = out.sum(0).to(x.dtype) if partial else out[0]
    return result.reshape(*x.shape[:-1], n)
