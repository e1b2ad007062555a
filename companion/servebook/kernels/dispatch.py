"""Which path a :class:`~servebook.qmodel.QuantizedLinear` takes: the fused kernel, or dequantize-then-matmul.

On a CUDA device of compute capability 8.0 or newer (Ampere on: the GPUs Triton's
README lists) with Triton installed, a 4-bit layer (group-wise, groups a multiple of
32, or per channel) multiplies FP16 or BF16 activations with :func:`w4a16_matmul`;
everywhere else, and for 8-bit or per-tensor layers, the layer dequantizes its
weight and calls ``torch.nn.functional.linear``.  :func:`use_fused` turns the
kernel off for a block of code, so the two paths can be measured side by side.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util

from ..checks import flag
from .w4a16 import w4a16_matmul

__all__ = ["MIN_CAPABILITY", "triton_available", "capable", "fused_applies", "w4a16_linear", "use_fused"]

_state = {"enabled": True}

MIN_CAPABILITY = (8, 0)
"""The oldest CUDA compute capability the fused kernel runs on: Ampere, the GPUs Triton's README lists."""


@functools.cache
def triton_available() -> bool:
    """Whether Triton can be imported here (it ships with PyTorch's CUDA wheels on Linux)."""
    return importlib.util.find_spec("triton") is not None


@functools.cache
def capable(device_index: int) -> bool:
    """Whether CUDA device ``device_index`` has :data:`MIN_CAPABILITY` or newer (a T4, 7.5, has not)."""
    import torch

    return tuple(torch.cuda.get_device_capability(device_index)) >= MIN_CAPABILITY


@contextlib.contextmanager
def use_fused(enabled: bool):
    """Within the block, 4-bit layers use the fused kernel (``True``, where it applies) or never (``False``)."""
    previous, _state["enabled"] = _state["enabled"], flag("enabled", enabled)
    try:
        yield
    finally:
        _state["enabled"] = previous


def fused_applies(layer, x) -> bool:
    """Whether ``layer`` (a QuantizedLinear) multiplies ``x`` with the fused kernel.

    The kernel has no backward pass, so a forward that records gradients for
    ``x`` takes the dequantize-then-matmul path.
    """
    import torch

    return (_state["enabled"] and x.is_cuda and layer.bits == 4 and layer.granularity in ("group", "channel")
            and x.dtype in (torch.float16, torch.bfloat16) and (layer.group_size or 32) % 32 == 0
            and not (x.requires_grad and torch.is_grad_enabled()) and triton_available()
            and capable(torch.cuda.current_device() if x.device.index is None else x.device.index))


def w4a16_linear(layer, x):
    """``layer(x)`` by the fused kernel: the layer's own buffers, no copy of its weight."""
    return w4a16_matmul(x, layer.qweight, layer.scales, layer.qzeros, group_size=layer.group_size, bias=layer.bias)
