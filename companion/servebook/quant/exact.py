"""The exact path: scalars as ``Fraction``, so that a hand calculation's ties are real ties.

Every number is a ``Fraction``, ``Decimal``, ``int`` or decimal string (``"0.35"``, ``"1/10"``),
and the arithmetic is :class:`fractions.Fraction`'s: 0.35 / 0.1 is 7/2 and rounds half up to 4,
as by hand (float64 says 3.4999999999999996).  Scales and dequantized values come back as
``Fraction``, codes and zero points as ``int``.  A float given here (``eps``, say) is taken at
its exact binary value.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction

import numpy as np

from ..checks import positive, whole
from .grid import CODE_LIMITS, Mapping, check_range, check_zero_point_range, rounding_function

__all__ = ["to_fraction"]

EXACT_TYPES = (Fraction, Decimal, str, numbers.Integral)


def is_exact(x) -> bool:
    """Whether ``x`` is a number of the exact path (a bool is not a number)."""
    return isinstance(x, EXACT_TYPES) and not isinstance(x, (bool, np.bool_))


def to_fraction(value, name: str = "value") -> Fraction:
    """An exact number (``Fraction``, ``Decimal``, ``int``, ``"0.35"``, ``"1/10"``, or a float at its
    exact binary value) as a ``Fraction``: ``to_fraction("0.35") == Fraction(7, 20)``."""
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


def positive_scale(scale) -> Fraction:
    """``scale`` as a Fraction; a scale that is not positive has no grid."""
    s = to_fraction(scale, "scale")
    if s <= 0:
        raise ValueError(f"scale must be positive, got {s} (a zero scale divides by zero: floor it with eps)")
    return s


def zero_point_code(zero_point) -> int:
    """A zero point as the int code it is (a Fraction with denominator 1 is one)."""
    if isinstance(zero_point, Fraction) and zero_point.denominator == 1:
        zero_point = zero_point.numerator
    return whole("zero_point", zero_point, *CODE_LIMITS)


def choose(lo: Fraction, hi: Fraction, qmin: int, qmax: int, mapping: Mapping, eps: Fraction, rounding,
           include_zero: bool, exact_constant: bool) -> tuple[Fraction, int]:
    """:func:`~servebook.quant.choose_qparams_affine` on exact scalars."""
    check_range(finite=True, ordered=lo <= hi)
    positive("eps", eps)
    if include_zero:
        lo, hi = min(lo, 0), max(hi, 0)
    if exact_constant and lo == hi:
        return _constant_qparams(lo, qmin, mapping)
    if mapping is Mapping.SYMMETRIC:
        return max(max(-lo, hi) / qmax, eps), 0
    scale = max((hi - lo) / (qmax - qmin), eps)
    return scale, min(max(qmin + rounding_function(rounding)(-lo / scale), qmin), qmax)


def _constant_qparams(c, qmin, mapping):
    """A flat range stored exactly: ``c = s * (q - z)`` with ``q - z = sign(c)``."""
    if c == 0:
        return type(c)(1), 0
    if mapping is Mapping.SYMMETRIC or c > 0:
        return abs(c), 0 if mapping is Mapping.SYMMETRIC else qmin
    return -c, qmin + 1


def quantize(x, scale, zero_point, qmin: int, qmax: int, rounding) -> int:
    """``q = clip(round(r / s) + z, qmin, qmax)`` in exact arithmetic."""
    r, s = to_fraction(x, "x"), to_fraction(scale, "scale")
    z = zero_point_code(zero_point)
    check_zero_point_range(z, z, qmin, qmax)
    return min(max(rounding_function(rounding)(r / positive_scale(s)) + z, qmin), qmax)


def dequantize(codes: int, scale, zero_point) -> Fraction:
    """``r_hat = s * (q - z)`` in exact arithmetic."""
    return positive_scale(scale) * (int(codes) - zero_point_code(zero_point))
