"""AWQ: protects salient input channels, never loses to round-to-nearest on its own data, bad input."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from servebook import awq, gptq, quant
from servebook.quant import Mapping


def salient_inputs(n_tokens: int, in_features: int, n_salient: int, factor: float, seed: int) -> torch.Tensor:
    """Activations with a few channels ``factor`` times larger than the rest, as LLM activations have."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_tokens, in_features, generator=g)
    X[:, torch.randperm(in_features, generator=g)[:n_salient]] *= factor
    return X


def rtn(W, bits, group_size, mapping=Mapping.ASYMMETRIC):
    return quant.fake_quantize(W, quant.weight_qparams(W, bits, group_size, mapping))


def seeded_layer(seed: int):
    """A 64 x 128 weight, N(0, 0.05^2), and 1,024 tokens of inputs with 4 channels 20 times louder."""
    W = torch.randn(64, 128, generator=torch.Generator().manual_seed(seed)) * 0.05
    return W, salient_inputs(1024, 128, n_salient=4, factor=20.0, seed=seed + 1)


@pytest.fixture(scope="module")
def layer():
    return seeded_layer(0)


@pytest.mark.parametrize("group_size", [None, 64, 32])
def test_awq_beats_rtn_with_salient_channels(layer, group_size):
    W, X = layer
    result = awq.awq_quantize(W, X, 4, group_size)
    assert result.alpha > 0
    ours = gptq.layer_error(W, result.effective_weight(), X)
    assert ours < 0.8 * gptq.layer_error(W, rtn(W, 4, group_size), X)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), factor=st.floats(1.0, 30.0), group_size=st.sampled_from([None, 16, 32]))
def test_awq_never_worse_than_rtn_on_its_calibration_data(seed, factor, group_size):
    """alpha = 0 is plain round-to-nearest and is on the grid, so the search can only improve on it."""
    W = torch.randn(16, 64, generator=torch.Generator().manual_seed(seed))
    X = salient_inputs(256, 64, n_salient=2, factor=factor, seed=seed + 1)
    result = awq.awq_quantize(W, X, 4, group_size, grid=10)
    assert gptq.layer_error(W, result.effective_weight(), X) <= gptq.layer_error(W, rtn(W, 4, group_size), X) + 1e-6


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**31 - 2))
@pytest.mark.parametrize(("group_size", "mapping"), [(None, Mapping.ASYMMETRIC), (32, Mapping.SYMMETRIC)])
def test_alpha_zero_is_the_basic_quantizer(group_size, mapping, seed):
    W, X = seeded_layer(seed)
    result = awq.awq_quantize(W, X, 4, group_size, mapping=mapping, grid=1)   # the grid is {0}
    qparams = (quant.choose_qparams(W, 4, mapping, axis=0) if group_size is None
               else quant.choose_qparams(W, 4, mapping, group_size=group_size))
    assert result.alpha == 0
    assert torch.equal(result.input_scale, torch.ones(128))
    assert torch.equal(result.codes, quant.quantize(W, qparams))


def test_scales_are_centred_and_follow_activations():
    mean_abs = torch.tensor([0.5, 1.0, 2.0, 8.0])
    s = awq.awq_scales(mean_abs, 0.5)
    torch.testing.assert_close(s.max() * s.min(), torch.tensor(1.0))
    assert torch.all(s[1:] > s[:-1])                  # a busier channel gets a larger scale
    torch.testing.assert_close(s / s[0], (mean_abs / mean_abs[0]).sqrt())
    assert torch.equal(awq.awq_scales(mean_abs, 0.0), torch.ones(4))
    assert torch.isfinite(awq.awq_scales(torch.tensor([0.0, 1.0]), 1.0)).all()   # a dead channel


