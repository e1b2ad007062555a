"""The quantizer: real numbers to small integers and back.

Choosing parameters is separate from applying them, as in torchao::

    scale, zero_point = choose_qparams_affine(r_min, r_max, bits)      # the grid
    q = quantize_affine(r, scale, zero_point, qmin, qmax)              # snap to it
    r_hat = dequantize_affine(q, scale, zero_point)                    # read it back

with ``s = (r_max - r_min) / (2**b - 1)``, ``z = round(-r_min / s)``,
``q = clip(round(r / s) + z, qmin, qmax)`` and ``r_hat = s * (q - z)``.
:func:`choose_qparams` / :func:`quantize` / :func:`dequantize` do the same on
whole tensors, per tensor, per channel or group-wise, carrying a :class:`QParams`.

Three arithmetic paths, chosen by the types you pass:

- **exact** -- every number is a ``Fraction``, ``Decimal``, ``int`` or decimal
  string (``"0.35"``): arithmetic in :class:`fractions.Fraction`, so ties are
  real ties (0.35 / 0.1 is 7/2 and rounds half up to 4, as by hand).  Scales and
  dequantized values come back as ``Fraction``, codes and zero points as ``int``.
  A ``float`` given as ``eps`` here is taken at its exact binary value.
- **float** -- Python floats and numpy arrays, in their own dtype (float64 for
  Python floats).  ``r / s`` is computed as ``r * (1 / s)``, the arithmetic of
  PyTorch's fake-quantize kernels, so a float32 result matches torch bit for bit.
  A decimal tie may land a hair off the tie in binary and round either way: in
  float64 ``0.35 / 0.1 == 3.4999999999999996`` (round-half-up: 3) while
  ``0.35 * (1 / 0.1) == 3.5`` (round-half-up: 4).  Use the exact path for hand
  calculations.
- **torch** -- torch tensors, in their dtype and on their device, same
  arithmetic as the float path.  16-bit inputs (float16, bfloat16, numpy's
  float16 too) are computed in float32, as PyTorch's fake-quantize kernels do:
  float32 scales, codes from float32 products, only fake-quantized values
  rounded back to 16 bits.  CPU tensors run the compiled loops on their own
  memory (no copy); other devices use torch's operations.  No autograd.

Rounding is always named: :attr:`Rounding.HALF_UP` (ties to the larger integer,
the book's convention) or :attr:`Rounding.HALF_EVEN` (ties to even, what
PyTorch and ONNX do).  Out-of-range values saturate at ``qmin``/``qmax``; codes
never wrap around.

A flat range (``r_min == r_max``) has no step.  Three conventions, all here:
the floor ``s = max(s, eps)`` (``DEFAULT_EPS`` is PyTorch's observer default,
2**-23); storing the constant exactly (``exact_constant=True``, the default); and
widening the range to contain 0 first (``include_zero=True``, what PyTorch's
observers and ONNX Runtime do, off by default to match the book's hand calculations;
:func:`weight_qparams`, the grid of RTN, GPTQ and AWQ, always turns it on).

Where each part lives:

- :mod:`~servebook.quant.grid`: the codes and the rounding (``Mapping``, ``Rounding``, ``qrange``);
- :mod:`~servebook.quant.affine`: the formulas (``choose_qparams_affine``, ``quantize_affine``, ...);
- :mod:`~servebook.quant.exact`: the exact path (``Fraction`` arithmetic, ``to_fraction``);
- :mod:`~servebook.quant.tensors`: whole tensors (``QParams``, ``choose_qparams``, ``quantize``, ...);
- :mod:`~servebook.quant.fp8`: FP8 (E4M3, E5M2): scaled, saturated, cast by torch or ml_dtypes;
- :mod:`~servebook.quant.packing`: two INT4 codes per byte (eight per int32 word);
- ``_fast`` and ``_loops``: what exists for speed alone (the formulas as compiled loops, run block by
  block on several threads; views of CPU tensors).
"""

from __future__ import annotations

from .affine import choose_qparams_affine, dequantize_affine, fake_quantize_affine, quantize_affine
from .exact import to_fraction
from .fp8 import (
    FP8Format,
    choose_fp8_scale,
    dequantize_fp8,
    fake_quantize_fp8,
    fp8_max,
    fp8_values,
    quantize_fp8,
)
from .grid import (
    DEFAULT_EPS,
    MAX_BITS,
    MIN_BITS,
    Mapping,
    Rounding,
    qrange,
    round_half_even,
    round_half_up,
    rounding_function,
)
from .packing import pack_int4, unpack_int4
from .tensors import (
    WEIGHT_GRANULARITIES,
    QParams,
    choose_qparams,
    dequantize,
    error_bound,
    fake_quantize,
    quantization_error,
    quantize,
    relative_error,
    weight_granularity,
    weight_qparams,
)

__all__ = [
    "DEFAULT_EPS", "MIN_BITS", "MAX_BITS", "Mapping", "Rounding", "QParams",
    "qrange", "choose_qparams_affine", "quantize_affine", "dequantize_affine", "fake_quantize_affine",
    "choose_qparams", "weight_qparams", "weight_granularity", "WEIGHT_GRANULARITIES", "quantize", "dequantize",
    "fake_quantize", "quantization_error", "relative_error", "error_bound",
    "FP8Format", "fp8_max", "fp8_values", "choose_fp8_scale", "quantize_fp8", "dequantize_fp8",
    "fake_quantize_fp8", "pack_int4", "unpack_int4", "round_half_up", "round_half_even", "rounding_function",
    "to_fraction",
]
