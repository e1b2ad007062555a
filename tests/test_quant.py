"""The quantizer against the seeds' hand calculations, properties, PyTorch, and bad input."""

from __future__ import annotations

import math
import warnings
from decimal import Decimal
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import quant
from servebook.quant import Mapping, Rounding

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


def test_float_paths_at_the_c5_tie():
    scale, zero_point = quant.choose_qparams_affine(-0.6, 0.9, 4)  # float64 path
    assert (scale, zero_point) == (0.1, 6)
    # the library multiplies by 1/s, torch's arithmetic: 0.35 * 10.0 lands on the tie 3.5
    assert 0.35 * (1 / scale) == 3.5
    assert quant.quantize_affine(0.35, scale, zero_point, *INT4) == 10
    assert quant.quantize_affine(0.35, scale, zero_point, *INT4, rounding=Rounding.HALF_EVEN) == 10
    q32 = quant.quantize_affine(np.array([0.35], dtype=np.float32), np.float32(0.1), 6, *INT4)
    assert q32.tolist() == [10]


def test_tie_case_where_the_modes_differ():
    scale, zero_point = quant.choose_qparams_affine("-0.75", "1.125", 4)
    assert (scale, zero_point) == (Fraction(1, 8), 6)
    assert quant.quantize_affine("0.3125", scale, zero_point, *INT4, rounding="half_even") == 8
    assert quant.quantize_affine("0.3125", scale, zero_point, *INT4, rounding="half_up") == 9
    # binary-exact, so the float path agrees
    assert quant.quantize_affine(0.3125, 0.125, 6, *INT4, rounding=Rounding.HALF_EVEN) == 8
    assert quant.quantize_affine(0.3125, 0.125, 6, *INT4, rounding=Rounding.HALF_UP) == 9


# --------------------------------------------------------------------------- rounding


def test_round_half_up_is_right_where_floor_plus_half_is_wrong():
    v = 0.49999999999999994
    assert np.floor(v + 0.5) == 1.0  # the naive formula
    assert quant.round_half_up(v) == 0
    assert quant.round_half_up(np.array([v, 0.5, -0.5, 2.5, -2.5])).tolist() == [0, 1, 0, 3, -2]
    assert quant.round_half_even(np.array([0.5, 1.5, 2.5, -2.5])).tolist() == [0, 2, 2, -2]
    assert quant.round_half_up(Fraction(-5, 2)) == -2 and quant.round_half_even(Fraction(5, 2)) == 2


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False))
def test_round_half_up_matches_exact_arithmetic(v):
    expected = math.floor(Fraction(v) + Fraction(1, 2))
    assert quant.round_half_up(v) == expected
    assert quant.round_half_up(np.array([v]))[0] == expected
    assert quant.round_half_up(torch.tensor([v], dtype=torch.float64))[0].item() == expected


# --------------------------------------------------------------------------- properties

finite32 = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32)
arrays32 = st.lists(finite32, min_size=1, max_size=64).map(lambda v: np.array(v, dtype=np.float32))
bit_widths = st.integers(2, 16)
mappings = st.sampled_from(list(Mapping))
roundings = st.sampled_from(list(Rounding))


@settings(max_examples=150, deadline=None)
@given(arrays32, bit_widths, mappings, roundings, st.booleans())
def test_codes_always_in_range(x, bits, mapping, rounding, include_zero):
    qparams = quant.choose_qparams(x, bits, mapping, include_zero=include_zero)
    codes = quant.quantize(x * 3, qparams, rounding)  # many values beyond the range
    assert codes.min() >= qparams.qmin and codes.max() <= qparams.qmax


@settings(max_examples=60, deadline=None)
@given(st.lists(finite32, min_size=16, max_size=16), st.sampled_from([None, "channel", "tensor", 4]),
       st.integers(2, 8), mappings, st.floats(-1e3, 1e3, width=32))
