"""What floating point does at a tie: the code each arithmetic gives a value, next to the exact one.

A decimal tie (0.35 / 0.1 is 3.5 exactly) need not be a tie in binary: float64
division gives 3.4999999999999996.  These functions compute, for one value on
one grid, the code of exact arithmetic, of float64 division, of float64
multiplication by the reciprocal (PyTorch's arithmetic) and of float32, so the
tie figure, the quantization explorer and chapter 05's counts agree.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import quant
from ..quant import Mapping, Rounding

ROUNDINGS = (Rounding.HALF_UP, Rounding.HALF_EVEN)


def float64_grid(r_min, r_max, bits: int = 4, mapping: Mapping | str = Mapping.ASYMMETRIC,
                 rounding: Rounding | str = Rounding.HALF_UP) -> tuple[float, int]:
    """Scale and zero point as a float64 program computes them from the range's nearest floats."""
    return quant.choose_qparams_affine(float(quant.to_fraction(r_min)), float(quant.to_fraction(r_max)), bits,
                                       mapping, rounding=rounding)


def division_code(r: float, scale: float, zero_point: int, qmin: int, qmax: int,
                  rounding: Rounding | str = Rounding.HALF_UP) -> int:
    """``clip(round(r / s) + z)`` in float64: the textbook formula, which divides where PyTorch multiplies."""
    return min(max(int(quant.rounding_function(rounding)(r / scale)) + zero_point, qmin), qmax)


def float64_codes(r, r_min, r_max, bits: int = 4, rounding: Rounding | str = Rounding.HALF_UP,
                  mapping: Mapping | str = Mapping.ASYMMETRIC) -> tuple[int, int]:
    """The codes float64 gives ``r`` on the grid of ``[r_min, r_max]``: by ``r * (1/s)``, and by ``r / s``."""
    scale, zero_point = float64_grid(r_min, r_max, bits, mapping, rounding)
    qmin, qmax = quant.qrange(bits, mapping)
    r64 = float(quant.to_fraction(r))
    return (quant.quantize_affine(r64, scale, zero_point, qmin, qmax, rounding),
            division_code(r64, scale, zero_point, qmin, qmax, rounding))


def tie_outcomes(r: str, r_min: str, r_max: str, bits: int = 4) -> dict[str, tuple[str, list[int]]]:
    """Arithmetic -> (its quotient ``r / s`` as printed, its codes half-up and half-even): the tie table's rows."""
    scale, zero_point = quant.choose_qparams_affine(r_min, r_max, bits)
    qmin, qmax = quant.qrange(bits)
    s64, z64 = float64_grid(r_min, r_max, bits)
    r64 = float(Fraction(r))
    s32, r32 = np.float32(s64), np.float32(r64)
    codes = {
        "exact (Fraction)": lambda rnd: quant.quantize_affine(r, scale, zero_point, qmin, qmax, rnd),
        "float64, r / s": lambda rnd: division_code(r64, s64, z64, qmin, qmax, rnd),
        "float64, r * (1/s)": lambda rnd: quant.quantize_affine(r64, s64, z64, qmin, qmax, rnd),
        "float32, r * (1/s)": lambda rnd: int(quant.quantize_affine(np.array([r32]), s32, z64, qmin, qmax,
                                                                     rnd)[0]),
    }
    quotients = {
        "exact (Fraction)": str(Fraction(r) / scale),
        "float64, r / s": repr(r64 / s64),
        "float64, r * (1/s)": repr(r64 * (1 / s64)),
        "float32, r * (1/s)": repr(float(r32 * (np.float32(1) / s32))),
    }
    return {name: (quotients[name], [code(rnd) for rnd in ROUNDINGS]) for name, code in codes.items()}


def missed_ties(r_min, r_max, bits: int = 4) -> dict[str, int]:
    """How many of the grid's decimal midpoints (one per gap) each float64 arithmetic codes differently from exact."""
    scale, zero_point = quant.choose_qparams_affine(r_min, r_max, bits)
    qmin, qmax = quant.qrange(bits)
    missed = {"float64 r / s": 0, "float64 r * (1/s)": 0}
    for k in range(qmax - qmin):
        r = quant.to_fraction(r_min) + scale * k + scale / 2  # halfway between codes k and k + 1
        exact = quant.quantize_affine(r, scale, zero_point, qmin, qmax)
        reciprocal, divided = float64_codes(r, r_min, r_max, bits)
        missed["float64 r / s"] += divided != exact
        missed["float64 r * (1/s)"] += reciprocal != exact
    return missed
