"""The compiled, blocked, threaded loops compute the formula bit for bit, whatever the blocks and threads."""

from __future__ import annotations

import numpy as np
import pytest

from servebook import quant
from servebook.quant import Mapping, Rounding, _fast

BITS = [2, 3, 4, 5, 6, 7, 8, 16]


def _round(v, rounding):
    if rounding is Rounding.HALF_EVEN:
        return np.rint(v)
    return np.floor(v) + (v - np.floor(v) >= 0.5)


def _formula_codes(x, scale, zero_point, qmin, qmax, rounding, dtype):
    """``clip(round(x * (1 / s)), qmin - z, qmax - z) + z`` on whole arrays, in ``x``'s dtype."""
    scale, zero_point = np.asarray(scale, x.dtype), np.asarray(zero_point).astype(x.dtype)
    v = _round(x * np.divide(1, scale, dtype=x.dtype), rounding)
    return (np.clip(v, qmin - zero_point, qmax - zero_point) + zero_point).astype(dtype)


def _formula_fake(x, scale, zero_point, qmin, qmax, rounding):
    scale, zero_point = np.asarray(scale, x.dtype), np.asarray(zero_point).astype(x.dtype)
    v = _round(x * np.divide(1, scale, dtype=x.dtype), rounding)
    return np.clip(v, qmin - zero_point, qmax - zero_point) * scale


def _same_bits(a, b):
    """Equal dtypes and equal bits (so -0.0 is not 0.0)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _data(shape, dtype=np.float32):
    """Values beyond the grid's range at both ends (so codes saturate), ties, zeros of both signs."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape)
    x.reshape(-1)[::11] *= 8                 # outliers beyond a range chosen on the bulk
    x.reshape(-1)[1::13] = 0.25 * np.round(x.reshape(-1)[1::13] * 4)   # many ties
    x.reshape(-1)[2::17] = -0.0
    return x.astype(dtype)


def _spread(values):
    """``values`` times factors from 0.6 to 1.4, one per entry: every channel or group gets a grid of its own."""
    return values * np.linspace(0.6, 1.4, values.size, dtype=values.dtype).reshape(values.shape)


