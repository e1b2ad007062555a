"""Activation quantization: planted outliers keep the function, and each remedy does what it claims."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from servebook import actquant, quant, smallmodel


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = smallmodel.load("tiny-llama")
    ids = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               n_samples=8, seq_len=64)
    planted = actquant.plant_activation_outliers(model, [7, 100, 201], 40.0)
    return model, planted, ids, calibration


def test_planting_outliers_keeps_the_function_and_makes_the_outliers(tiny):
    model, planted, ids, calibration = tiny
    batch = ids[:64].unsqueeze(0)
    with torch.no_grad():
        a, b = model(input_ids=batch).logits, planted(input_ids=batch).logits
    assert torch.allclose(a, b, atol=1e-3)
    name = "model.layers.0.self_attn.q_proj"
    before = actquant.outlier_ratio(actquant.input_absmax(model, calibration)[name])
    after = actquant.outlier_ratio(actquant.input_absmax(planted, calibration)[name])
    assert before < 3 < 20 < after


def test_each_remedy_recovers_what_per_token_int8_loses_on_planted_outliers(tiny):
    _, planted, ids, calibration = tiny
    ppl = {scheme: smallmodel.perplexity(actquant.quantize_activations(
        planted, scheme, calibration=calibration if scheme == "smoothquant" else None), ids, max_windows=8)
        for scheme in ("w8a16", "w8a8_tensor", "w8a8_token", "llm_int8", "smoothquant")}
    assert ppl["w8a8_tensor"] > ppl["w8a8_token"] > ppl["w8a16"]
    for remedy in ("llm_int8", "smoothquant"):
        assert ppl[remedy] < ppl["w8a8_token"] and abs(ppl[remedy] / ppl["w8a16"] - 1) < 0.01


def test_llm_int8_keeps_outlier_columns_in_float_and_the_rest_in_int8():
    torch.manual_seed(0)
    linear = nn.Linear(16, 4, bias=False)
    x = torch.randn(5, 16)
    x[:, 2] = 50.0
    layer = actquant.ActQuantLinear(linear, "llm_int8")
    out = layer(x)
    assert layer.outlier_columns == 1
    without = x.clone()
    without[:, 2] = 0
    expected = actquant._int8(without, axis=0) @ layer.weight_hat.T + x[:, 2:3] * linear.weight[:, 2]
    assert torch.allclose(out, expected, atol=1e-5)


def test_one_int8_rule_serves_weights_per_channel_and_inputs_per_token_or_per_tensor():
    def int8(t, axis):
        return quant.fake_quantize(t, quant.choose_qparams(t, 8, "symmetric", axis=axis), "half_even")

    torch.manual_seed(0)
    linear = nn.Linear(16, 4, bias=False)
    x = torch.randn(5, 16)
    for scheme, axis in (("w8a8_token", 0), ("w8a8_tensor", None)):
        layer = actquant.ActQuantLinear(linear, scheme)
        assert torch.equal(layer.weight_hat, int8(linear.weight.detach(), 0))
        assert torch.equal(layer(x), nn.functional.linear(int8(x, axis), layer.weight_hat))
    assert [name for name in vars(actquant) if name.startswith("_int8")] == ["_int8"]   # one helper, no copies


def test_smoothing_factors_balance_the_two_ranges():
    absmax = torch.tensor([100.0, 1.0, 0.0])
    weight = torch.tensor([[0.01, 1.0, 0.5]])
    s = actquant.smoothing_factors(absmax, weight, 0.5)
    assert torch.allclose(s[:2], torch.tensor([100.0, 1.0]))
    assert s[2] == 1       # an all-zero channel is left alone
    assert torch.allclose(absmax[:2] / s[:2], weight.abs().amax(0)[:2] * s[:2])


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda m, c: actquant.quantize_activations(m, "w4a4"), ValueError, "scheme must be one of"),
    (lambda m, c: actquant.quantize_activations(m, "smoothquant"), ValueError, "calibration token ids"),
    (lambda m, c: actquant.quantize_activations(m, "w8a8_token", calibration=c), ValueError, "only by it"),
    (lambda m, c: actquant.quantize_activations(m, "smoothquant", calibration=c, alpha=1.5), ValueError, "alpha"),
    (lambda m, c: actquant.quantize_activations(m, "llm_int8", threshold=0), ValueError, "threshold"),
    (lambda m, c: actquant.plant_activation_outliers(m, [1], -2.0), ValueError, "factor"),
])
def test_bad_arguments_are_refused(tiny, call, error, match):
    model, _, _, calibration = tiny
    with pytest.raises(error, match=match):
        call(model, calibration)
