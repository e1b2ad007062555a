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
  arithmetic as the float path.  CPU tensors run the numpy kernels on their own
  memory (no copy); other devices, and bfloat16, use torch's operations.  No autograd.

Rounding is always named: :attr:`Rounding.HALF_UP` (ties to the larger integer,
the book's convention) or :attr:`Rounding.HALF_EVEN` (ties to even, what
PyTorch and ONNX do).  Out-of-range values saturate at ``qmin``/``qmax``; codes
never wrap around.

A flat range (``r_min == r_max``) has no step.  Three conventions, all here:
the floor ``s = max(s, eps)`` (``DEFAULT_EPS`` is PyTorch's observer default,
2**-23); storing the constant exactly (``exact_constant=True``, the default); and
widening the range to contain 0 first (``include_zero=True``, what PyTorch's
observers and ONNX Runtime do, off by default to match the seeds' hand calculations;
:func:`weight_qparams`, the grid of RTN, GPTQ and AWQ, always turns it on).
"""

from __future__ import annotations

import enum
import math
import numbers
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_EPS", "Mapping", "Rounding", "QParams",
    "qrange", "choose_qparams_affine", "quantize_affine", "dequantize_affine", "fake_quantize_affine",
    "choose_qparams", "weight_qparams", "quantize", "dequantize", "fake_quantize", "quantization_error", "error_bound",
    "pack_int4", "unpack_int4", "round_half_up", "round_half_even", "rounding_function", "to_fraction",
]

# The floor on the scale.  PyTorch's observers default to float32's machine
# epsilon, torch.finfo(torch.float32).eps == 2**-23; the seeds' 2**-12 is not a default.
DEFAULT_EPS = 2.0**-23

MIN_BITS, MAX_BITS = 1, 16


class Mapping(enum.Enum):
    """How the real range maps onto the integer codes."""

    #: affine: s = (r_max - r_min) / (2^b - 1), z = round(-r_min / s), codes [0, 2^b - 1]
    ASYMMETRIC = "asymmetric"
    #: symmetric: s = max|r| / (2^(b-1) - 1), z = 0, codes [-(2^(b-1) - 1), 2^(b-1) - 1]
    SYMMETRIC = "symmetric"


class Rounding(enum.Enum):
    """How a value exactly halfway between two integers is rounded."""

    #: ties go to the larger integer: 3.5 -> 4, -3.5 -> -3 (the book's convention)
    HALF_UP = "half_up"
    #: ties go to the even integer: 3.5 -> 4, 2.5 -> 2 (PyTorch, ONNX, IEEE 754 default)
    HALF_EVEN = "half_even"


# --------------------------------------------------------------------------- checks


def _check_enum(value, enum_type, name):
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        for member in enum_type:
            if value.lower() in (member.value, member.name.lower()):
                return member
    allowed = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
    if isinstance(value, str):
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    raise TypeError(f"{name} must be one of {allowed}, got {type(value).__name__}")


def _check_bits(bits, mapping):
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise TypeError(f"bits must be an int in {MIN_BITS}..{MAX_BITS}, got {type(bits).__name__}")
    bits = int(bits)
    low = 2 if mapping is Mapping.SYMMETRIC else MIN_BITS
    if not low <= bits <= MAX_BITS:
        extra = " (a symmetric grid needs a sign and a magnitude bit)" if mapping is Mapping.SYMMETRIC else ""
        raise ValueError(f"bits must be in {low}..{MAX_BITS} for {mapping.name}{extra}, got {bits}")
    return bits


def qrange(bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC) -> tuple[int, int]:
    """The smallest and largest integer code: ``(0, 2^b - 1)`` or ``(-(2^(b-1) - 1), 2^(b-1) - 1)``."""
    mapping = _check_enum(mapping, Mapping, "mapping")
    bits = _check_bits(bits, mapping)
    if mapping is Mapping.ASYMMETRIC:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1


def _check_qrange(qmin, qmax):
    for name, value in (("qmin", qmin), ("qmax", qmax)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not qmin < qmax:
        raise ValueError(f"qmin must be smaller than qmax, got qmin={qmin}, qmax={qmax}")
    return int(qmin), int(qmax)


# --------------------------------------------------------------------------- number kinds

_EXACT_TYPES = (Fraction, Decimal, str, numbers.Integral)


def _torch():
    return sys.modules.get("torch")


def _is_tensor(x) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_exact(x) -> bool:
    return isinstance(x, _EXACT_TYPES) and not isinstance(x, (bool, np.bool_))


def _to_fraction(value, name) -> Fraction:
    """An exact scalar as a Fraction; floats at their exact binary value."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got a bool")
    if isinstance(value, str):
        try:
            value = Decimal(value.strip()) if "/" not in value else Fraction(value.strip())
        except Exception as err:  # noqa: BLE001 - both parsers raise different types
            raise ValueError(f"{name} must be a decimal string such as '0.35' or '1/10', got {value!r}") from err
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{name} must be finite, got {value}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if isinstance(value, (Fraction, Decimal, numbers.Integral, float, np.floating)):
        return Fraction(value)
    raise TypeError(f"{name} must be a real number, got {type(value).__name__}")


def _float_scalar(value, name) -> float:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got a bool")
    if isinstance(value, str):
        value = _to_fraction(value, name)
    if not isinstance(value, (numbers.Real, Decimal)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _as_float_array(x, name):
    """``x`` as a floating numpy array, or a torch tensor as it is."""
    if _is_tensor(x):
        if not (x.is_floating_point()):
            if x.dtype == _torch().bool or x.is_complex():
                raise TypeError(f"{name} must hold real numbers, got a {x.dtype} tensor")
            x = x.to(_torch().get_default_dtype())
        return x
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number or an array, got a bool")
    array = np.asarray(x)
    if array.dtype.kind in "iu":
        array = array.astype(np.float64)
    elif array.dtype.kind != "f":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return array


def _size(x) -> int:
    return x.numel() if _is_tensor(x) else np.size(x)


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))


