"""Quantizing the small model: bytes match the formula, codes match the basic quantizer, the forward stays
close to the float model, GPTQ and AWQ beat RTN on its real layers, and bad input is refused."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from servebook import awq, gptq, memory, qmodel, quant, smallmodel
from servebook.quant import Mapping


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tokenizer = smallmodel.load("tiny-llama")
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               n_samples=16, seq_len=64)
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())[: 16 * 128]
    return model, calibration, held


@pytest.fixture(scope="module")
def stats(tiny):
    model, calibration, _ = tiny
    return smallmodel.layer_statistics(model, calibration)


def relative(W, W_hat, acc):
    gram = acc.H / 2
    return math.sqrt(awq.output_error(W, W_hat, gram) / awq.output_error(W, torch.zeros_like(W), gram))


@pytest.mark.parametrize("name", ["model.layers.0.self_attn.q_proj", "model.layers.2.mlp.down_proj"])
def test_gptq_and_awq_beat_rtn_on_the_small_models_layers(tiny, stats, name):
    model, _, _ = tiny
    W = model.get_submodule(name).weight.detach()
    acc = stats[name]
    codes, qparams = qmodel.rtn_quantize(W, 4, 32)
    rtn_error = relative(W, quant.dequantize(codes, qparams), acc)
    gptq_error = relative(W, gptq.gptq_quantize(W, acc.H, 4, 32).dequantize(), acc)
    awq_error = relative(W, awq.awq_quantize(W, None, 4, 32, mean_abs=acc.mean_abs, gram=acc.H / 2)
                         .effective_weight(), acc)
    assert gptq_error < 0.9 * rtn_error
    assert awq_error < rtn_error


@pytest.mark.parametrize(("bits", "group_size", "mapping"), [
    (4, 32, Mapping.ASYMMETRIC), (4, "channel", Mapping.ASYMMETRIC), (4, "tensor", Mapping.ASYMMETRIC),
    (8, "channel", Mapping.ASYMMETRIC), (8, 64, Mapping.SYMMETRIC), (4, 128, Mapping.SYMMETRIC)])
def test_rtn_model_bytes_match_the_formula_and_codes_match_the_quantizer(tiny, bits, group_size, mapping):
    model, _, _ = tiny
    report = qmodel.quantize_model(model, "rtn", bits=bits, group_size=group_size, mapping=mapping)
    layers = qmodel.linear_layers(model)
    assert report.layers == list(layers) and len(layers) == 4 * 7
    expected = sum(memory.weight_bytes(
        lin.weight.numel(), f"int{bits}",
        group_size={"channel": lin.in_features, "tensor": lin.weight.numel()}.get(group_size, group_size),
        scale_dtype="fp16", zero_points=mapping is Mapping.ASYMMETRIC) for lin in layers.values())
    assert report.bytes_after == expected
    assert report.bytes_before == 4 * report.n_params == 4 * sum(lin.weight.numel() for lin in layers.values())
    for name, lin in list(layers.items())[:7]:
        q = report.model.get_submodule(name)
        assert isinstance(q, qmodel.QuantizedLinear)
        assert q.weight_nbytes() == qmodel.formula_bytes(lin.out_features, lin.in_features, bits, group_size, mapping)
        codes, qparams = qmodel.rtn_quantize(lin.weight.detach(), bits, group_size, mapping=mapping)
        assert torch.equal(q.codes().to(torch.int32), codes.to(torch.int32))
        assert torch.equal(q.scales, torch.as_tensor(qparams.scale).to(torch.float16))
    assert isinstance(model.get_submodule("model.layers.0.mlp.up_proj"), nn.Linear)   # the original is untouched


def test_int4_is_a_bit_more_than_a_quarter_of_fp16(tiny):
    report = qmodel.quantize_model(tiny[0], "rtn", bits=4, group_size=128)
    assert report.bits_per_weight == pytest.approx(qmodel.bits_per_weight(4, 128)) == pytest.approx(4 + 20 / 128)
    assert report.bytes_after == pytest.approx(memory.weight_bytes(report.n_params, "fp16") * 4.15625 / 16)


@pytest.fixture(scope="module")
def quantized(tiny):
    """The small model quantized once per method (GPTQ and AWQ take a few seconds each)."""
    model, calibration, _ = tiny
    return {"rtn": qmodel.quantize_model(model, "rtn", bits=4, group_size=32),
            "gptq": qmodel.quantize_model(model, "gptq", bits=4, group_size=32, calibration=calibration),
            "awq": qmodel.quantize_model(model, "awq", bits=4, group_size=32, calibration=calibration),
            "int8": qmodel.quantize_model(model, "rtn", bits=8, group_size="channel")}


@pytest.mark.parametrize(("method", "tolerance"), [("int8", 0.03), ("rtn", 0.3), ("gptq", 0.25), ("awq", 0.25)])
def test_quantized_forward_stays_close_to_float(tiny, quantized, method, tolerance):
    model, _, held = tiny
    report = quantized[method]
    batch = held[: 4 * 64].view(4, 64)
    with torch.no_grad():
        reference = model(input_ids=batch).logits
        ours = report.model(input_ids=batch).logits
    assert float(torch.linalg.norm(ours - reference) / torch.linalg.norm(reference)) < tolerance
    assert smallmodel.perplexity(report.model, held) < 1.25 * smallmodel.perplexity(model, held)


def test_gptq_and_awq_models_have_the_rtn_format(quantized):
    rtn = quantized["rtn"]
    for method in ("gptq", "awq"):
        report = quantized[method]
        assert report.layers == rtn.layers and report.bytes_after == rtn.bytes_after
        assert all(isinstance(report.model.get_submodule(n), qmodel.QuantizedLinear) for n in report.layers)
    alphas = [d["awq_alpha"] for d in quantized["awq"].details.values()]
    # o_proj under grouped-query attention has nowhere to fold 1/s: it is rounded unscaled.
    assert [a is None for a in alphas] == ["o_proj" in n for n in quantized["awq"].details]
    assert all(0 <= a < 1 for a in alphas if a is not None)


def test_quantized_linear_forward_is_dequantize_then_matmul(tiny):
    lin = tiny[0].get_submodule("model.layers.1.mlp.gate_proj")
    codes, qparams = qmodel.rtn_quantize(lin.weight.detach(), 4, 64)
    layer = qmodel.QuantizedLinear.from_codes(lin, codes, qparams)
    x = torch.randn(3, 5, lin.in_features)
    W_hat = quant.dequantize(codes, qparams, dtype=torch.float32)
    torch.testing.assert_close(layer(x), x @ layer.dequantized_weight().T)
    torch.testing.assert_close(layer.dequantized_weight(), W_hat, rtol=2e-3, atol=1e-6)   # FP16 scales
    assert layer.qweight.dtype == torch.uint8 and layer.qweight.shape == (lin.out_features, lin.in_features // 2)


def test_perplexity_and_calibration_are_well_defined(tiny):
    model, calibration, held = tiny
    ppl = smallmodel.perplexity(model, held)
    assert 1 < ppl < model.config.vocab_size
    again = smallmodel.calibration_batch(smallmodel.encode(smallmodel.load()[1], smallmodel.calibration_text()),
                                         n_samples=16, seq_len=64)
    assert torch.equal(again, calibration) and calibration.shape == (16, 64)
    with pytest.raises(ValueError, match="seq_len"):
        smallmodel.perplexity(model, held, seq_len=512)
    with pytest.raises(ValueError, match="fewer than one window"):
        smallmodel.perplexity(model, held[:10])
    with pytest.raises(ValueError, match="1-D"):
        smallmodel.perplexity(model, held.float())


def test_bad_input(tiny):
    model, calibration, _ = tiny
    with pytest.raises(ValueError, match="no nn.Linear"):
        qmodel.quantize_model(nn.Sequential(nn.ReLU()), "rtn")
    with pytest.raises(TypeError, match="nn.Module"):
        qmodel.quantize_model("llama", "rtn")
    with pytest.raises(ValueError, match="method"):
        qmodel.quantize_model(model, "smoothquant")
    with pytest.raises(ValueError, match="bits"):
        qmodel.quantize_model(model, "rtn", bits=3)
    with pytest.raises(ValueError, match="group_size 96 must divide the length 256 .* has in_features 256"):
        qmodel.quantize_model(model, "rtn", group_size=96)
    with pytest.raises(ValueError, match="group_size"):
        qmodel.quantize_model(model, "rtn", group_size=0)
    with pytest.raises(ValueError, match="'rtn' only"):
        qmodel.quantize_model(model, "gptq", group_size="tensor", calibration=calibration)
    with pytest.raises(ValueError, match="no calibration"):
        qmodel.quantize_model(model, "rtn", calibration=calibration)
    with pytest.raises(ValueError, match="need calibration"):
        qmodel.quantize_model(model, "gptq")
    with pytest.raises(ValueError, match="shape"):
        qmodel.quantize_model(model, "awq", calibration=calibration[0])
    with pytest.raises(TypeError, match="integer token ids"):
        qmodel.quantize_model(model, "awq", calibration=calibration.float())
    with pytest.raises(ValueError, match="lie in"):
        qmodel.quantize_model(model, "gptq", calibration=calibration + model.config.vocab_size)
    with pytest.raises(ValueError, match="no nn.ModuleList"):
        qmodel.quantize_model(nn.Sequential(nn.Linear(8, 8)), "gptq", group_size=8,
                              calibration=torch.zeros(2, 4, dtype=torch.long))
    lin = nn.Linear(7, 4)
    codes, qparams = qmodel.rtn_quantize(lin.weight.detach(), 4, "channel")
    with pytest.raises(ValueError, match="even"):
        qmodel.QuantizedLinear.from_codes(lin, codes, qparams)
    with pytest.raises(ValueError, match="shape"):
        qmodel.QuantizedLinear.from_codes(nn.Linear(8, 4), codes, qparams)


def test_a_scale_above_fp16_is_refused_once_naming_the_layer(monkeypatch):
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    with torch.no_grad():
        model[1].weight.fill_(1e6).mul_(torch.arange(32.0).view(4, 8))   # row 3 spans 0..3.1e7: a scale of 3.1e7 / 15
    checked = []
    check = qmodel.check_fp16_scales
    monkeypatch.setattr(qmodel, "check_fp16_scales", lambda scale, layer=None: checked.append(layer) or
                        check(scale, layer))
    with pytest.raises(ValueError, match="weights of layer 1 need a scale of 2.067e[+]06, above FP16"):
        qmodel.quantize_model(model, "rtn", bits=4, group_size="channel")
    assert checked == ["0", "1"]       # each layer's scales are checked once, by the name the model gives it


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
@pytest.mark.parametrize("group_size", ["tensor", "channel", 32])
def test_rtn_grid_contains_zero_so_one_signed_weights_do_not_saturate(group_size, seed):
    """All-negative weights: RTN's grid (quant.weight_qparams) reaches 0, every weight is within s/2."""
    W = -(torch.rand(16, 64, generator=torch.Generator().manual_seed(seed)) + 0.5)
    codes, qparams = qmodel.rtn_quantize(W, 4, group_size)
    assert int(qparams.zero_point.min()) >= 0 and int(qparams.zero_point.max()) <= 15
    error = (W - quant.dequantize(codes, qparams)).abs()
    if group_size == "tensor":
        step = qparams.scale
    elif group_size == "channel":
        step = qparams.scale.unsqueeze(1)
    else:
        step = qparams.scale.repeat_interleave(group_size, dim=1)
    assert bool((error <= step / 2 * (1 + 1e-5)).all())