def _grids(x, bits, mapping):
    """Per tensor, per channel along each axis, and group-wise: scale and zero point broadcast against ``x``."""
    bulk = np.clip(x, -1.5, 1.0)
    rows, cols = x.shape
    found = {}
    for name, reduce_over, shape in [("tensor", None, ()), ("channel 0", 1, (rows, 1)), ("channel 1", 0, (1, cols))]:
        lo = _spread(bulk.min(axis=reduce_over).reshape(shape))
        hi = _spread(bulk.max(axis=reduce_over).reshape(shape))
        found[name] = quant.choose_qparams_affine(lo, hi, bits, mapping, include_zero=True)
    grouped = bulk.reshape(rows, cols // 5, 5)
    scale, zero_point = quant.choose_qparams_affine(_spread(grouped.min(axis=2, keepdims=True)),
                                                    _spread(grouped.max(axis=2, keepdims=True)), bits, mapping)
    found["group"] = (scale, zero_point)
    return found


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows shared by three threads, so that small arrays take the threaded path."""
    monkeypatch.setattr(_fast, "BLOCK_ELEMENTS", 3 * 130)
    monkeypatch.setattr(_fast, "THREADS", 3)


def _as_grid(x, granularity, scale, zero_point):
    if granularity == "group":
        return x.reshape(x.shape[0], -1, 5), scale, zero_point
    return x, scale, zero_point


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("mapping", list(Mapping))
@pytest.mark.parametrize("rounding", list(Rounding))
def test_codes_fake_values_and_dequantized_values_are_the_formulas_bit_for_bit(bits, mapping, rounding, small_blocks):
    x = _data((37, 130))
    qmin, qmax = quant.qrange(bits, mapping)
    for granularity, (scale, zero_point) in _grids(x, bits, mapping).items():
        view, scale, zero_point = _as_grid(x, granularity, scale, zero_point)
        codes = quant.quantize_affine(view, scale, zero_point, qmin, qmax, rounding)
        expected = _formula_codes(view, scale, zero_point, qmin, qmax, rounding, codes.dtype)
        assert _same_bits(codes, expected), granularity
        assert codes.min() == qmin and codes.max() == qmax, granularity   # both ends of the range
        fake = quant.fake_quantize_affine(view, scale, zero_point, qmin, qmax, rounding)
        assert _same_bits(fake, _formula_fake(view, scale, zero_point, qmin, qmax, rounding)), granularity
        back = quant.dequantize_affine(codes, scale, zero_point)
        expected = scale * (codes.astype(np.float32) - np.asarray(zero_point).astype(np.float32))
        assert _same_bits(back, expected), granularity


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rounding", list(Rounding))
def test_codes_of_a_range_float32_cannot_hold_take_the_clip_then_shift_order(dtype, rounding, small_blocks):
    """32-bit codes: in float32 the integers near 2**31 are not all exact, so the shift by ``z`` waits
    for the clip; float64 holds them, and either order gives the same codes."""
    qmin, qmax = -(2 ** 31), 2 ** 31 - 1
    x = (_data((37, 130), dtype) * 2 ** 20).astype(dtype)   # inside the range: no code wraps
    scale = np.array(2.0 ** -3, dtype)
    for zero_point in (qmin + 256, 0, 2 ** 30):   # exact in float32
        codes = quant.quantize_affine(x, scale, zero_point, qmin, qmax, rounding)
        assert _same_bits(codes, _formula_codes(x, scale, zero_point, qmin, qmax, rounding, np.int32))


@pytest.mark.parametrize(("dtype", "qmin", "qmax", "zero_point"), [
    (np.float32, 0, 15, 3), (np.float32, -(2 ** 15), 2 ** 15 - 1, 7), (np.float64, -(2 ** 31), 2 ** 31 - 1, 7)])
def test_products_that_overflow_land_on_the_last_codes(dtype, qmin, qmax, zero_point, small_blocks):
    """A finite ``x`` whose ``x / s`` overflows to inf saturates, as the formula's clip has it."""
    big = np.finfo(dtype).max / 2
    x = np.array([[big, -big, 1.0, 0.0]] * 40, dtype=dtype)
    with np.errstate(over="ignore"):
        codes = quant.quantize_affine(x, dtype(1e-3), zero_point, qmin, qmax, Rounding.HALF_EVEN)
        expected = _formula_codes(x, 1e-3, zero_point, qmin, qmax, Rounding.HALF_EVEN, codes.dtype)
    assert (codes[:, 0] == qmax).all() and (codes[:, 1] == qmin).all()
    assert _same_bits(codes, expected)


@pytest.mark.parametrize("granularity", ["tensor", "channel 0", "channel 1", "group"])
def test_threads_and_block_sizes_change_no_bit(monkeypatch, granularity):
    """Blocks that end inside a row, a group or a cycle of per-column parameters give the same bits."""
    x = _data((257, 130))
    view, scale, zero_point = _as_grid(x, granularity, *_grids(x, 4, Mapping.ASYMMETRIC)[granularity])

    def results():
        codes = quant.quantize_affine(view, scale, zero_point, 0, 15, Rounding.HALF_UP)
        fake = quant.fake_quantize_affine(view, scale, zero_point, 0, 15, Rounding.HALF_UP)
        return codes, fake, quant.dequantize_affine(codes, scale, zero_point)

    one_block = results()   # 33410 elements: one block, on the calling thread
    for block, threads in [(130, 2), (7 * 130 + 3, 3), (64 * 130 - 1, 4), (97, 2)]:
        monkeypatch.setattr(_fast, "BLOCK_ELEMENTS", block)
        monkeypatch.setattr(_fast, "THREADS", threads)
        assert all(_same_bits(a, b) for a, b in zip(one_block, results(), strict=True))


def test_every_row_is_worked_on_once(small_blocks):
    drawn = []
    _fast.run_blocks(lambda blocks: drawn.extend(blocks), 100, 7)
    assert sorted(drawn) == [(start, min(start + 7, 100)) for start in range(0, 100, 7)]


def test_an_error_in_one_block_stops_the_others_and_reaches_the_caller(small_blocks):
    done = []

    def work(blocks):
        for start, _ in blocks:
            if start == 21:
                raise ValueError("block 21")
            done.append(start)

    with pytest.raises(ValueError, match="block 21"):
        _fast.run_blocks(work, 1000, 7)
    assert len(done) < 1000 // 7


def test_a_nan_or_inf_in_the_last_block_is_refused(small_blocks):
    for bad in (np.nan, np.inf, -np.inf):
        x = _data((37, 130))
        x[-1, -1] = bad
        with pytest.raises(ValueError, match="x must be finite: it holds NaN or inf"):
            quant.quantize_affine(x, np.float32(0.1), 8, 0, 15)
        with pytest.raises(ValueError, match="x must be finite: it holds NaN or inf"):
            quant.fake_quantize_affine(x, np.float32(0.1), 8, 0, 15)


@pytest.mark.parametrize(("shape", "params", "period", "run"), [
    ((37, 130), [(), ()], 1, 37 * 130),                      # per tensor
    ((37, 130), [(37, 1), (37, 1)], 37, 130),                # per row
    ((37, 130), [(1, 130), ()], 130, 1),                     # per column: the cycle is a row
    ((37, 26, 5), [(37, 26, 1), (1, 1, 1)], 37 * 26, 5),     # groups of 5
    ((4, 3, 2), [(4, 1, 1), (1, 1)], 4, 6),
    ((4, 3, 2), [(1, 3, 1)], 3, 2),                          # the middle axis: the cycle repeats 4 times
    ((4, 3, 2), [(4, 1, 2), (1, 3, 1)], 24, 1),              # broadcast inside the cycle: laid out in full
    ((), [(), ()], 1, 1),
])
def test_layout_gives_every_element_its_own_parameters(shape, params, period, run):
    rng = np.random.default_rng(3)
    values = [rng.standard_normal(p) for p in params]
    found_period, found_run, flat = _fast.layout(shape, values)
    assert (found_period, found_run) == (period, run)
    element = np.arange(int(np.prod(shape)))
    for value, laid_out in zip(values, flat, strict=True):
        assert laid_out.shape == (period,)
        assert np.array_equal(laid_out[(element // run) % period], np.broadcast_to(value, shape).reshape(-1))


def test_the_codes_range_is_read_in_the_dequantizing_pass(small_blocks):
    """``dequantize`` refuses codes outside the grid's range, found in whichever block holds them."""
    qparams = quant.QParams(np.float32(0.5), np.int32(3), 4)
    for bad, found in ((16, r"\[0, 16\]"), (-1, r"\[-1, 0\]")):
        codes = np.zeros(5001, np.int16)
        codes[-1] = bad
        message = rf"codes must lie in \[0, 15\] for 4 bits ASYMMETRIC, got values in {found}"
        with pytest.raises(ValueError, match=message):
            quant.dequantize(codes, qparams)
    codes = np.arange(37 * 130, dtype=np.int32).reshape(37, 130) % 16
    assert _same_bits(quant.dequantize(codes[:, ::3], qparams),
                      np.float32(0.5) * (codes[:, ::3].astype(np.float32) - np.float32(3)))


def test_the_loops_compile_where_no_cache_can_be_written(monkeypatch):
    """numba refuses ``cache=True`` when it finds nowhere writable (a read-only install, no home): the loops
    are then compiled in each process instead of failing to import."""
    import numba

    from servebook.quant import _loops

    real = numba.njit

    def njit(**options):
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f.py'")
        return real(**options)

    monkeypatch.setattr(numba, "njit", njit)
    compiled = _loops._compiled(lambda a, b: a * b)
    assert compiled(np.float32(3), np.float32(0.5)) == 1.5