def _is_integer_array(x) -> bool:
    if _is_tensor(x):
        return not (x.is_floating_point() or x.is_complex() or x.dtype == _torch().bool)
    return np.asarray(x).dtype.kind in "iu"


def _all_finite(x) -> bool:
    if _is_tensor(x):
        return bool(_torch().isfinite(x).all())
    return bool(np.isfinite(x).all())


# --------------------------------------------------------------------------- rounding


def round_half_up(v):
    """Round to the nearest integer, ties to the larger one: ``floor(v) + (frac(v) >= 1/2)``.

    Unlike ``floor(v + 0.5)`` this is right for every float (``floor(0.49999999999999994 + 0.5)`` is 1).
    Works on Fractions (exactly), floats, numpy arrays and torch tensors; returns floats for arrays.
    """
    if isinstance(v, Fraction):
        return math.floor(v + Fraction(1, 2))
    if _is_tensor(v):
        torch = _torch()
        down = torch.floor(v)
        return down + ((v - down) >= 0.5).to(v.dtype)
    if type(v) is float:
        down = math.floor(v)
        return down + (v - down >= 0.5)
    down = np.floor(v)
    return down + ((v - down) >= 0.5)


def round_half_even(v):
    """Round to the nearest integer, ties to the even one (IEEE 754's default, ``torch.round``, ``np.rint``)."""
    if isinstance(v, Fraction):
        return round(v)
    if _is_tensor(v):
        return _torch().round(v)
    if type(v) is float:
        return round(v)
    return np.rint(v)


def _rounder(rounding):
    rounding = _check_enum(rounding, Rounding, "rounding")
    return round_half_up if rounding is Rounding.HALF_UP else round_half_even


def rounding_function(rounding: Rounding | str):
    """:func:`round_half_up` or :func:`round_half_even`, by name (``"half_up"``) or member."""
    return _rounder(rounding)


def to_fraction(value) -> Fraction:
    """An exact number (``Fraction``, ``Decimal``, ``int``, ``"0.35"``, ``"1/10"``, or a float at its
    exact binary value) as a ``Fraction``: ``to_fraction("0.35") == Fraction(7, 20)``."""
    return _to_fraction(value, "value")


# --------------------------------------------------------------------------- choosing parameters


def choose_qparams_affine(min_val, max_val, bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC, *,
                          eps=DEFAULT_EPS, rounding: Rounding | str = Rounding.HALF_UP,
                          include_zero: bool = False, exact_constant: bool = True):
    """Scale and zero point for the real range ``[min_val, max_val]`` (elementwise over arrays of ranges).

    - ``ASYMMETRIC``: ``s = (r_max - r_min) / (qmax - qmin)``, ``z = clip(qmin + round(-r_min / s), qmin, qmax)``.
    - ``SYMMETRIC``: ``s = max(|r_min|, |r_max|) / qmax``, ``z = 0``.

    ``eps`` floors the scale, ``s = max(s, eps)``, so a flat range never divides by zero.
    ``exact_constant`` (default on) stores a flat range ``r_min == r_max == c`` exactly instead:
    ``s = |c|`` and ``z`` chosen so that ``c`` is one code away from ``z`` (``s = 1, z = 0`` for
    ``c = 0``); switch it off to see the bare epsilon floor of the seeds' hand calculation.
    ``include_zero`` widens the range to contain 0 first, as PyTorch's observers and ONNX Runtime
    do; it makes real 0 a code exactly and keeps ``z`` inside ``[qmin, qmax]``.  Without it, a
    range that does not contain 0 clips ``z`` and every value beyond the clipped grid saturates.

    Scalars in the exact path (Fraction, Decimal, int, decimal str) give ``(Fraction, int)``;
    Python floats give ``(float, int)``; numpy arrays and scalars give arrays (scalars) of their
    float dtype and ``int32``; torch tensors give tensors of the same dtype and ``torch.int32``.
    """
    mapping = _check_enum(mapping, Mapping, "mapping")
    rounding = _check_enum(rounding, Rounding, "rounding")
    bits = _check_bits(bits, mapping)
    qmin, qmax = qrange(bits, mapping)
    if not isinstance(include_zero, bool) or not isinstance(exact_constant, bool):
        raise TypeError("include_zero and exact_constant must be bools")
    if _is_exact(min_val) and _is_exact(max_val):
        return _choose_exact(_to_fraction(min_val, "min_val"), _to_fraction(max_val, "max_val"),
                             qmin, qmax, mapping, _to_fraction(eps, "eps"), rounding, include_zero, exact_constant)
    eps_value = _float_scalar(eps, "eps")
    if eps_value <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if _is_tensor(min_val) or _is_tensor(max_val):
        return _choose_torch(min_val, max_val, qmin, qmax, mapping, eps_value, rounding, include_zero,
                             exact_constant)
    python_scalars = type(min_val) in (float, int) and type(max_val) in (float, int)
    lo = _as_float_array(min_val, "min_val")
    hi = _as_float_array(max_val, "max_val")
    dtype = np.result_type(lo.dtype, hi.dtype)
    scale, zero_point = _choose_arrays(np, lo.astype(dtype), hi.astype(dtype), qmin, qmax, mapping, eps_value,
                                       rounding, include_zero, exact_constant)
    if python_scalars:
        return float(scale), int(zero_point)
    # numpy in, numpy out: 0-d ranges give numpy scalars that keep the dtype (np.float32 stays float32)
    return np.asarray(scale, dtype=dtype)[()], np.asarray(zero_point).astype(np.int32)[()]