def test_bits_per_weight_counts_what_memory_counts():
    assert qmodel.bits_per_weight(4, 128) == 4 + (16 + 4) / 128
    assert qmodel.bits_per_weight(4, 128, zero_points=False) == 4 + 16 / 128
    assert qmodel.bits_per_weight(3, 128) == 3 + (16 + 3) / 128      # a width memory's dtypes cannot name
    assert qmodel.bits_per_weight(4, 64, scale_bits=32) == 4 + (32 + 4) / 64
    n = 4096 * 128
    assert qmodel.bits_per_weight(8, 128) == 8 * memory.weight_bytes(n, "int8", group_size=128) / n
    assert qmodel.formula_bytes(64, 128, 3, 32) == 64 * 128 * 3 // 8 + (64 * 128 // 32) * (16 + 3) // 8
    assert qmodel.formula_bytes(64, 128, 4, "channel", Mapping.SYMMETRIC) == memory.weight_bytes(
        64 * 128, "int4", group_size=128, zero_points=False)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: qmodel.bits_per_weight(4, 0), ValueError, "group_size"),
    (lambda: qmodel.bits_per_weight(4, -128), ValueError, "group_size"),
    (lambda: qmodel.bits_per_weight(0, 128), ValueError, "bits"),
    (lambda: qmodel.bits_per_weight(4, 128.0), TypeError, "group_size"),
    (lambda: qmodel.bits_per_weight(4, 128, scale_bits=-16), ValueError, "scale_bits"),
    (lambda: qmodel.bits_per_weight(4, 128, zero_points="yes"), TypeError, "zero_points"),
    (lambda: qmodel.formula_bytes(0, 128, 4, 32), ValueError, "out_features"),
    (lambda: qmodel.formula_bytes(64, 128, -4, 32), ValueError, "bits"),
])
def test_bits_per_weight_and_formula_bytes_refuse_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