def test_weight_grid_keeps_every_weight_within_half_a_step(values, group_size, bits, mapping, shift):
    """RTN/GPTQ/AWQ's grid contains 0, so even a group far from 0 keeps its zero point a code and never saturates."""
    W = np.array(values, dtype=np.float32).reshape(4, 4) + np.float32(shift)
    qparams = quant.weight_qparams(W, bits, group_size, mapping)
    assert int(np.min(qparams.zero_point)) >= qparams.qmin and int(np.max(qparams.zero_point)) <= qparams.qmax
    step = np.broadcast_to(np.asarray(qparams.scale).reshape(-1, 1) if qparams.axis == 0 else qparams.scale,
                           W.shape) if group_size != 4 else np.repeat(qparams.scale, 4, axis=1)
    error = quant.quantization_error(W, qparams)
    slack = 8 * np.finfo(np.float32).eps * np.maximum(np.abs(W).max(), step)
    assert bool((error <= step / 2 + slack).all())


def test_weight_grid_is_include_zero_and_the_default_is_not():
    """choose_qparams keeps the seeds' default (no widening); weight_qparams always widens to 0."""
    W = np.array([[0.2, 0.5, 0.8, 0.35]])
    assert quant.choose_qparams_affine("0.2", "0.8", 4) == (Fraction(1, 25), 0)   # z = round(-5) clipped to 0
    clipped = quant.choose_qparams(W, 4, axis=0)
    # the grid stops at 15 s = 0.6: 0.8 saturates, 5 s (ten times the bound s/2) away
    assert float(quant.quantization_error(W, clipped).max()) == pytest.approx(0.2) == 5 * float(clipped.scale[0])
    for group_size, kwargs in ((None, dict(axis=0)), ("channel", dict(axis=0)), ("tensor", {}),
                               (2, dict(group_size=2))):
        ours = quant.weight_qparams(W, 4, group_size)
        theirs = quant.choose_qparams(W, 4, include_zero=True, **kwargs)
        assert (ours.axis, ours.group_size) == (theirs.axis, theirs.group_size)
        assert np.array_equal(ours.scale, theirs.scale) and np.array_equal(ours.zero_point, theirs.zero_point)
    with pytest.raises(ValueError, match="group_size"):
        quant.weight_qparams(W, 4, "row")
    with pytest.raises(ValueError, match="group_size"):
        quant.weight_qparams(W, 4, 0)


@pytest.mark.parametrize("call", [
    lambda: quant.quantize_affine("0.3", "0.1", 99, 0, 15),
    lambda: quant.quantize_affine(0.3, 0.1, -1, 0, 15),
    lambda: quant.quantize_affine(np.ones(3), 0.1, np.array([0, 16, 3]), 0, 15),
    lambda: quant.quantize_affine(torch.ones(3), 0.1, torch.tensor(99), 0, 15),
    lambda: quant.fake_quantize_affine("0.3", "0.1", 99, 0, 15),
    lambda: quant.fake_quantize_affine(torch.ones(2, 3), torch.ones(2, 1), torch.tensor([[0], [16]]), 0, 15),
])
def test_zero_point_outside_the_code_range_is_refused(call):
    with pytest.raises(ValueError, match=r"zero_point must lie in \[0, 15\]"):
        call()


@pytest.mark.parametrize("scale", [-1, 0, "-0.1", -0.5, np.array([0.1, -0.1]), torch.tensor([0.0]), float("nan")])
def test_error_bound_refuses_a_scale_that_is_not_positive(scale):
    with pytest.raises(ValueError, match="scale must be positive"):
        quant.error_bound(scale)


@settings(max_examples=150, deadline=None)
@given(arrays32, bit_widths, mappings, roundings)
def test_in_range_error_is_at_most_half_a_step(x, bits, mapping, rounding):
    qparams = quant.choose_qparams(x, bits, mapping, include_zero=True)
    error = quant.quantization_error(x, qparams, rounding)
    scale = float(qparams.scale)
    slack = 8 * np.finfo(np.float32).eps * max(float(np.abs(x).max()), scale)
    assert float(error.max()) <= scale / 2 + slack