def _check_range(lo, hi, finite, ordered):
    if not finite:
        raise ValueError("min_val and max_val must be finite (no NaN or inf in the data)")
    if not ordered:
        raise ValueError("min_val must be <= max_val (r_min > r_max is not a range)")


def _choose_exact(lo, hi, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant):
    _check_range(lo, hi, True, lo <= hi)
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    rnd = _rounder(rounding)
    if include_zero:
        lo, hi = min(lo, 0), max(hi, 0)
    if exact_constant and lo == hi:
        return _constant_qparams(lo, qmin, mapping)
    if mapping is Mapping.SYMMETRIC:
        return max(max(-lo, hi) / qmax, eps), 0
    scale = max((hi - lo) / (qmax - qmin), eps)
    return scale, min(max(qmin + rnd(-lo / scale), qmin), qmax)


def _constant_qparams(c, qmin, mapping):
    """A flat range stored exactly: ``c = s * (q - z)`` with ``q - z = sign(c)``."""
    if c == 0:
        return type(c)(1), 0
    if mapping is Mapping.SYMMETRIC or c > 0:
        return abs(c), 0 if mapping is Mapping.SYMMETRIC else qmin
    return -c, qmin + 1


def _choose_arrays(xp, lo, hi, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant):
    """Shared by numpy (``xp = np``) and torch; ``lo``/``hi`` are float arrays of one dtype."""
    finite = bool(xp.isfinite(lo).all()) and bool(xp.isfinite(hi).all())
    _check_range(lo, hi, finite, finite and bool((lo <= hi).all()))
    rnd = _rounder(rounding)
    if include_zero:
        lo, hi = lo.clip(max=0), hi.clip(min=0)
    if mapping is Mapping.SYMMETRIC:
        scale = (xp.maximum(-lo, hi) / qmax).clip(min=eps)
        zero_point = xp.zeros_like(scale)
    else:
        scale = ((hi - lo) / (qmax - qmin)).clip(min=eps)
        zero_point = (qmin + rnd(-lo / scale)).clip(qmin, qmax)
    if exact_constant:
        # a flat range at a subnormal value keeps the eps floor: 1/|c| would overflow the dtype
        tiny = (np.finfo if xp is np else xp.finfo)(lo.dtype).tiny
        flat = (lo == hi) & ((lo == 0) | (xp.abs(lo) >= tiny))
        if bool(flat.any()):
            one = xp.ones_like(scale)
            scale = xp.where(flat, xp.where(lo == 0, one, xp.abs(lo)), scale)
            if mapping is Mapping.ASYMMETRIC:
                zero_point = xp.where(flat & (lo < 0), one * (qmin + 1), xp.where(flat, one * qmin, zero_point))
    return scale, zero_point


