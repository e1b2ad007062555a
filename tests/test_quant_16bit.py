"""16-bit inputs are quantized in float32, code for code what torch's fake-quantize kernels compute."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from servebook import quant

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _tensor(kind: str, seed: int) -> torch.Tensor:
    """A tensor of one of the shapes of data that break quantizers (in float32; cast by the caller)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (33, 130) if kind == "odd shape" else (48, 128)
    x = torch.randn(shape, generator=gen)
    if kind == "outliers":
        x[:, 5] *= 60
        x[3, :] *= 40
    elif kind == "constant rows":
        x[1], x[2], x[3] = 0.3, -2.0, 0.0
    elif kind == "one-signed rows":
        x[: shape[0] // 2] = x[: shape[0] // 2].abs() + 0.5
        x[shape[0] // 2:] = -x[shape[0] // 2:].abs() - 0.25
    elif kind == "tiny":
        x = x * 1e-6             # float16 subnormals; steps below 1/65504
    elif kind == "huge":
        x = (x * 2e4).clamp(-6e4, 6e4)   # float16's range nearly full: a step of about 8000
    return x


KINDS = ["normal", "outliers", "constant rows", "one-signed rows", "tiny", "huge", "odd shape"]


def _torch_fake(x, qp):
    """torch's fake-quantize of ``x`` with our scale and zero point (groups as rows of a 2-d view)."""
    if qp.granularity == "tensor":
        return torch.fake_quantize_per_tensor_affine(x, float(qp.scale), int(qp.zero_point), qp.qmin, qp.qmax)
    if qp.granularity == "channel":
        return torch.fake_quantize_per_channel_affine(x, qp.scale, qp.zero_point, 0, qp.qmin, qp.qmax)
    rows = x.reshape(-1, qp.group_size)
    out = torch.fake_quantize_per_channel_affine(rows, qp.scale.reshape(-1), qp.zero_point.reshape(-1), 0,
                                                 qp.qmin, qp.qmax)
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("grid", ["tensor", "channel", "group"])
def test_zero_code_mismatches_against_torch_fake_quantize(dtype, kind, grid):
    x = _tensor(kind, seed=KINDS.index(kind)).to(dtype)
    group = 2 if kind == "odd shape" else 32
    options = {"tensor": {}, "channel": {"axis": 0}, "group": {"group_size": group}}[grid]
    qp = quant.choose_qparams(x, 4, include_zero=True, rounding="half_even", exact_constant=False, **options)
    assert qp.scale.dtype == torch.float32          # a 16-bit input still gets float32 scales
    ours = quant.fake_quantize(x, qp, "half_even")
    theirs = _torch_fake(x, qp)
    assert ours.dtype == dtype
    assert int((ours != theirs).sum()) == 0
    codes = quant.quantize(x, qp, "half_even")
    assert torch.equal(quant.dequantize(codes, qp, dtype=dtype), theirs)


def test_the_float16_case_that_16_bit_arithmetic_got_wrong():
    x = torch.tensor([0.25], dtype=torch.float16)
    s = float(torch.tensor(0.1, dtype=torch.float16))      # 0.0999755859375: x / s = 2.5006...
    assert int(quant.quantize_affine(x, s, 0, 0, 15, "half_even")) == 3
    assert torch.fake_quantize_per_tensor_affine(x, s, 0, 0, 15).item() == pytest.approx(3 * s, rel=1e-3)
    f16_scale = torch.tensor(s, dtype=torch.float16)        # a float16 scale is widened, not used as is
    assert int(quant.quantize_affine(x, f16_scale, 0, 0, 15, "half_even")) == 3


def test_numpy_float16_matches_the_torch_float16_path():
    x = _tensor("outliers", 3).to(torch.float16)
    qp_t = quant.choose_qparams(x, 4, axis=0)
    qp_n = quant.choose_qparams(x.numpy(), 4, axis=0)
    assert qp_n.scale.dtype == np.float32
    assert np.array_equal(qp_t.scale.numpy(), qp_n.scale)
    assert np.array_equal(quant.fake_quantize(x, qp_t).numpy(), quant.fake_quantize(x.numpy(), qp_n))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_tiny_steps_are_kept_and_every_value_is_within_half_a_step(dtype):
    x = _tensor("tiny", 1).to(dtype)
    qp = quant.choose_qparams(x, 8, axis=0, include_zero=True)
    assert float(qp.scale.max()) < 1 / 65504                 # below float16's smallest normal step
    error = (quant.fake_quantize(x, qp).float() - x.float()).abs()
    # the bound is half a step plus the final rounding to 16 bits
    bound = qp.scale.reshape(-1, 1) / 2 + x.float().abs() * 2.0**-7 + 2.0**-24
    assert bool((error <= bound).all())


def test_a_range_wider_than_float32_is_refused():
    with pytest.raises(ValueError, match="overflows to inf"):
        quant.choose_qparams(np.array([-3e38, 3e38], dtype=np.float32), 4)
    with pytest.raises(ValueError, match="overflows to inf"):
        quant.choose_qparams(torch.tensor([-3e38, 3e38]), 8)
