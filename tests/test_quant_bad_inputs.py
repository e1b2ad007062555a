"""Every bad input of the quantization API raises a ValueError or TypeError that names the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from servebook import kvquant, qmodel, quant
from servebook.quant import QParams


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(128, 128)
        self.down = nn.Linear(128, 128)

    def forward(self, x):
        return self.down(self.up(x))


def _model(scale: float = 1.0) -> nn.Module:
    torch.manual_seed(0)
    model = Tiny()
    with torch.no_grad():
        model.up.weight.mul_(scale)
    return model


W = torch.randn(8, 16)
QP = quant.choose_qparams(W, 4, axis=0)

BAD = [
    # quantize_model: the cases that used to pass silently or fail with an unclear message
    (lambda: qmodel.quantize_model(_model(), skip="10"), TypeError, "skip must be a list of names"),
    (lambda: qmodel.quantize_model(_model(), skip=5), TypeError, "skip must be a list of names"),
    (lambda: qmodel.quantize_model(_model(), skip=["dwon"]), ValueError, "skip: unknown name.*'dwon'"),
    (lambda: qmodel.quantize_model(_model(), skip=[3]), TypeError, "skip must hold names"),
    (lambda: qmodel.quantize_model(_model(), inplace="no"), TypeError, "inplace must be True or False"),
    (lambda: qmodel.quantize_model(_model(), inplace=0), TypeError, "inplace must be True or False"),
    (lambda: qmodel.quantize_model(_model(1e7), group_size=16), ValueError, "layer up need a scale.*FP16"),
    (lambda: qmodel.quantize_model(_model(), rounding="nearest"), ValueError, "rounding must be one of"),
    (lambda: qmodel.quantize_model(_model(), pack="yes"), TypeError, "pack must be True or False"),
    (lambda: qmodel.quantize_model(_model(), bits=3), ValueError, "bits must be one of 4, 8"),
    (lambda: qmodel.quantize_model(_model(), group_size=5), ValueError, "group_size 5 must divide"),
    (lambda: qmodel.quantize_model(_model(), group_size="row"), ValueError, "group_size must be one of"),
    (lambda: qmodel.quantize_model(_model(), method="smooth"), ValueError, "method must be one of"),
    (lambda: qmodel.quantize_model("model"), TypeError, "model must be a torch.nn.Module"),
    (lambda: qmodel.rtn_quantize(W, 4, None), ValueError, "group_size must be one of 'tensor', 'channel'"),
    # the weight grid and the tensor API
    (lambda: quant.weight_qparams(W, 4, 16, rounding="up"), ValueError, "rounding must be one of"),
    (lambda: quant.weight_qparams(W, 4, 7), ValueError, "group_size 7 must divide"),
    (lambda: quant.choose_qparams(W, 4, axis=1.0), TypeError, "axis must be a whole number"),
    (lambda: quant.choose_qparams(W, 4, mapping=2), TypeError, "mapping must be one of"),
    (lambda: quant.choose_qparams(torch.ones(2, dtype=torch.bool), 4), TypeError, "x must hold real numbers"),
    (lambda: quant.choose_qparams(torch.tensor([1.0, float("nan")], dtype=torch.float16), 4), ValueError,
     "finite"),
    (lambda: quant.choose_qparams(np.array([-3e38, 3e38], np.float32), 4), ValueError, "overflows to inf"),
    (lambda: quant.quantize(W, "qparams"), TypeError, "qparams must be a QParams"),
    (lambda: quant.fake_quantize(W.half(), QParams(torch.ones(16), torch.zeros(16, dtype=torch.int32), 4,
                                                   axis=0)), ValueError, "needs"),
    (lambda: quant.quantize_affine(W.half(), 0.0, 0, 0, 15), ValueError, "scale must be positive"),
    (lambda: quant.quantize_affine(W.bfloat16(), 1e-45, 0, 0, 15), ValueError, "scale is too small"),
    (lambda: quant.quantize_affine(W.half(), 0.1, 16, 0, 15), ValueError, "zero_point must lie in"),
    (lambda: quant.quantize_affine(W.half(), 0.1, 0.5, 0, 15), ValueError, "zero_point must hold integers"),
    (lambda: quant.dequantize(quant.quantize(W, QP).float(), QP), TypeError, "codes must be an integer tensor"),
    (lambda: quant.dequantize(torch.full((8, 16), 16, dtype=torch.int32), QP), ValueError, "codes must lie in"),
    # FP8
    (lambda: quant.fp8_max("e3m4"), ValueError, "fmt must be one of"),
    (lambda: quant.choose_fp8_scale(W, axis=2), ValueError, "axis must be None, or ints in -2..1"),
    (lambda: quant.choose_fp8_scale(W, axis=(0, 0)), ValueError, "axis names a dimension twice"),
    (lambda: quant.choose_fp8_scale(W, axis=True), ValueError, "axis must be None"),
    (lambda: quant.choose_fp8_scale(torch.tensor([]), axis=None), ValueError, "non-empty"),
    (lambda: quant.choose_fp8_scale(W, floor=0.0), ValueError, "floor must be a finite number > 0"),
    (lambda: quant.quantize_fp8(W, 0.0), ValueError, "scale must be positive and finite"),
    (lambda: quant.quantize_fp8(W, torch.ones(3)), ValueError, "does not broadcast"),
    (lambda: quant.quantize_fp8(W, torch.ones(16, dtype=torch.int32) > 0), TypeError, "scale must hold real"),
    (lambda: quant.quantize_fp8(torch.tensor([1.0, float("inf")]), 1.0), ValueError, "finite"),
    (lambda: quant.dequantize_fp8(torch.ones(3, dtype=torch.int8), 1.0), TypeError, "codes must be a float8"),
    # the KV cache
    (lambda: kvquant.scheme("fp4"), ValueError, "scheme must be one of"),
    (lambda: kvquant.fake_quantize_kv(np.ones((2, 4)), torch.ones(2, 4), "fp8"), TypeError, "keys must be"),
    (lambda: kvquant.hadamard(12), ValueError, "power of two"),
    # a zero point float32 does not hold would shift 32-bit codes (2**31 - 4 rounds to 2**31, which wrapped)
    (lambda: quant.quantize_affine(np.float32([1e9]), 1.0, 2**31 - 4, -(2**31), 2**31 - 1), ValueError,
     "zero_point: codes from .* float32"),
    (lambda: quant.fake_quantize_affine(torch.tensor([1e9]), 1.0, 2**31 - 4, -(2**31), 2**31 - 1), ValueError,
     "zero_point: codes from"),
]


@pytest.mark.parametrize(("call", "error", "match"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_there_are_at_least_thirty_bad_inputs():
    assert len(BAD) >= 30


def test_skip_that_names_a_layer_keeps_it_in_float_and_inplace_false_leaves_the_caller_alone():
    model = _model()
    before = model.up.weight.detach().clone()
    report = qmodel.quantize_model(model, skip=["up"])
    assert report.layers == ["down"] and isinstance(report.model.up, nn.Linear)
    assert isinstance(model.down, nn.Linear) and torch.equal(model.up.weight, before)


def test_half_even_rounds_the_zero_point_too():
    # a range whose zero point -r_min / s is exactly 2.5: half up gives 3, half even 2
    weight = torch.tensor([[-2.5, 12.5] + [0.0] * 14])
    up = quant.weight_qparams(weight, 4, "channel", rounding="half_up")
    even = quant.weight_qparams(weight, 4, "channel", rounding="half_even")
    assert float(up.scale[0]) == float(even.scale[0]) == 1.0
    assert (int(up.zero_point[0]), int(even.zero_point[0])) == (3, 2)
    model = nn.Sequential(nn.Linear(16, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(weight)
    layer = qmodel.quantize_model(model, group_size="channel", rounding="half_even").model[0]
    assert int(layer.qparams().zero_point[0]) == 2