def _choose_torch(min_val, max_val, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant):
    torch = _torch()
    ref = min_val if _is_tensor(min_val) else max_val
    lo = torch.as_tensor(min_val, device=ref.device)
    hi = torch.as_tensor(max_val, device=ref.device)
    dtype = torch.promote_types(lo.dtype, hi.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    scale, zero_point = _choose_arrays(torch, lo.to(dtype), hi.to(dtype), qmin, qmax, mapping, eps, rounding,
                                       include_zero, exact_constant)
    return scale, zero_point.to(torch.int32)


# --------------------------------------------------------------------------- applying them

# Elements per block of the float kernels: a block of float32 (256 KiB) and its scratch stay in
# the L2 cache across the five or six passes (multiply, round, shift, clip, ...), so the big
# tensor is read once and written once instead of once per pass.
_BLOCK_ELEMENTS = 1 << 16


def _code_dtype(qmin, qmax, torch_backend=False):
    """The smallest integer dtype holding [qmin, qmax] (torch lacks full uint16 support: int32 there)."""
    if torch_backend:
        torch = _torch()
        candidates = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
        return next(d for d in candidates if torch.iinfo(d).min <= qmin and qmax <= torch.iinfo(d).max)
    candidates = (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64)
    return next(d for d in candidates if np.iinfo(d).min <= qmin and qmax <= np.iinfo(d).max)


def _check_zero_point_scalar(zero_point):
    if isinstance(zero_point, Fraction) and zero_point.denominator == 1:
        return int(zero_point)
    if isinstance(zero_point, (bool, np.bool_)) or not isinstance(zero_point, numbers.Integral):
        raise TypeError(f"zero_point must be an int, got {type(zero_point).__name__}")
    return int(zero_point)


def _check_zero_point_range(low, high, qmin, qmax):
    """A zero point is a code: outside ``[qmin, qmax]`` it would shift every value onto a clipped grid."""
    if low < qmin or high > qmax:
        found = f"{int(low)}" if low == high else f"values in [{int(low)}, {int(high)}]"
        raise ValueError(f"zero_point must lie in [{qmin}, {qmax}] (the code range), got {found}")


def _check_positive_scale_scalar(s):
    if s <= 0:
        raise ValueError(f"scale must be positive, got {s} (a zero scale divides by zero: floor it with eps)")


def _broadcastable(param, shape, name):
    """``param`` with ``len(shape)`` dims (ones prepended), checked to broadcast to ``shape`` without growing it."""
    param_shape = _shape(param)
    if len(param_shape) > len(shape):
        raise ValueError(f"{name} of shape {param_shape} has more dimensions than x of shape {shape}")
    padded = (1,) * (len(shape) - len(param_shape)) + param_shape
    if any(p not in (1, s) for p, s in zip(padded, shape, strict=True)):
        raise ValueError(f"{name} of shape {param_shape} does not broadcast against x of shape {shape}")
    return param.reshape(padded)


def _float_params(x, scale, zero_point):
    """``scale``, ``1 / scale`` and ``zero_point`` in ``x``'s kind, dtype and rank, checked."""
    if _is_tensor(x):
        torch = _torch()
        scale = torch.as_tensor(float(scale) if isinstance(scale, (Fraction, Decimal, str)) else scale,
                                device=x.device).to(x.dtype)
        zero_point = torch.as_tensor(zero_point, device=x.device)
        if zero_point.is_floating_point() and not bool((zero_point == torch.round(zero_point)).all()):
            raise ValueError("zero_point must hold integers")
        if zero_point.dtype == torch.bool or zero_point.is_complex():
            raise TypeError(f"zero_point must hold integers, got {zero_point.dtype}")
        zero_point = zero_point.to(x.dtype)
        if not (bool(torch.isfinite(scale).all()) and bool((scale > 0).all())):
            raise ValueError("scale must be positive and finite (a zero scale divides by zero: floor it with eps)")
        inv_scale = 1.0 / scale
        if not bool(torch.isfinite(inv_scale).all()):
            raise ValueError(f"scale is too small: 1 / scale overflows {x.dtype}")
    else:
        scale = np.asarray(_float_scalar(scale, "scale") if isinstance(scale, (Fraction, Decimal, str)) else scale)
        if scale.dtype.kind not in "fiu":
            raise TypeError(f"scale must hold real numbers, got dtype {scale.dtype}")
        zero_point = np.asarray(zero_point)
        if zero_point.dtype.kind not in "fiu":
            raise TypeError(f"zero_point must hold integers, got dtype {zero_point.dtype}")
        if zero_point.dtype.kind == "f" and not bool((zero_point == np.rint(zero_point)).all()):
            raise ValueError("zero_point must hold integers")
        scale = scale.astype(x.dtype, copy=False)
        zero_point = zero_point.astype(x.dtype)
        if not (bool(np.isfinite(scale).all()) and bool((scale > 0).all())):
            raise ValueError("scale must be positive and finite (a zero scale divides by zero: floor it with eps)")
        with np.errstate(over="ignore"):
            inv_scale = np.divide(1, scale, dtype=x.dtype)
        if not bool(np.isfinite(inv_scale).all()):
            raise ValueError(f"scale is too small: 1 / scale overflows {x.dtype}")
    shape = tuple(x.shape)
    return (_broadcastable(scale, shape, "scale"), _broadcastable(inv_scale, shape, "scale"),
            _broadcastable(zero_point, shape, "zero_point"))


def _round_inplace(v, rounding, scratch=None):
    """Round ``v`` in place (numpy array or tensor); ``scratch`` is a buffer shaped like ``v``."""
    if _is_tensor(v):
        if rounding is Rounding.HALF_EVEN:
            return v.round_()
        down = _torch().floor(v)
        v.sub_(down).ge_(0.5)          # v is now 1.0 where frac(v) >= 1/2, else 0.0
        return v.add_(down)
    if rounding is Rounding.HALF_EVEN:
        return np.rint(v, out=v)
    down = np.floor(v, out=scratch)
    np.subtract(v, down, out=v)
    np.greater_equal(v, 0.5, out=v, casting="unsafe")
    return np.add(v, down, out=v)


def _rows(param, rows):
    return param if param.shape[0] == 1 else param[rows]


def _block_rows(x):
    row_elements = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim > 1 else 1
    return max(1, _BLOCK_ELEMENTS // max(row_elements, 1))


def _check_finite_block(block):
    if not np.isfinite(block).all():
        raise ValueError("x must be finite: it holds NaN or inf")


def _affine_numpy(x, scale, inv_scale, zero_point, qmin, qmax, rounding, out):
    """Fill ``out`` with codes (integer ``out``) or snapped values (float ``out``), block by block."""
    if x.ndim == 0 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    fake = out.dtype == x.dtype
    step = _block_rows(x) if x.ndim else 1
    x_blocks = x.reshape((1,) + x.shape) if x.ndim == 0 else x
    out_blocks = out.reshape((1,) + out.shape) if out.ndim == 0 else out
    params = [p.reshape((1,) + p.shape) if p.ndim == 0 else p for p in (scale, inv_scale, zero_point)]
    scale, inv_scale, zero_point = params
    # clip(round(x/s) + z, qmin, qmax) - z == clip(round(x/s), qmin - z, qmax - z): integers, so exact
    low, high = qmin - zero_point, qmax - zero_point
    buffer = np.empty((min(step, x_blocks.shape[0]),) + x_blocks.shape[1:], dtype=x.dtype)
    scratch = np.empty_like(buffer) if rounding is Rounding.HALF_UP else None
    for start in range(0, x_blocks.shape[0], step):
        rows = slice(start, start + step)
        xb = x_blocks[rows]
        v = out_blocks[rows] if fake else buffer[:len(xb)]
        np.multiply(xb, _rows(inv_scale, rows), out=v)
        _check_finite_block(xb)
        _round_inplace(v, rounding, None if scratch is None else scratch[:len(xb)])
        np.clip(v, _rows(low, rows), _rows(high, rows), out=v)
        if fake:
            v *= _rows(scale, rows)
        else:
            v += _rows(zero_point, rows)
            out_blocks[rows] = v
    return out


def _empty_like(x, dtype=None):
    """An empty tensor like ``x``.  On the CPU it is backed by numpy, whose large allocations ask
    the kernel for huge pages: first-touch page faults then cost a fraction of torch's own."""
    torch = _torch()
    dtype = x.dtype if dtype is None else dtype
    if x.device.type == "cpu":
        try:
            np_dtype = torch.empty((), dtype=dtype).numpy().dtype
            return torch.from_numpy(np.empty(tuple(x.shape), dtype=np_dtype))
        except (TypeError, RuntimeError):
            pass
    return torch.empty(x.shape, dtype=dtype, device=x.device)


def _affine_torch(x, scale, inv_scale, zero_point, qmin, qmax, rounding, fake):
    torch = _torch()
    low, high = torch.aminmax(x) if x.numel() else (torch.zeros(()), torch.zeros(()))
    if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
        raise ValueError("x must be finite: it holds NaN or inf")
    v = _empty_like(x)
    torch.mul(x, inv_scale, out=v)
    _round_inplace(v, rounding)
    torch.maximum(v, qmin - zero_point, out=v)
    torch.minimum(v, qmax - zero_point, out=v)
    if fake:
        return v.mul_(scale)
    return v.add_(zero_point).to(_code_dtype(qmin, qmax, torch_backend=True))


def _numpy_view(value):
    """A CPU tensor's memory as a numpy array (no copy); None for other devices and dtypes numpy lacks.

    Tensors on the CPU run the numpy kernels on their own memory: the same IEEE operations as
    torch's, so the same bits, without the cost of torch's intra-op thread pool on small tensors.
    """
    torch = _torch()
    if not _is_tensor(value) or value.device.type != "cpu" or value.dtype in (torch.bfloat16, torch.bool) \
            or value.is_complex() or value.is_quantized:
        return None
    try:
        return value.detach().resolve_conj().numpy()
    except (TypeError, RuntimeError):
        return None


def _to_tensor(array, like):
    torch = _torch()
    if array.dtype == np.uint16:  # torch's uint16 supports few operations
        array = array.astype(np.int32)
    return torch.from_numpy(np.asarray(array, order="C")).to(like.device)


def _as_numpy_params(*params):
    """Tensor parameters as numpy arrays when all of them live on the CPU, else None."""
    converted = []
    for param in params:
        if _is_tensor(param):
            view = _numpy_view(param)
            if view is None:
                return None
            converted.append(view)
        else:
            converted.append(param)
    return converted


def _affine(x, scale, zero_point, qmin, qmax, rounding, fake):
    """The float and torch paths of quantize (``fake=False``: codes) and fake-quantize (``fake=True``)."""
    python_scalar = np.ndim(x) == 0 and not isinstance(x, np.ndarray) and not _is_tensor(x)
    x = _as_float_array(x, "x")
    if _is_tensor(x):
        x_view, params = _numpy_view(x), _as_numpy_params(scale, zero_point)
        if x_view is None or params is None:
            scale, inv_scale, zero_point = _float_params(x, scale, zero_point)
            if zero_point.numel():
                _check_zero_point_range(float(zero_point.min()), float(zero_point.max()), qmin, qmax)
            return _affine_torch(x, scale, inv_scale, zero_point, qmin, qmax, rounding, fake)
        return _to_tensor(_affine(x_view, *params, qmin, qmax, rounding, fake), like=x)
    scale, inv_scale, zero_point = _float_params(x, scale, zero_point)
    if zero_point.size:
        _check_zero_point_range(zero_point.min(), zero_point.max(), qmin, qmax)
    out = np.empty(x.shape, dtype=x.dtype if fake else _code_dtype(qmin, qmax))
    _affine_numpy(x, scale, inv_scale, zero_point, qmin, qmax, rounding, out)
    if python_scalar:
        return float(out) if fake else int(out)
    return out


def quantize_affine(x, scale, zero_point, qmin: int, qmax: int, rounding: Rounding | str = Rounding.HALF_UP):
    """Integer codes ``q = clip(round(x / s) + z, qmin, qmax)``; ``scale``/``zero_point`` broadcast against ``x``.

    Saturates, never wraps.  ``zero_point`` is a code and must lie in ``[qmin, qmax]`` (ValueError
    otherwise, as in PyTorch's fake-quantize).  Exact scalars and floats give an ``int``; numpy arrays and torch
    tensors give the smallest integer dtype that holds ``[qmin, qmax]``.  The float paths compute
    ``round(x * (1 / s))``, PyTorch's arithmetic (see the module docstring for what that does at ties).
    """
    qmin, qmax = _check_qrange(qmin, qmax)
    rounding = _check_enum(rounding, Rounding, "rounding")
    if _is_exact(x) and _is_exact(scale):
        r, s = _to_fraction(x, "x"), _to_fraction(scale, "scale")
        z = _check_zero_point_scalar(zero_point)
        _check_zero_point_range(z, z, qmin, qmax)
        _check_positive_scale_scalar(s)
        return min(max(_rounder(rounding)(r / s) + z, qmin), qmax)
    return _affine(x, scale, zero_point, qmin, qmax, rounding, fake=False)


def fake_quantize_affine(x, scale, zero_point, qmin: int, qmax: int, rounding: Rounding | str = Rounding.HALF_UP):
    """``dequantize(quantize(x))`` in one pass, in ``x``'s float dtype: ``s * (clip(round(x/s) + z) - z)``.

    Bit for bit what ``torch.fake_quantize_per_tensor_affine`` / ``..._per_channel_affine`` return
    for float32 input with ``Rounding.HALF_EVEN`` and the same scale and zero point.
    """
    qmin, qmax = _check_qrange(qmin, qmax)
    rounding = _check_enum(rounding, Rounding, "rounding")
    if _is_exact(x) and _is_exact(scale):
        q = quantize_affine(x, scale, zero_point, qmin, qmax, rounding)
        return dequantize_affine(q, scale, zero_point)
    return _affine(x, scale, zero_point, qmin, qmax, rounding, fake=True)


def dequantize_affine(codes, scale, zero_point, *, dtype=None):
    """Real values ``r_hat = s * (q - z)``, broadcasting ``scale``/``zero_point`` against ``codes``.

    Exact scalars give a ``Fraction``.  Arrays give ``dtype`` if named, else the dtype of a floating
    ``scale`` array (float64 for a Python float); tensors likewise (torch's default dtype otherwise).
    """
    if isinstance(codes, numbers.Integral) and not isinstance(codes, (bool, np.bool_)) and _is_exact(scale):
        s = _to_fraction(scale, "scale")
        _check_positive_scale_scalar(s)
        return s * (int(codes) - _check_zero_point_scalar(zero_point))
    if _is_tensor(codes):
        torch = _torch()
        if not _is_integer_array(codes):
            raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
        if dtype is None:
            dtype = scale.dtype if _is_tensor(scale) and scale.is_floating_point() else torch.get_default_dtype()
        codes_view, params = _numpy_view(codes), _as_numpy_params(scale, zero_point)
        np_dtype = _numpy_view(torch.empty(0, dtype=dtype))
        if codes_view is not None and params is not None and np_dtype is not None:
            return _to_tensor(dequantize_affine(codes_view, *params, dtype=np_dtype.dtype), like=codes)
        template = _empty_like(codes, dtype)
        scale, _, zero_point = _float_params(template, scale, zero_point)
        return template.copy_(codes).sub_(zero_point).mul_(scale)
    python_scalar = np.ndim(codes) == 0 and not isinstance(codes, np.ndarray)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
    if dtype is None:
        scale_dtype = np.asarray(scale).dtype if not isinstance(scale, (Fraction, Decimal, str)) else None
        dtype = scale_dtype if scale_dtype is not None and scale_dtype.kind == "f" else np.float64
    out = np.empty(codes.shape, dtype=dtype)
    scale, _, zero_point = _float_params(out, scale, zero_point)
    out_blocks = out.reshape((1,) + out.shape) if out.ndim == 0 else out
    code_blocks = codes.reshape((1,) + codes.shape) if codes.ndim == 0 else codes
    scale, zero_point = (p.reshape((1,) + p.shape) if p.ndim == 0 else p for p in (scale, zero_point))
    step = _block_rows(out_blocks)
    for start in range(0, out_blocks.shape[0], step):
        rows = slice(start, start + step)
        v = out_blocks[rows]
        v[...] = code_blocks[rows]
        v -= _rows(zero_point, rows)
        v *= _rows(scale, rows)
    return float(out) if python_scalar else out


# --------------------------------------------------------------------------- whole tensors


@dataclass(frozen=True, eq=False)
class QParams:
    """The grid of one quantized tensor: scale and zero point, and how they map onto it.

    - per tensor (``axis is None``, ``group_size is None``): scalar ``scale``, ``zero_point``;
    - per channel (``axis`` set, ``group_size is None``): one pair per index along ``axis``
      (PyTorch's ``ch_axis``), shape ``(x.shape[axis],)``;
    - group-wise (``group_size`` set): ``axis`` is cut into groups of ``group_size`` consecutive
      elements; the parameters have ``x``'s shape with ``x.shape[axis]`` replaced by the number of
      groups.  For a weight ``W`` of shape ``(out_features, in_features)`` and ``axis=-1``:
      ``(out_features, in_features // group_size)``.
    """

    scale: Any
    zero_point: Any
    bits: int
    mapping: Mapping = Mapping.ASYMMETRIC
    axis: int | None = None
    group_size: int | None = None

    @property
    def qmin(self) -> int:
        return qrange(self.bits, self.mapping)[0]

    @property
    def qmax(self) -> int:
        return qrange(self.bits, self.mapping)[1]

    @property
    def granularity(self) -> str:
        if self.group_size is not None:
            return "group"
        return "tensor" if self.axis is None else "channel"


def _normalize_axis(axis, ndim, name="axis"):
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{name} must be an int or None, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name} must be in {-ndim}..{ndim - 1} for a {ndim}-d tensor, got {axis}")
    return int(axis) % ndim


def _check_group_size(group_size, length, axis):
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise TypeError(f"group_size must be a positive int or None, got {type(group_size).__name__}")
    if group_size <= 0:
        raise ValueError(f"group_size must be positive, got {group_size}")
    if length % group_size:
        raise ValueError(f"group_size {group_size} must divide the length {length} of axis {axis} "
                         f"(pad the tensor or pick a divisor; a ragged last group is not supported)")
    return int(group_size)


def _grouped_shape(shape, axis, group_size):
    return shape[:axis] + (shape[axis] // group_size, group_size) + shape[axis + 1:]


def _reduce_min_max(x, dims):
    if _is_tensor(x):
        if len(dims) == x.ndim:
            return x.amin(), x.amax()
        return x.amin(dim=dims), x.amax(dim=dims)
    return x.min(axis=dims), x.max(axis=dims)


def choose_qparams(x, bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC, *, axis: int | None = None,
                   group_size: int | None = None, eps=DEFAULT_EPS, rounding: Rounding | str = Rounding.HALF_UP,
                   include_zero: bool = False, exact_constant: bool = True) -> QParams:
    """Observe ``x``'s range and choose its :class:`QParams` (per tensor, per channel or group-wise).

    ``axis`` alone: per channel, one (scale, zero point) per index along ``axis``.
    ``group_size`` (``axis`` defaults to -1): groups of ``group_size`` consecutive elements along ``axis``.
    The other keywords are those of :func:`choose_qparams_affine`.
    """
    mapping = _check_enum(mapping, Mapping, "mapping")
    x = _as_float_array(x, "x")
    x_view = _numpy_view(x) if _is_tensor(x) else None
    if x_view is not None:
        found = choose_qparams(x_view, bits, mapping, axis=axis, group_size=group_size, eps=eps, rounding=rounding,
                               include_zero=include_zero, exact_constant=exact_constant)
        scale = _to_tensor(np.asarray(found.scale), like=x)
        zero_point = _to_tensor(np.asarray(found.zero_point), like=x)
        return QParams(scale, zero_point, found.bits, found.mapping, found.axis, found.group_size)
    if x.ndim == 0 and (axis is not None or group_size is not None):
        raise ValueError("axis and group_size need a tensor with at least one dimension")
    if _size(x) == 0:
        raise ValueError("x is empty: there is no range to observe")
    if group_size is not None:
        axis = _normalize_axis(-1 if axis is None else axis, x.ndim)
        group_size = _check_group_size(group_size, x.shape[axis], axis)
        grouped = x.reshape(_grouped_shape(tuple(x.shape), axis, group_size))
        lo, hi = _reduce_min_max(grouped, (axis + 1,))
    elif axis is not None:
        axis = _normalize_axis(axis, x.ndim)
        lo, hi = _reduce_min_max(x, tuple(d for d in range(x.ndim) if d != axis))
    else:
        lo, hi = _reduce_min_max(x, tuple(range(x.ndim)))
    if not (_all_finite(lo) and _all_finite(hi)):
        raise ValueError("x must be finite: it holds NaN or inf")
    scale, zero_point = choose_qparams_affine(lo, hi, bits, mapping, eps=eps, rounding=rounding,
                                              include_zero=include_zero, exact_constant=exact_constant)
    return QParams(scale, zero_point, int(bits), mapping, axis, group_size)


def weight_qparams(weight, bits: int, group_size: int | str | None = None,
                   mapping: Mapping | str = Mapping.ASYMMETRIC) -> QParams:
    """The grid of a weight matrix ``W`` (out x in) as weight-only quantizers (RTN, GPTQ, AWQ) choose it.

    - ``group_size`` an int: groups of ``group_size`` consecutive input features (``axis=-1``);
    - ``None`` or ``"channel"``: one grid per output row (``axis=0``);
    - ``"tensor"``: one grid for the whole matrix.

    Always ``include_zero=True``, as GPTQ's reference quantizer does (``xmin = min(x.min(), 0)``,
    ``xmax = max(x.max(), 0)``): the zero point then lies inside the code range and every weight
    is within ``s / 2`` of its grid.  Without it a group whose weights are all positive (or all
    negative) clips its zero point and saturates the weights at the far end of its range.
    """
    if group_size is None or group_size == "channel":
        return choose_qparams(weight, bits, mapping, axis=0, include_zero=True)
    if group_size == "tensor":
        return choose_qparams(weight, bits, mapping, include_zero=True)
    if isinstance(group_size, str):
        raise ValueError(f"group_size must be a positive int, None, 'channel' or 'tensor', got {group_size!r}")
    return choose_qparams(weight, bits, mapping, axis=-1, group_size=group_size, include_zero=True)


def _params_view(x, qparams: QParams):
    """``x`` reshaped and ``scale``/``zero_point`` reshaped so that they broadcast, checked against each other."""
    shape = tuple(x.shape)
    scale, zero_point = qparams.scale, qparams.zero_point
    if qparams.group_size is None and qparams.axis is None:
        if _shape(scale) != () or _shape(zero_point) != ():
            raise ValueError("per-tensor qparams must hold one scale and one zero point")
        return x, scale, zero_point
    if qparams.group_size is not None:
        axis = _normalize_axis(qparams.axis, len(shape), "qparams.axis")
        group_size = _check_group_size(qparams.group_size, shape[axis], axis)
        grouped = _grouped_shape(shape, axis, group_size)
        expected = shape[:axis] + (shape[axis] // group_size,) + shape[axis + 1:]
        broadcast = expected[:axis + 1] + (1,) + expected[axis + 1:]
        x = x.reshape(grouped)
    else:
        axis = _normalize_axis(qparams.axis, len(shape), "qparams.axis")
        expected = (shape[axis],)
        broadcast = (shape[axis],) + (1,) * (len(shape) - axis - 1)
    if _shape(scale) != expected or _shape(zero_point) != expected:
        raise ValueError(f"qparams hold scale of shape {_shape(scale)} and zero_point of shape "
                         f"{_shape(zero_point)}; a tensor of shape {shape} needs {expected}")
    return x, scale.reshape(broadcast), zero_point.reshape(broadcast)


def quantize(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """Integer codes of ``x`` on the grid ``qparams`` (same shape as ``x``)."""
    if not isinstance(qparams, QParams):
        raise TypeError(f"qparams must be a QParams, got {type(qparams).__name__}")
    x = _as_float_array(x, "x")
    view, scale, zero_point = _params_view(x, qparams)
    codes = quantize_affine(view, scale, zero_point, qparams.qmin, qparams.qmax, rounding)
    return codes.reshape(x.shape)


def dequantize(codes, qparams: QParams, *, dtype=None):
    """Real values ``s * (q - z)`` of ``codes`` on the grid ``qparams``."""
    if not isinstance(qparams, QParams):
        raise TypeError(f"qparams must be a QParams, got {type(qparams).__name__}")
    if not _is_tensor(codes):
        codes = np.asarray(codes)
    if _size(codes) and _is_integer_array(codes):
        low, high = int(codes.min()), int(codes.max())
        if low < qparams.qmin or high > qparams.qmax:
            raise ValueError(f"codes must lie in [{qparams.qmin}, {qparams.qmax}] for {qparams.bits} bits "
                             f"{qparams.mapping.name}, got values in [{low}, {high}]")
    view, scale, zero_point = _params_view(codes, qparams)
    return dequantize_affine(view, scale, zero_point, dtype=dtype).reshape(codes.shape)


def fake_quantize(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """``dequantize(quantize(x))``: ``x`` snapped to its grid, in ``x``'s float dtype."""
    if not isinstance(qparams, QParams):
        raise TypeError(f"qparams must be a QParams, got {type(qparams).__name__}")
    x = _as_float_array(x, "x")
    view, scale, zero_point = _params_view(x, qparams)
    out = fake_quantize_affine(view, scale, zero_point, qparams.qmin, qparams.qmax, rounding)
    return out.reshape(x.shape)


def quantization_error(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """The measured error ``|x - fake_quantize(x)|``, elementwise."""
    x = _as_float_array(x, "x")
    return abs(x - fake_quantize(x, qparams, rounding))


def relative_error(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP) -> float:
    """``||x - fake_quantize(x)|| / ||x||`` (Frobenius norm): the share of the tensor rounding loses."""
    x = _as_float_array(x, "x")
    error = x - fake_quantize(x, qparams, rounding)
    if _is_tensor(x):
        torch = _torch()
        norm = torch.linalg.matrix_norm if x.ndim == 2 else torch.linalg.vector_norm
        return float(norm(error) / norm(x))
    return float(np.linalg.norm(np.asarray(error, dtype=np.float64)) / np.linalg.norm(np.asarray(x, dtype=np.float64)))


def error_bound(scale):
    """The worst rounding error of a value inside the grid's range: half a step, ``s / 2``.

    Values beyond the range saturate, and their error is unbounded (an outlier at ``r_max + 0.5``
    is off by 0.5 whatever ``s`` is).
    """
    if _is_exact(scale):
        s = _to_fraction(scale, "scale")
        _check_positive_scale_scalar(s)
        return s / 2
    if isinstance(scale, (bool, np.bool_)):
        raise TypeError("scale must be a number or an array, got a bool")
    values = _as_float_array(scale, "scale")
    if not (_all_finite(values) and bool((values > 0).all())):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    return scale / 2


# --------------------------------------------------------------------------- INT4 packing

_ORDERS = ("low_first", "high_first")


def _check_order(order):
    if order not in _ORDERS:
        raise ValueError(f"order must be one of {', '.join(_ORDERS)}, got {order!r}")


def pack_int4(codes, *, order: str = "low_first"):
    """Two 4-bit codes (0..15) per byte, along the last axis; an odd length is padded with a 0 code.

    ``order="low_first"``: element ``2i`` in the low nibble (bits 0-3), ``2i+1`` in the high one,
    the ONNX INT4/UINT4 layout and GPTQ's within-word order.  ``order="high_first"``: element ``2i``
    in the high nibble, as torchao's uint4 and bitsandbytes' 4-bit packing do.  Signed codes must
    be offset into 0..15 first (``q + 8``).  Returns ``uint8`` (numpy) or ``torch.uint8``.
    """
    _check_order(order)
    torch_backend = _is_tensor(codes)
    if not torch_backend:
        codes = np.asarray(codes)
        if codes.dtype.kind not in "iu":
            raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
    elif codes.is_floating_point() or codes.dtype == _torch().bool or codes.is_complex():
        raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError("codes must have at least one dimension")
    n_elements = codes.numel() if torch_backend else codes.size
    if n_elements and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise ValueError(f"INT4 codes must lie in 0..15, got values in [{int(codes.min())}, {int(codes.max())}]")
    if codes.shape[-1] % 2:
        pad_shape = tuple(codes.shape[:-1]) + (1,)
        if torch_backend:
            torch = _torch()
            codes = torch.cat([codes, torch.zeros(pad_shape, dtype=codes.dtype, device=codes.device)], dim=-1)
        else:
            codes = np.concatenate([codes, np.zeros(pad_shape, dtype=codes.dtype)], axis=-1)
    if torch_backend:
        codes = codes.to(_torch().uint8)
    else:
        codes = codes.astype(np.uint8)
    first, second = codes[..., 0::2], codes[..., 1::2]
    if order == "low_first":
        return first | (second << 4)
    return (first << 4) | second


def unpack_int4(packed, n: int, *, order: str = "low_first"):
    """The inverse of :func:`pack_int4`: ``n`` codes (0..15) along the last axis, as ``uint8``."""
    _check_order(order)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    torch_backend = _is_tensor(packed)
    if torch_backend:
        torch = _torch()
        if packed.dtype != torch.uint8:
            raise TypeError(f"packed must be a torch.uint8 tensor, got {packed.dtype}")
    else:
        packed = np.asarray(packed)
        if packed.dtype != np.uint8:
            raise TypeError(f"packed must be a uint8 array, got dtype {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension")
    if not 2 * packed.shape[-1] - 1 <= n <= 2 * packed.shape[-1] or (n == 0 and packed.shape[-1] != 0):
        raise ValueError(f"n must be {2 * packed.shape[-1] - 1} or {2 * packed.shape[-1]} for "
                         f"{packed.shape[-1]} bytes per row, got {n}")
    low, high = packed & 0x0F, packed >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    if torch_backend:
        both = torch.stack([first, second], dim=-1)
    else:
        both = np.stack([first, second], axis=-1)
    return both.reshape(tuple(packed.shape[:-1]) + (2 * packed.shape[-1],))[..., :n]
