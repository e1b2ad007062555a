"""FP8 (E4M3, E5M2): the grid, bit-exact casts, saturation, scales as vLLM chooses them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from servebook import quant
from servebook.quant import FP8Format

try:
    import ml_dtypes
except ImportError:       # numpy arrays need it for FP8; torch tensors do not
    ml_dtypes = None
needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="FP8 numpy arrays need ml_dtypes")

FORMATS = list(FP8Format)


def test_the_grids_have_the_formats_extremes_and_counts():
    e4m3, e5m2 = quant.fp8_values("e4m3"), quant.fp8_values("e5m2")
    assert (e4m3[-1], e5m2[-1]) == (448.0, 57344.0) == (quant.fp8_max("e4m3"), quant.fp8_max("e5m2"))
    assert (e4m3[1], e5m2[1]) == (2.0**-9, 2.0**-16)            # smallest subnormals
    assert (len(e4m3), len(e5m2)) == (127, 124)                 # 0 and the positive finite values
    # 8 (E4M3) or 4 (E5M2) values per binade: the step is relative, not absolute
    assert np.count_nonzero((e4m3 >= 1) & (e4m3 < 2)) == 8 and np.count_nonzero((e5m2 >= 1) & (e5m2 < 2)) == 4


def _nearest_even(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Round to the nearest grid value, ties to the one with an even code, from the grid alone."""
    full = np.concatenate([-grid[:0:-1], grid])
    idx = np.clip(np.searchsorted(full, x), 1, len(full) - 1)
    lo, hi = full[idx - 1], full[idx]
    pick_hi = (hi - x < x - lo) | ((hi - x == x - lo) & (idx % 2 == (len(grid) - 1) % 2))
    return np.where(pick_hi, hi, lo)


@needs_ml_dtypes
@pytest.mark.parametrize("fmt", FORMATS)
def test_casts_are_bit_exact_round_to_nearest_even_in_torch_and_numpy(fmt):
    grid = quant.fp8_values(fmt)
    full = np.concatenate([-grid[:0:-1], grid])
    midpoints = (full[:-1] + full[1:]) / 2
    gen = np.random.default_rng(0)
    between = gen.uniform(full[:-1], full[1:])
    x = np.concatenate([full, midpoints, between]).astype(np.float32)
    x = x[np.abs(x) <= grid[-1]]
    expected = _nearest_even(x.astype(np.float64), grid)
    torch_codes = quant.quantize_fp8(torch.from_numpy(x), 1.0, fmt)
    numpy_codes = quant.quantize_fp8(x, 1.0, fmt)
    assert np.array_equal(torch_codes.double().numpy(), expected)
    assert np.array_equal(numpy_codes.astype(np.float64), expected)
    assert np.array_equal(torch_codes.view(torch.uint8).numpy(), numpy_codes.view(np.uint8))


