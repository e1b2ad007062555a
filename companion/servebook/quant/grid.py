"""The integer grid: which codes ``b`` bits hold, how real values are rounded onto them, how a range maps.

- :class:`Mapping`: affine (``ASYMMETRIC``, codes ``0 .. 2^b - 1`` and a zero point) or
  ``SYMMETRIC`` (codes ``-(2^(b-1) - 1) .. 2^(b-1) - 1``, zero point 0);
- :func:`qrange`: the smallest and largest code;
- :class:`Rounding`: what happens at a tie, always named (half up, the book's convention, or
  half even, PyTorch's);
- :func:`round_half_up`, :func:`round_half_even`: the two roundings, on every kind of number.
"""

from __future__ import annotations

import enum
import math
from fractions import Fraction

import numpy as np

from ..checks import member, whole
from ._kinds import is_tensor, torch_module

__all__ = ["DEFAULT_EPS", "MIN_BITS", "MAX_BITS", "Mapping", "Rounding", "qrange", "round_half_up",
           "round_half_even", "rounding_function"]

# The floor on the scale.  PyTorch's observers default to float32's machine
# epsilon, torch.finfo(torch.float32).eps == 2**-23; the often-quoted 2**-12 is not a default.
DEFAULT_EPS = 2.0**-23

MIN_BITS, MAX_BITS = 1, 16

# Codes are stored in at most 64 bits, so a code range (and a zero point) lies inside int64's.
CODE_LIMITS = (-(2**63), 2**63 - 1)


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


def check_bits(bits, mapping: Mapping) -> int:
    """``bits`` as an int in the range ``mapping`` allows."""
    low = 2 if mapping is Mapping.SYMMETRIC else MIN_BITS
    try:
        return whole("bits", bits, low, MAX_BITS)
    except ValueError:
        why = " (a symmetric grid needs a sign and a magnitude bit)" if mapping is Mapping.SYMMETRIC else ""
        raise ValueError(f"bits must be in {low}..{MAX_BITS} for {mapping.name}{why}, got {bits}") from None


def qrange(bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC) -> tuple[int, int]:
    """The smallest and largest integer code: ``(0, 2^b - 1)`` or ``(-(2^(b-1) - 1), 2^(b-1) - 1)``."""
    mapping = member("mapping", mapping, Mapping)
    bits = check_bits(bits, mapping)
    if mapping is Mapping.ASYMMETRIC:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1


def check_range(finite: bool, ordered: bool) -> None:
    """The observed range ``[min_val, max_val]`` is a range: finite, and ``min_val <= max_val``."""
    if not finite:
        raise ValueError("min_val and max_val must be finite (no NaN or inf in the data)")
    if not ordered:
        raise ValueError("min_val must be <= max_val (r_min > r_max is not a range)")


def check_zero_point_range(low, high, qmin, qmax) -> None:
    """A zero point is a code: outside ``[qmin, qmax]`` it would shift every value onto a clipped grid."""
    if low < qmin or high > qmax:
        found = f"{int(low)}" if low == high else f"values in [{int(low)}, {int(high)}]"
        raise ValueError(f"zero_point must lie in [{qmin}, {qmax}] (the code range), got {found}")


def round_half_up(v):
    """Round to the nearest integer, ties to the larger one: ``floor(v) + (frac(v) >= 1/2)``.

    Unlike ``floor(v + 0.5)`` this is right for every float (``floor(0.49999999999999994 + 0.5)`` is 1).
    Works on Fractions (exactly), floats, numpy arrays and torch tensors; returns floats for arrays.
    """
    if isinstance(v, Fraction):
        return math.floor(v + Fraction(1, 2))
    if is_tensor(v):
        down = torch_module().floor(v)
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
    if is_tensor(v):
        return torch_module().round(v)
    if type(v) is float:
        return round(v)
    return np.rint(v)


def rounding_function(rounding: Rounding | str):
    """:func:`round_half_up` or :func:`round_half_even`, by name (``"half_up"``) or member."""
    rounding = member("rounding", rounding, Rounding)
    return round_half_up if rounding is Rounding.HALF_UP else round_half_even
