"""GPTQ: beats round-to-nearest on the layer's output, agrees with it where the methods coincide, bad input."""

import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import awq, gptq, qmodel, quant, smallmodel
from servebook.quant import Mapping


def correlated_inputs(n_tokens: int, in_features: int, seed: int) -> torch.Tensor:
    """Activations whose channels are correlated (as in a real layer): X = Z A with a dense mixing A."""
    g = torch.Generator().manual_seed(seed)
    mixing = torch.randn(in_features, in_features, generator=g) / in_features**0.5 + torch.eye(in_features)
    return torch.randn(n_tokens, in_features, generator=g) @ mixing


def rtn(W: torch.Tensor, bits: int, group_size, mapping=Mapping.ASYMMETRIC) -> torch.Tensor:
    return quant.fake_quantize(W, quant.weight_qparams(W, bits, group_size, mapping))


def seeded_layer(seed: int, out_features: int = 32, in_features: int = 128):
    """A weight (out x in, N(0, 0.05^2)), correlated inputs (4 tokens per input feature) and their Hessian."""
    W = torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed)) * 0.05
    X = correlated_inputs(4 * in_features, in_features, seed=seed + 1)
    return W, X, gptq.hessian(X)


@pytest.fixture(scope="module")
def layer():
    return seeded_layer(0)


@pytest.mark.parametrize(("bits", "group_size", "act_order"),
                         [(4, None, False), (4, 64, False), (4, 32, False), (4, 32, True), (3, 64, True)])
def test_gptq_beats_rtn_on_a_seeded_layer(layer, group_size, act_order, bits):
    W, X, H = layer
    result = gptq.gptq_quantize(W, H, bits, group_size, act_order=act_order)
    ours = gptq.layer_error(W, result.dequantize(), X)
    baseline = gptq.layer_error(W, rtn(W, bits, group_size), X)
    assert ours < 0.8 * baseline


# GPTQ minimises the output error greedily, one column at a time, so on one layer it can lose to
# round-to-nearest: of 3,600 seeded layers of the shapes below (seeds 0-299, N(0, 1) weights, 4-bit),
# 25 (0.7 %) came out worse, by up to 16 %, nearly all of them a single group of 8 inputs.  On average
# it wins clearly: its error is 0.792 of RTN's over the 3,600, and the mean over 60 layers (5 seeds per
# shape) stays within 0.766..0.824 over 60 disjoint seed sets (sd 0.014).  Seeds 0-4 give 0.788;
# the bound 0.9 is eight standard deviations away.
LAYER_SHAPES = [(out, n_groups, group_size) for out in (8, 16) for n_groups in (1, 2, 3) for group_size in (8, 16)]


def test_gptq_beats_rtn_on_average_over_seeded_layers():
    ratios = []
    for seed in range(5):
        for out, n_groups, group_size in LAYER_SHAPES:
            in_features = n_groups * group_size
            W = torch.randn(out, in_features, generator=torch.Generator().manual_seed(seed))
            X = correlated_inputs(8 * in_features, in_features, seed + 1)
            result = gptq.gptq_quantize(W, gptq.hessian(X), 4, group_size)
            ratios.append(gptq.layer_error(W, result.dequantize(), X) / gptq.layer_error(W, rtn(W, 4, group_size), X))
    assert len(ratios) == 60
    assert statistics.mean(ratios) < 0.9


@pytest.fixture(scope="module")
def book_layers():
    """Every linear layer of the book's tiny Llama, with its activation statistics on the calibration text."""
    model, tokenizer = smallmodel.load("tiny-llama")
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               n_samples=16, seq_len=64)
    stats = smallmodel.layer_statistics(model, calibration)
    return {name: (layer.weight.detach(), stats[name]) for name, layer in qmodel.linear_layers(model).items()}


def test_gptq_beats_rtn_on_every_layer_of_the_book_model(book_layers):
    """On the 28 real layers GPTQ's output error is 0.37 of RTN's on average and 0.52 at worst
    (model.layers.3.mlp.down_proj), INT4 g128: far inside the bound."""
    assert len(book_layers) == 28
    for name, (W, acc) in book_layers.items():
        gram = acc.H / 2
        rtn_error = awq.relative_output_error(W, rtn(W, 4, 128), gram)
        gptq_error = awq.relative_output_error(W, gptq.gptq_quantize(W, acc.H, 4, 128).dequantize(), gram)
        assert gptq_error < 0.75 * rtn_error, name


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**31 - 2))
@pytest.mark.parametrize(("group_size", "mapping"),
                         [(None, Mapping.ASYMMETRIC), (32, Mapping.ASYMMETRIC), (64, Mapping.SYMMETRIC)])
def test_diagonal_hessian_gives_round_to_nearest_codes(group_size, mapping, seed):
    """Uncorrelated inputs leave no error to feed forward: GPTQ's codes are the basic quantizer's."""
    W, X, _ = seeded_layer(seed)
    H = torch.diag(torch.diag(gptq.hessian(X)))
    result = gptq.gptq_quantize(W, H, 4, group_size, mapping=mapping)
    qparams = quant.weight_qparams(W, 4, group_size, mapping)
    assert torch.equal(result.codes, quant.quantize(W, qparams))
    assert torch.equal(result.qparams.scale, qparams.scale)
    assert torch.equal(result.qparams.zero_point, qparams.zero_point)