@needs_ml_dtypes
@pytest.mark.parametrize("fmt", FORMATS)
def test_out_of_range_values_saturate_where_the_raw_casts_disagree(fmt):
    top = quant.fp8_max(fmt)
    x = torch.tensor([top * 1.2, -top * 3, 1e30, top])
    assert quant.quantize_fp8(x, 1.0, fmt).float().tolist() == [top, -top, top, top]
    assert quant.quantize_fp8(x.numpy(), 1.0, fmt).astype(np.float32).tolist() == [top, -top, top, top]
    raw_torch = x.to(getattr(torch, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fmt.value])).float()
    raw_numpy = x.numpy().astype(getattr(ml_dtypes, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fmt.value]))
    if fmt is FP8Format.E5M2:   # an infinity exists, and both casts reach it
        assert torch.isinf(raw_torch[0]) and np.isinf(raw_numpy.astype(np.float32)[0])
    else:                       # none exists: torch saturates, ml_dtypes gives NaN
        assert raw_torch[0] == top and np.isnan(raw_numpy.astype(np.float32)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_scales_are_vllms_per_tensor_channel_and_token(dtype):
    x = torch.randn(6, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    x[2] = 0
    per_tensor = quant.choose_fp8_scale(x)
    per_token = quant.choose_fp8_scale(x, axis=0)
    per_channel = quant.choose_fp8_scale(x, axis=1)
    assert per_tensor.shape == (1, 1) and per_token.shape == (6, 1) and per_channel.shape == (1, 64)
    assert per_tensor.dtype == torch.float32
    assert float(per_tensor) == float(x.float().abs().max() / 448)   # in float32, as vLLM's kernels
    assert float(per_token[2]) == pytest.approx(1 / (448 * 512), rel=1e-7)   # an all-zero row: the floor
    fake = quant.fake_quantize_fp8(x, per_token)
    assert fake.dtype == dtype and fake.shape == x.shape
    # every row's largest magnitude lands exactly on 448 * s, within the 16-bit rounding of the output
    rows = x.float().abs().amax(1)
    assert torch.allclose(fake.float().abs().amax(1), rows, rtol=2.0**-7)


def test_relative_error_is_bounded_by_half_a_mantissa_step():
    x = torch.logspace(-3, 3, 2001) * torch.where(torch.arange(2001) % 2 == 0, 1.0, -1.0)
    for fmt, mantissa_bits in ((FP8Format.E4M3, 3), (FP8Format.E5M2, 2)):
        scale = quant.choose_fp8_scale(x, fmt)
        fake = quant.fake_quantize_fp8(x, scale, fmt)
        normal = x.abs() / scale.reshape(()) >= 2.0 ** (-6 if fmt is FP8Format.E4M3 else -14)
        relative = ((fake - x).abs() / x.abs())[normal]
        assert float(relative.max()) <= 2.0 ** -(mantissa_bits + 1) * 1.0001


def test_dequantize_reads_back_scale_times_code():
    x = torch.tensor([[1.0, -3.0], [0.5, 100.0]])
    scale = quant.choose_fp8_scale(x, axis=0)
    codes = quant.quantize_fp8(x, scale)
    assert codes.dtype == torch.float8_e4m3fn
    assert torch.equal(quant.dequantize_fp8(codes, scale), codes.float() * scale)
    assert quant.dequantize_fp8(codes, scale, dtype=torch.bfloat16).dtype == torch.bfloat16


@needs_ml_dtypes
def test_raw_casts_overflow_past_halfway_above_the_largest_value():
    """The FP8 chapter's trap: where a raw cast stops giving the largest finite value (ties to even)."""
    for fmt, dtype, ml in ((FP8Format.E5M2, torch.float8_e5m2, "float8_e5m2"),
                           (FP8Format.E4M3, torch.float8_e4m3fn, "float8_e4m3fn")):
        values = quant.fp8_values(fmt)
        top = quant.fp8_max(fmt)
        tie = float(values[-1] + (values[-1] - values[-2]) / 2)
        below, above = np.nextafter(np.float32(tie), np.float32(0)), np.nextafter(np.float32(tie), np.float32(1e9))
        raw_ml = np.array([below, tie, above], np.float32).astype(getattr(ml_dtypes, ml)).astype(np.float32)
        raw_torch = torch.tensor([below, tie, above]).to(dtype).float()
        if fmt is FP8Format.E5M2:   # 61,440 rounds up to 2^16, the even neighbour: infinity in both
            assert (tie, 2 * tie - top) == (61_440.0, 2.0**16)
            assert raw_ml[0] == raw_torch[0] == top and np.isinf(raw_ml[1:]).all() and torch.isinf(raw_torch[1:]).all()
        else:                       # 464 rounds to the even 448; past it ml_dtypes gives NaN, torch saturates
            assert tie == 464.0
            assert raw_ml[:2].tolist() == [top, top] and np.isnan(raw_ml[2])
            assert raw_torch.tolist() == [top, top, top]
    assert torch.finfo(torch.float8_e4m3fn).smallest_normal == 2.0**-6
