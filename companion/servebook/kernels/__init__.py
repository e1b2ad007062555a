"""Kernels of the book's own: a fused W4A16 matmul in Triton, beside :mod:`servebook.quant`.

- :func:`w4a16_matmul`: 16-bit activations times INT4 weights in the book's
  packing (:func:`servebook.quant.pack_int4`, group-wise FP16 scales, packed zero
  points), dequantized in registers and accumulated in FP32;
- :func:`choose_tiles` / :class:`Tiles`: how it cuts decode and prefill shapes;
- :func:`fused_bytes` / :func:`unfused_bytes`: the bytes each path must move;
- :func:`fused_applies`, :func:`w4a16_linear`, :func:`use_fused`: the dispatch
  :class:`servebook.qmodel.QuantizedLinear` uses (the kernel on CUDA with Triton,
  dequantize-then-matmul elsewhere);
- :func:`kernel_source`: the kernel's code, read without importing Triton.

Importing this package never imports Triton: the kernel module is loaded when it first runs.
"""

from .dispatch import MIN_CAPABILITY, fused_applies, triton_available, use_fused, w4a16_linear
from .source import kernel_source
from .w4a16 import SYMMETRIC_OFFSET, Tiles, choose_tiles, fused_bytes, unfused_bytes, w4a16_matmul

__all__ = ["w4a16_matmul", "Tiles", "choose_tiles", "fused_bytes", "unfused_bytes", "SYMMETRIC_OFFSET",
           "MIN_CAPABILITY", "fused_applies", "triton_available", "use_fused", "w4a16_linear", "kernel_source"]