def test_result_is_in_the_quantizers_format(layer):
    W, _, H = layer
    result = gptq.gptq_quantize(W, H, 4, 32)
    qp = result.qparams
    assert (qp.bits, qp.mapping, qp.axis, qp.group_size) == (4, Mapping.ASYMMETRIC, 1, 32)
    assert qp.scale.shape == qp.zero_point.shape == (32, 128 // 32)
    assert result.codes.shape == W.shape and not result.codes.is_floating_point()
    assert 0 <= int(result.codes.min()) and int(result.codes.max()) <= 15
    torch.testing.assert_close(result.dequantize(), quant.dequantize(result.codes, qp))
    per_row = gptq.gptq_quantize(W, H, 4, None)
    assert per_row.qparams.axis == 0 and per_row.qparams.scale.shape == (32,)


def test_block_size_changes_speed_not_result(layer):
    W, _, H = layer
    a = gptq.gptq_quantize(W, H, 4, 16, block_size=16)
    b = gptq.gptq_quantize(W, H, 4, 16, block_size=64)
    assert (a.codes == b.codes).float().mean() > 0.999
    torch.testing.assert_close(a.qparams.scale, b.qparams.scale, rtol=1e-4, atol=1e-6)


def test_act_order_keeps_contiguous_groups_from_original_weights(layer):
    W, _, H = layer
    result = gptq.gptq_quantize(W, H, 4, 64, act_order=True)
    static = quant.choose_qparams(W, 4, group_size=64)
    assert torch.equal(result.qparams.scale, static.scale)
    assert result.perm is not None and sorted(result.perm.tolist()) == list(range(128))


def test_dead_inputs_get_zero_weights(layer):
    W, X, _ = layer
    X = X.clone()
    X[:, :3] = 0
    result = gptq.gptq_quantize(W, gptq.hessian(X), 4, 32)
    assert torch.count_nonzero(result.dequantize()[:, :3]) == 0


def test_hessian_accumulates_batches_like_one(layer):
    _, X, H = layer
    acc = gptq.HessianAccumulator(128)
    for part in X.split(200):
        acc.add(part.view(-1, 2, 128) if len(part) % 2 == 0 else part)
    torch.testing.assert_close(acc.H, H, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(acc.mean_abs, X.abs().mean(0), rtol=1e-4, atol=1e-6)


def test_bad_input(layer):
    W, X, H = layer
    with pytest.raises(ValueError, match="group_size"):
        gptq.gptq_quantize(W, H, 4, 100)
    with pytest.raises(ValueError, match="H must be"):
        gptq.gptq_quantize(W, H[:64, :64], 4, 32)
    with pytest.raises(ValueError, match="2-D"):
        gptq.gptq_quantize(W[0], H, 4, 32)
    with pytest.raises(ValueError, match="bits"):
        gptq.gptq_quantize(W, H, 17, 32)
    with pytest.raises(ValueError, match="damp"):
        gptq.gptq_quantize(W, H, 4, 32, damp=0)
    with pytest.raises(ValueError, match="block_size"):
        gptq.gptq_quantize(W, H, 4, 64, block_size=48)
    with pytest.raises(ValueError, match="finite"):
        gptq.gptq_quantize(W * float("nan"), H, 4, 32)
    with pytest.raises(TypeError, match="torch.Tensor"):
        gptq.gptq_quantize(W.numpy(), H, 4, 32)
    with pytest.raises(ValueError, match="mapping"):
        gptq.gptq_quantize(W, H, 4, 32, mapping="sideways")
    with pytest.raises(ValueError, match="in_features"):
        gptq.HessianAccumulator(128).add(X[:, :10])
    with pytest.raises(ValueError, match="no activations"):
        _ = gptq.HessianAccumulator(8).H


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 2))
@pytest.mark.parametrize(("group_size", "act_order"), [(None, False), (32, False), (32, True)])
@pytest.mark.parametrize("shift", [2.0, -2.0])
def test_grid_contains_zero_so_one_signed_groups_do_not_saturate(group_size, act_order, shift, seed):
    """Rows whose weights are all positive (or all negative): the reference quantizer widens the range to 0,
    so the zero point stays a code and no weight is clipped (error <= s/2; a clipped grid is off by ~|shift|)."""
    W, X, _ = seeded_layer(seed)
    W = W + shift
    H = torch.diag(torch.diag(gptq.hessian(X)))   # no error feedback: each weight is only rounded
    result = gptq.gptq_quantize(W, H, 4, group_size, act_order=act_order)
    qp = result.qparams
    assert int(qp.zero_point.min()) >= qp.qmin and int(qp.zero_point.max()) <= qp.qmax
    expected = quant.weight_qparams(W, 4, group_size)
    assert torch.equal(qp.scale, expected.scale) and torch.equal(qp.zero_point, expected.zero_point)
    step = qp.scale.unsqueeze(1) if group_size is None else qp.scale.repeat_interleave(group_size, dim=1)
    assert bool(((W - result.dequantize()).abs() <= step / 2 + 1e-6).all())


def test_rounding_default_is_documented():
    """HALF_UP is the default; the reference's torch.round is half-even, and the docstring says so."""
    assert "torch.round" in gptq.gptq_quantize.__doc__ and "HALF_EVEN" in gptq.gptq_quantize.__doc__


def test_the_small_models_config_is_the_loaded_models():
    model, _ = smallmodel.load("tiny-llama")
    cfg = smallmodel.config("tiny-llama")
    loaded = {k: v for k, v in model.config.to_dict().items() if k != "dtype"}  # load() casts to float32
    assert {k: v for k, v in cfg.to_dict().items() if k != "dtype"} == loaded
    down = model.model.layers[0].mlp.down_proj
    assert (cfg.hidden_size, cfg.intermediate_size) == (down.out_features, down.in_features)
    with pytest.raises(TypeError, match="name must be"):
        smallmodel.config("")