@settings(max_examples=150, deadline=None)
@given(arrays32, bit_widths, mappings, roundings)
def test_fake_quantize_is_idempotent_and_monotone(x, bits, mapping, rounding):
    qparams = quant.choose_qparams(x, bits, mapping)
    once = quant.fake_quantize(x, qparams, rounding)
    assert np.array_equal(quant.fake_quantize(once, qparams, rounding), once)
    ordered = np.sort(x)
    assert np.all(np.diff(quant.quantize(ordered, qparams, rounding).astype(np.int64)) >= 0)


@settings(max_examples=150, deadline=None)
@given(st.floats(-2.0**100, 2.0**100, allow_nan=False, allow_subnormal=False, width=32)
       .filter(lambda c: abs(c) > 2.0**-100 or c == 0), st.integers(1, 40), bit_widths, mappings)
def test_constant_tensors_reconstruct_exactly(c, n, bits, mapping):
    x = np.full(n, c, dtype=np.float32)
    qparams = quant.choose_qparams(x, bits, mapping)
    assert np.array_equal(quant.fake_quantize(x, qparams), x)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), bit_widths, mappings,
       st.integers(0, 2**32 - 1))
def test_per_channel_and_groupwise_equal_per_tensor_slice_by_slice(rows, n_groups, group_size, bits, mapping, seed):
    x = np.random.default_rng(seed).standard_normal((rows, n_groups * group_size)).astype(np.float32)
    per_row = quant.choose_qparams(x, bits, mapping, axis=0)
    codes = quant.quantize(x, per_row)
    per_col = quant.choose_qparams(x, bits, mapping, axis=1)
    col_codes = quant.quantize(x, per_col)
    grouped = quant.choose_qparams(x, bits, mapping, group_size=group_size)
    group_codes = quant.quantize(x, grouped)
    assert np.shape(grouped.scale) == (rows, n_groups)
    for i in range(rows):
        assert np.array_equal(codes[i], quant.quantize(x[i], quant.choose_qparams(x[i], bits, mapping)))
        for g in range(n_groups):
            piece = x[i, g * group_size:(g + 1) * group_size]
            expected = quant.quantize(piece, quant.choose_qparams(piece, bits, mapping))
            assert np.array_equal(group_codes[i, g * group_size:(g + 1) * group_size], expected)
    for j in range(x.shape[1]):
        assert np.array_equal(col_codes[:, j], quant.quantize(x[:, j], quant.choose_qparams(x[:, j], bits, mapping)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2**20, 2**20), min_size=1, max_size=20), st.integers(-6, 6), st.data(),
       st.integers(2, 8), roundings)
def test_exact_and_float_paths_agree_on_binary_numbers(numerators, scale_exponent, data, bits, rounding):
    qmin, qmax = quant.qrange(bits)
    zero_point = data.draw(st.integers(qmin, qmax), label="zero_point")
    scale = Fraction(2) ** scale_exponent
    for n in numerators:
        r = Fraction(n, 2**10)
        exact = quant.quantize_affine(r, scale, zero_point, qmin, qmax, rounding)
        assert quant.quantize_affine(float(r), float(scale), zero_point, qmin, qmax, rounding) == exact
        assert quant.dequantize_affine(exact, scale, zero_point) == Fraction(quant.dequantize_affine(
            exact, float(scale), zero_point))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(finite32, min_size=8, max_size=8), min_size=1, max_size=6), bit_widths, mappings, roundings,
       st.sampled_from([None, 0, 1]))
