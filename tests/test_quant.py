"""The quantizer against the seeds' hand calculations, properties, PyTorch, and bad input."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from servebook import quant
from servebook.quant import Mapping, Rounding  # noqa: F401 - used below

INT4 = quant.qrange(4)


# --------------------------------------------------------------------------- seeds


def test_c5_interior_value_exact():
    scale, zero_point = quant.choose_qparams_affine("-0.6", "0.9", bits=4)
    assert (scale, zero_point) == (Fraction(1, 10), 6)
    q = quant.quantize_affine("0.35", scale, zero_point, *INT4)
    r_hat = quant.dequantize_affine(q, scale, zero_point)
    assert q == 10
    assert r_hat == Fraction(2, 5)
    assert abs(r_hat - Fraction("0.35")) == Fraction(1, 20) == quant.error_bound(scale)


@pytest.mark.parametrize("number", [Fraction(7, 20), Decimal("0.35"), "0.35", "7/20"])
def test_c5_accepts_every_exact_spelling(number):
    scale, zero_point = quant.choose_qparams_affine(Decimal("-0.6"), Fraction(9, 10), 4)
    assert quant.quantize_affine(number, scale, zero_point, *INT4) == 10


def test_c6_boundary_and_outlier_saturate():
    scale, zero_point = quant.choose_qparams_affine("-0.6", "0.9", 4)
    top = quant.quantize_affine("0.9", scale, zero_point, *INT4)
    assert top == 15 and quant.dequantize_affine(top, scale, zero_point) == Fraction("0.9")
    wanted = round(Fraction("1.4") / scale) + zero_point
    assert wanted == 20
    outlier = quant.quantize_affine("1.4", scale, zero_point, *INT4)
    r_hat = quant.dequantize_affine(outlier, scale, zero_point)
    assert outlier == 15 and r_hat == Fraction("0.9")
    assert abs(Fraction("1.4") - r_hat) == Fraction(1, 2) == 10 * quant.error_bound(scale)


def test_c7_flat_tensor():
    with pytest.raises(ZeroDivisionError):
        Fraction("0.3") / ((Fraction("0.3") - Fraction("0.3")) / 15)
    # the seeds' illustrative floor
    scale, zero_point = quant.choose_qparams_affine("0.3", "0.3", 4, eps="0.1", exact_constant=False)
    assert (scale, zero_point) == (Fraction(1, 10), 0)
    q = quant.quantize_affine("0.3", scale, zero_point, *INT4)
    assert q == 3 and quant.dequantize_affine(q, scale, zero_point) == Fraction("0.3")
    # a tiny floor saturates
    scale, zero_point = quant.choose_qparams_affine("0.3", "0.3", 4, eps=2**-12, exact_constant=False)
    q = quant.quantize_affine("0.3", scale, zero_point, *INT4)
    r_hat = quant.dequantize_affine(q, scale, zero_point)
    assert (zero_point, q) == (0, 15)
    assert r_hat == Fraction(15, 4096) and round(float(r_hat), 5) == 0.00366
    # the constant-channel fix is exact
    scale, zero_point = quant.choose_qparams_affine("0.3", "0.3", 4)
    q = quant.quantize_affine("0.3", scale, zero_point, *INT4)
    assert quant.dequantize_affine(q, scale, zero_point) == Fraction("0.3")


@pytest.mark.parametrize(("bits", "bound"), [(4, Fraction(1, 15)), (8, Fraction(1, 255)), (16, Fraction(1, 65535))])
def test_c8_error_bound_by_bits(bits, bound):
    scale, _ = quant.choose_qparams_affine(-1, 1, bits)
    assert quant.error_bound(scale) == bound


def test_c10_and_l3_2_ratio_is_17():
    s4, _ = quant.choose_qparams_affine("-0.6", "0.9", 4)
    s8, _ = quant.choose_qparams_affine("-0.6", "0.9", 8)
    assert s4 == Fraction(1, 10)
    assert round(float(s8), 6) == 0.005882
    assert s4 / s8 == 17
    b4, _ = quant.choose_qparams_affine(-1, 1, 4)
    b8, _ = quant.choose_qparams_affine(-1, 1, 8)
    assert b4 / b8 == 17


def test_float_trap_at_the_c5_tie():
    assert 0.35 / 0.1 == 3.4999999999999996
    assert int(np.floor(0.35 / 0.1 + 0.5)) + 6 == 9
    assert int(np.floor(np.float32(0.35) / np.float32(0.1) + np.float32(0.5))) + 6 == 10