def test_result_format_and_effective_weight(layer):
    W, X = layer
    result = awq.awq_quantize(W, X, 4, 32)
    qp = result.qparams
    assert (qp.group_size, qp.axis) == (32, 1) and qp.scale.shape == (64, 4)
    torch.testing.assert_close(result.effective_weight(), quant.dequantize(result.codes, qp) / result.input_scale)
    # What a kernel computes, W_hat_s (x / s), is the effective weight applied to x.
    torch.testing.assert_close((X / result.input_scale) @ result.dequantize().T, X @ result.effective_weight().T,
                               rtol=1e-4, atol=1e-4)
    assert [a for a, _ in result.history] == [k / 20 for k in range(20)]
    assert result.alpha == min(result.history, key=lambda h: h[1])[0]


def test_statistics_path_equals_activations_path(layer):
    W, X = layer
    acc = gptq.HessianAccumulator(128)
    acc.add(X)
    a = awq.awq_quantize(W, X, 4, 32)
    b = awq.awq_quantize(W, None, 4, 32, mean_abs=acc.mean_abs, gram=acc.H / 2)
    assert a.alpha == b.alpha and torch.equal(a.codes, b.codes)
    torch.testing.assert_close(awq.activation_scale(X), X.abs().mean(0))


def test_output_error_is_the_layer_error(layer):
    W, X = layer
    W_hat = rtn(W, 4, 32)
    gram = X.T @ X / len(X)
    direct = ((X @ (W - W_hat).T) ** 2).sum() / len(X)
    assert awq.output_error(W, W_hat, gram) == pytest.approx(float(direct), rel=1e-4)


def test_bad_input(layer):
    W, X = layer
    with pytest.raises(ValueError, match="group_size"):
        awq.awq_quantize(W, X, 4, 48)
    with pytest.raises(ValueError, match=r"\(\.\.\., 128\)"):
        awq.awq_quantize(W, X[:, :100], 4, 32)
    with pytest.raises(ValueError, match="either x or"):
        awq.awq_quantize(W, X, 4, 32, mean_abs=X.abs().mean(0), gram=X.T @ X)
    with pytest.raises(ValueError, match="needs calibration"):
        awq.awq_quantize(W, None, 4, 32)
    with pytest.raises(ValueError, match="alpha"):
        awq.awq_scales(torch.ones(4), 1.5)
    with pytest.raises(ValueError, match="grid"):
        awq.awq_quantize(W, X, 4, 32, grid=0)
    with pytest.raises(ValueError, match="bits"):
        awq.awq_quantize(W, X, 0, 32)
    with pytest.raises(ValueError, match="share"):
        awq.search_scale([W, W[:, :64]], X.abs().mean(0), X.T @ X, 4, 32)


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 2))
@pytest.mark.parametrize("group_size", [None, 32])
def test_grid_contains_zero_so_one_signed_groups_do_not_saturate(group_size, seed):
    """All-positive weights: the scaled weight's grid reaches 0, its zero point is a code, nothing saturates."""
    W, X = seeded_layer(seed)
    W = W.abs() + 1.0
    result = awq.awq_quantize(W, X, 4, group_size)
    qp = result.qparams
    assert int(qp.zero_point.min()) >= qp.qmin and int(qp.zero_point.max()) <= qp.qmax
    scaled = W * result.input_scale
    expected = quant.weight_qparams(scaled, 4, group_size)
    assert torch.equal(qp.scale, expected.scale) and torch.equal(qp.zero_point, expected.zero_point)
    step = qp.scale.unsqueeze(1) if group_size is None else qp.scale.repeat_interleave(group_size, dim=1)
    assert bool(((scaled - result.dequantize()).abs() <= step / 2 * (1 + 1e-5)).all())
    # alpha = 0 of the search is plain RTN on the same grid
    assert result.history[0][1] == pytest.approx(awq.output_error(W, rtn(W, 4, group_size), X.T @ X / len(X)),
                                                 rel=1e-4)


def test_activation_scale_refuses_bad_input():
    with pytest.raises(TypeError, match="torch.Tensor"):
        awq.activation_scale([[1.0, 2.0]])
    with pytest.raises(ValueError, match="in_features"):
        awq.activation_scale(torch.ones(3))


def test_rounding_default_is_documented():
    for function in (awq.awq_quantize, awq.search_scale):
        assert "torch.round" in function.__doc__ and "HALF_EVEN" in function.__doc__