def test_numpy_and_torch_paths_agree(rows, bits, mapping, rounding, axis):
    x = np.array(rows, dtype=np.float32)
    xt = torch.from_numpy(x.copy())
    qparams = quant.choose_qparams(x, bits, mapping, axis=axis)
    qparams_t = quant.choose_qparams(xt, bits, mapping, axis=axis)
    assert np.array_equal(np.asarray(qparams.scale), qparams_t.scale.numpy())
    assert np.array_equal(np.asarray(qparams.zero_point), qparams_t.zero_point.numpy())
    codes, codes_t = quant.quantize(x, qparams, rounding), quant.quantize(xt, qparams_t, rounding)
    assert isinstance(codes_t, torch.Tensor)
    assert np.array_equal(codes.astype(np.int64), codes_t.numpy().astype(np.int64))
    fake, fake_t = quant.fake_quantize(x, qparams, rounding), quant.fake_quantize(xt, qparams_t, rounding)
    assert fake_t.dtype == torch.float32 and np.array_equal(fake, fake_t.numpy())
    back_t = quant.dequantize(codes_t, qparams_t)
    assert back_t.dtype == torch.float32 and np.array_equal(back_t.numpy(), fake)


# --------------------------------------------------------------------------- PyTorch parity


def _tie_heavy(seed, shape, scale):
    """Values on and near the ties k * s / 2 as well as plain normal samples."""
    rng = np.random.default_rng(seed)
    ties = (rng.integers(-40, 40, size=shape) + 0.5) * scale
    return np.where(rng.random(shape) < 0.5, ties, rng.standard_normal(shape)).astype(np.float32)


seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=4, deadline=None)
@given(seed=seeds)
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_parity_with_torch_fake_quantize_per_tensor(seed, bits):
    x = _tie_heavy(seed, (32, 64), 0.125)
    qparams = quant.choose_qparams(x, bits, include_zero=True, rounding=Rounding.HALF_EVEN)
    ours = quant.fake_quantize(x, qparams, Rounding.HALF_EVEN)
    theirs = torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), float(qparams.scale), int(qparams.zero_point),
                                                   qparams.qmin, qparams.qmax)
    assert np.array_equal(ours, theirs.numpy())
    # at scale 1/8 the ties are exact in binary: half-even is torch's, half-up differs from it at every tie
    tie_scale = quant.QParams(np.float32(0.125), np.int32(8), 4)
    even = quant.fake_quantize(x, tie_scale, Rounding.HALF_EVEN)
    assert np.array_equal(even, torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), 0.125, 8, 0, 15).numpy())


def test_half_up_and_half_even_differ_at_every_tie_with_an_even_floor():
    ties = (np.arange(-8, 7) + 0.5).astype(np.float32) * np.float32(0.125)   # x / s = -7.5 .. 6.5, all in range
    tie_scale = quant.QParams(np.float32(0.125), np.int32(8), 4)
    even = quant.quantize(ties, tie_scale, Rounding.HALF_EVEN).astype(int) - 8
    up = quant.quantize(ties, tie_scale, Rounding.HALF_UP).astype(int) - 8
    assert up.tolist() == list(range(-7, 8))
    assert even.tolist() == [k + (k % 2) for k in range(-8, 7)]
    assert np.array_equal(even == up, np.arange(-8, 7) % 2 == 1)


@settings(max_examples=3, deadline=None)
@given(seed=seeds)
@pytest.mark.parametrize(("axis", "mapping"),
                         [(0, Mapping.ASYMMETRIC), (1, Mapping.ASYMMETRIC), (0, Mapping.SYMMETRIC)])
def test_parity_with_torch_fake_quantize_per_channel(seed, axis, mapping):
    x = _tie_heavy(seed, (16, 48), 0.0625)
    qparams = quant.choose_qparams(x, 4, mapping, axis=axis, rounding=Rounding.HALF_EVEN)
    ours = quant.fake_quantize(x, qparams, Rounding.HALF_EVEN)
    theirs = torch.fake_quantize_per_channel_affine(torch.from_numpy(x), torch.from_numpy(qparams.scale),
                                                    torch.from_numpy(qparams.zero_point), axis,
                                                    qparams.qmin, qparams.qmax)
    assert np.array_equal(ours, theirs.numpy())


def test_tie_case_against_torch():
    x = torch.tensor([0.3125])
    assert torch.fake_quantize_per_tensor_affine(x, 0.125, 6, 0, 15).item() == 0.25  # q = 8
    assert quant.fake_quantize_affine(x, 0.125, 6, 0, 15, Rounding.HALF_EVEN).item() == 0.25
    assert quant.fake_quantize_affine(x, 0.125, 6, 0, 15, Rounding.HALF_UP).item() == 0.375  # q = 9


@settings(max_examples=3, deadline=None)
@given(seed=seeds)
@pytest.mark.parametrize("per_channel", [False, True])
def test_parity_with_torch_minmax_observer(per_channel, seed):
    from torch.ao.quantization.observer import MinMaxObserver, PerChannelMinMaxObserver

    x = torch.from_numpy(_tie_heavy(seed, (8, 32), 0.1)) + 0.5
    if per_channel:
        observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.quint8, qscheme=torch.per_channel_affine,
                                            quant_min=0, quant_max=15)
    else:
        observer = MinMaxObserver(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=0, quant_max=15)
    observer(x)
    scale, zero_point = observer.calculate_qparams()
    ours = quant.choose_qparams(x, 4, axis=0 if per_channel else None, include_zero=True,
                                eps=torch.finfo(torch.float32).eps, rounding=Rounding.HALF_EVEN, exact_constant=False)
    assert torch.equal(ours.scale.reshape(scale.shape), scale)
    assert torch.equal(ours.zero_point.reshape(zero_point.shape).to(zero_point.dtype), zero_point)


def test_torch_observer_on_the_seeds_constant_tensor():
    from torch.ao.quantization.observer import MinMaxObserver

    observer = MinMaxObserver(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=0, quant_max=15)
    assert observer.eps.item() == torch.finfo(torch.float32).eps == 2**-23
    x = torch.full((4,), 0.3)
    observer(x)
    scale, zero_point = observer.calculate_qparams()
    ours = quant.choose_qparams(x, 4, include_zero=True, eps=2**-23, rounding="half_even", exact_constant=False)
    assert torch.equal(ours.scale.reshape(1), scale) and int(ours.zero_point) == int(zero_point) == 0
    rebuilt = torch.fake_quantize_per_tensor_affine(x, scale.item(), int(zero_point), 0, 15)
    assert torch.equal(rebuilt, x)  # widening to include 0 puts 0.3 on the top code
    assert torch.equal(quant.fake_quantize(x, ours, "half_even"), x)


# --------------------------------------------------------------------------- INT4 packing


def test_pack_int4_nibble_orders():
    codes = np.array([1, 2, 3, 4, 5], dtype=np.uint8)
    low = quant.pack_int4(codes)
    high = quant.pack_int4(codes, order="high_first")
    assert low.tolist() == [0x21, 0x43, 0x05]
    assert high.tolist() == [0x12, 0x34, 0x50]
    assert quant.unpack_int4(low, 5).tolist() == codes.tolist()
    assert quant.unpack_int4(high, 5, order="high_first").tolist() == codes.tolist()


def test_pack_int4_low_first_matches_torch_quint4x2():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), 1.0, 0, torch.quint4x2)
    storage = list(bytes(q.untyped_storage()))
    assert storage == quant.pack_int4(np.array([1, 2, 3, 4, 5])).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 15), min_size=5, max_size=5), min_size=1, max_size=4),
       st.sampled_from(["low_first", "high_first"]))
def test_pack_unpack_round_trip(rows, order):
    codes = np.array(rows, dtype=np.uint8)
    packed = quant.pack_int4(codes, order=order)
    assert packed.shape == (len(rows), 3) and packed.dtype == np.uint8
    assert np.array_equal(quant.unpack_int4(packed, 5, order=order), codes)
    packed_t = quant.pack_int4(torch.from_numpy(codes), order=order)
    assert np.array_equal(packed_t.numpy(), packed)
    assert np.array_equal(quant.unpack_int4(packed_t, 5, order=order).numpy(), codes)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    x = np.array([0.1, bad, 0.3], dtype=np.float32)
    qparams = quant.QParams(np.float32(0.1), np.int32(0), 4)
    with pytest.raises(ValueError, match="finite"):
        quant.choose_qparams(x, 4)
    with pytest.raises(ValueError, match="finite"):
        quant.quantize(x, qparams)
    with pytest.raises(ValueError, match="finite"):
        quant.fake_quantize(torch.from_numpy(x), qparams)
    with pytest.raises(ValueError, match="finite"):
        quant.choose_qparams_affine(bad, 1.0, 4)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: quant.choose_qparams_affine("0.9", "-0.6", 4), ValueError, "r_min > r_max"),
    (lambda: quant.choose_qparams_affine(np.array([0.0, 1.0]), np.array([1.0, 0.5]), 4), ValueError, "r_min > r_max"),
    (lambda: quant.qrange(0), ValueError, "bits must be in 1..16"),
    (lambda: quant.qrange(17), ValueError, "bits must be in 1..16"),
    (lambda: quant.qrange(1, Mapping.SYMMETRIC), ValueError, "2..16"),
    (lambda: quant.qrange(4.0), TypeError, r"bits must be a whole number \(int\), got 4.0"),
    (lambda: quant.qrange(True), TypeError, r"bits must be a whole number \(int\), got True"),
    (lambda: quant.qrange(4, "skewed"), ValueError, "mapping must be one of"),
    (lambda: quant.quantize_affine(0.5, 0.1, 0, 0, 15, rounding="half_down"), ValueError, "rounding must be one of"),
    (lambda: quant.quantize_affine(0.5, 0.1, 0, 0, 15, rounding=3), TypeError, "rounding must be one of"),
    (lambda: quant.quantize_affine(0.5, 0.0, 0, 0, 15), ValueError, "scale must be positive"),
    (lambda: quant.quantize_affine("0.5", "0", 0, 0, 15), ValueError, "scale must be positive"),
    (lambda: quant.quantize_affine(np.ones(3), -1.0, 0, 0, 15), ValueError, "scale must be positive"),
    (lambda: quant.quantize_affine(0.5, 0.1, 0, 15, 0), ValueError, "qmin must be smaller"),
    (lambda: quant.quantize_affine("zero point five", "0.1", 0, 0, 15), ValueError, "decimal string"),
    (lambda: quant.quantize_affine(np.ones(3), np.ones(4), 0, 0, 15), ValueError, "does not broadcast"),
    (lambda: quant.choose_qparams(np.ones((4, 10)), 4, group_size=3), ValueError, "must divide"),
    (lambda: quant.choose_qparams(np.ones((4, 10)), 4, group_size=0), ValueError, "positive"),
    (lambda: quant.choose_qparams(np.ones((4, 10)), 4, axis=2), ValueError, "axis must be in"),
    (lambda: quant.choose_qparams(np.array([]), 4), ValueError, "empty"),
    (lambda: quant.choose_qparams(np.array(["a"]), 4), TypeError, "real numbers"),
    (lambda: quant.choose_qparams_affine(0.0, 1.0, 4, eps=0.0), ValueError, "eps must be a finite number > 0"),
    (lambda: quant.choose_qparams_affine("0", "1", 4, eps="0"), ValueError, "eps must be a finite number > 0"),
    (lambda: quant.pack_int4(np.array([3, 16])), ValueError, "0..15"),
    (lambda: quant.pack_int4(np.array([-1, 3])), ValueError, "0..15"),
    (lambda: quant.pack_int4(np.array([1.0, 3.0])), TypeError, "integers"),
    (lambda: quant.pack_int4(np.array([1, 3]), order="middle"), ValueError, "order must be one of"),
    (lambda: quant.unpack_int4(np.array([1, 3], dtype=np.uint8), 6), ValueError, "n must be 3 or 4"),
    (lambda: quant.dequantize(np.array([0, 16]), quant.QParams(0.1, 0, 4)), ValueError, "codes must lie in"),
    (lambda: quant.quantize(np.ones((3, 4)), quant.QParams(np.ones(4), np.zeros(4, np.int32), 4, axis=0)),
     ValueError, "needs"),
])
def test_bad_input_is_refused_clearly(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------- the explorer widget


def test_explorer_text_shows_the_seed_answers():
    from servebook.book.widgets import quant as explorer

    rows = dict(explorer.quant_explorer_rows())
    assert rows["scale"].endswith("= 0.1") and rows["zero point"].startswith("z = 6")
    assert rows["code"] == "q = 10" and rows["r_hat"].endswith("= 0.4")
    assert rows["error"] == "|r - r_hat| = 0.05; bound s/2 = 0.05"
    assert "q = 9 via r / s" in rows["float64"] and "misses the exact 10" in rows["float64"]
    outlier = dict(explorer.quant_explorer_rows(r="1.4"))
    assert outlier["code"] == "q = 15 (wanted 20: saturated, never wrapped)"
    assert outlier["error"].endswith("10 x the bound")
    tie = dict(explorer.quant_explorer_rows("-0.75", "1.125", 4, "0.3125", "half_even"))
    assert tie["code"] == "q = 8" and "a tie" in tie["r / s"]
    assert dict(explorer.quant_explorer_rows("-0.75", "1.125", 4, "0.3125", "half_up"))["code"] == "q = 9"
    text = explorer.quant_explorer_text(bits=8)
    assert "1/51 ≈ 0.01960784314" not in text and "0.005882352941" in text  # s8 = 1.5 / 255 = 1/170


def test_explorer_widget_builds_and_reports_bad_input():
    from servebook.book.widgets import quant as explorer

    widget = explorer.quant_explorer()
    out, min_box = widget.output, widget.controls["r_min"]
    assert "q = 10" in out.value
    min_box.value = "2"  # r_min > r_max
    assert "cannot compute" in out.value and "r_min &gt; r_max" in out.value
    with pytest.raises(ValueError, match="r_min > r_max"):
        explorer.quant_explorer_rows("2", "1")


@settings(max_examples=3, deadline=None)
@given(seed=seeds)
@pytest.mark.parametrize("rounding", list(Rounding))
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_torch_device_path_matches_the_cpu_kernels(rounding, axis, seed):
    """Off the CPU (or in bfloat16) tensors take torch's own operations: same answers, bit for bit."""
    x = torch.from_numpy(_tie_heavy(seed, (12, 40), 0.125))
    qparams = quant.choose_qparams(x, 4, axis=axis)
    codes = quant.quantize(x, qparams, rounding)
    fake = quant.fake_quantize(x, qparams, rounding)
    back = quant.dequantize(codes, qparams)
    with mock.patch.object(quant._fast, "numpy_view", lambda value: None):  # as if x lived on a GPU
        device_qparams = quant.choose_qparams(x, 4, axis=axis)
        assert torch.equal(device_qparams.scale, qparams.scale)
        assert torch.equal(device_qparams.zero_point, qparams.zero_point)
        assert torch.equal(quant.quantize(x, qparams, rounding), codes)
        assert torch.equal(quant.fake_quantize(x, qparams, rounding), fake)
        assert torch.equal(quant.dequantize(codes, qparams), back)
        assert torch.equal(back, fake)
        with pytest.raises(ValueError, match="finite"):
            quant.fake_quantize(torch.tensor([0.0, float("nan")]), quant.QParams(0.1, 0, 4))


def test_bfloat16_tensors_take_the_torch_path():
    x = torch.linspace(-1, 1, 64, dtype=torch.bfloat16)
    qparams = quant.choose_qparams(x, 4)
    fake = quant.fake_quantize(x, qparams)
    assert fake.dtype == torch.bfloat16
    assert float((fake.float() - x.float()).abs().max()) <= float(qparams.scale) / 2 + 0.01
