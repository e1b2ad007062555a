"""Quantizing activations: W8A8 and FP8 linear layers, LLM.int8()'s decomposition, SmoothQuant's migration.

Weight-only schemes (W4A16, W8A16) dequantize the weights and multiply in 16 bits; W8A8 and FP8
quantize the layer's *input* too, so the product runs on the tensor cores' 8-bit rates.  An
activation is quantized on the fly (dynamic), with symmetric INT8 or FP8 E4M3 and one scale:

- per tensor: ``s = max |X| / 127`` over the whole batch of tokens;
- per token: ``s_t = max_j |X_tj| / 127`` for each token (row) ``t``.

Large language models have a few *outlier channels* (hidden dimensions ``j`` where ``|X_tj|`` is
10-100x the rest, in most tokens [Dettmers et al., 2022]); with one scale per token they set the step
for every other channel.  Two remedies, both here as fake quantization on a torch model:

- ``"llm_int8"`` (LLM.int8()): the input columns with any ``|X_tj| >= threshold`` (6.0 in the paper)
  are multiplied in 16 bits, the rest in INT8 (per token, weights per output channel);
- ``"smoothquant"`` (SmoothQuant [Xiao et al., 2023]): ``X W^T = (X / s)(W s)^T`` with
  ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` from calibration data, moving the outliers' range
  into the weights, then W8A8 per token.  Not the paper's placement: its reference code
  (``smoothquant/smooth.py``) smooths only the layers a norm feeds (q, k, v with one ``s`` shared
  from the largest of their weight columns; the first MLP layer), folding ``1 / s`` into the norm.
  Here every linear layer, ``o_proj`` and ``down_proj`` included, gets its own ``s`` and divides
  its input by it at run time.  :func:`plant_activation_outliers` cannot hurt it: planting scales
  ``X_j`` by ``f`` and ``W_j`` by ``1 / f``, so ``s_j`` becomes ``f s_j`` and the smoothed layer is
  the trained one's up to float rounding.

Weights are INT8 (or FP8) per output channel, symmetric, in every scheme.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from . import quant
from .checks import choice, interval, positive
from .quant import FP8Format

__all__ = ["SCHEMES", "ActQuantLinear", "quantize_activations", "input_absmax", "plant_activation_outliers",
           "outlier_ratio"]

SCHEMES = ("w8a16", "w8a8_tensor", "w8a8_token", "llm_int8", "smoothquant", "fp8")
LLM_INT8_THRESHOLD = 6.0
SMOOTHQUANT_ALPHA = 0.5


def _int8(x: torch.Tensor, axis: int | None) -> torch.Tensor:
    """Symmetric INT8 fake quantization of a 2-d float tensor: one scale per row (``axis=0``: a weight's
    output channel, an activation's token) or, with ``axis=None``, one for the whole tensor."""
    return quant.fake_quantize(x, quant.choose_qparams(x, 8, "symmetric", axis=axis), "half_even")


class ActQuantLinear(nn.Module):
    """A linear layer that quantizes its weight once and its input on every call (fake quantization)."""

    def __init__(self, linear: nn.Linear, scheme: str, smooth: torch.Tensor | None = None,
                 threshold: float = LLM_INT8_THRESHOLD):
        super().__init__()
        self.scheme, self.threshold = choice("scheme", scheme, SCHEMES), threshold
        weight = linear.weight.detach().float()
        self.smooth = None if smooth is None else smooth.float()
        if self.smooth is not None:
            weight = weight * self.smooth
        if scheme == "fp8":
            self.weight_hat = quant.fake_quantize_fp8(weight, quant.choose_fp8_scale(weight, axis=0))
        else:
            self.weight_hat = _int8(weight, axis=0)
        # LLM.int8() multiplies the outlier columns with the 16-bit weights (the paper's equation 2)
        self.weight = weight if scheme == "llm_int8" else None
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        self.outlier_columns = 0      # the most input columns LLM.int8() kept in 16 bits in one call

    def _input(self, x: torch.Tensor) -> torch.Tensor:
        if self.smooth is not None:
            x = x / self.smooth
        if self.scheme == "w8a16":
            return x
        if self.scheme == "w8a8_tensor":
            return _int8(x, axis=None)
        if self.scheme == "fp8":
            return quant.fake_quantize_fp8(x, quant.choose_fp8_scale(x, FP8Format.E4M3, axis=0))
        return _int8(x, axis=0)

    def _decomposed(self, x: torch.Tensor) -> torch.Tensor:
        """LLM.int8(): outlier columns (any ``|x| >= threshold``) in 16 bits, the rest in INT8."""
        outliers = x.abs().amax(0) >= self.threshold
        self.outlier_columns = max(self.outlier_columns, int(outliers.sum()))
        regular = nn.functional.linear(_int8(x.masked_fill(outliers, 0.0), axis=0), self.weight_hat)
        return regular + nn.functional.linear(x * outliers, self.weight, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()
        if self.scheme == "llm_int8":
            out = self._decomposed(rows)
        else:
            out = nn.functional.linear(self._input(rows), self.weight_hat, self.bias)
        return out.reshape(*x.shape[:-1], -1).to(x.dtype)


def _linears(model: nn.Module) -> dict[str, nn.Linear]:
    from .qmodel import linear_layers

    return linear_layers(model)


@torch.no_grad()
def input_absmax(model: nn.Module, calibration: torch.Tensor, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """``max_t |X_tj|`` of every quantizable linear layer's input, per input channel ``j``, over ``calibration``."""
    layers = _linears(model)
    found = {name: torch.zeros(layer.in_features) for name, layer in layers.items()}

    def hook(name):
        def record(module, args, out):
            found[name] = torch.maximum(found[name], args[0].detach().abs().reshape(-1, args[0].shape[-1])
                                        .amax(0).float().cpu())
        return record

    handles = [layer.register_forward_hook(hook(name)) for name, layer in layers.items()]
    try:
        for batch in calibration.split(batch_size):
            model(input_ids=batch, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return found


def outlier_ratio(absmax: torch.Tensor) -> float:
    """How far the largest channel stands out: ``max_j a_j / median_j a_j``."""
    return float(absmax.max() / absmax.median())


def smoothing_factors(absmax: torch.Tensor, weight: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant's ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` (1 where a channel is all zero)."""
    alpha = interval("alpha", alpha, 0.0, 1.0)
    w_max = weight.detach().float().abs().amax(0)
    s = absmax.clamp(min=1e-5) ** alpha / w_max.clamp(min=1e-5) ** (1 - alpha)
    return torch.where((absmax > 0) & (w_max > 0), s, torch.ones_like(s))


def quantize_activations(model: nn.Module, scheme: str, *, calibration: torch.Tensor | None = None,
                         alpha: float = SMOOTHQUANT_ALPHA, threshold: float = LLM_INT8_THRESHOLD) -> nn.Module:
    """A copy of ``model`` whose linear layers (not the output embedding) are :class:`ActQuantLinear`.

    ``scheme``: one of :data:`SCHEMES`.  ``"smoothquant"`` needs ``calibration`` token ids
    (n_samples x seq_len) to measure ``max |X_j|``; the others take none.
    """
    scheme = choice("scheme", scheme, SCHEMES)
    threshold = positive("threshold", threshold)
    if (scheme == "smoothquant") != (calibration is not None):
        raise ValueError("calibration token ids are needed by scheme 'smoothquant', and only by it")
    absmax = input_absmax(model, calibration) if scheme == "smoothquant" else {}
    model = copy.deepcopy(model)
    for name, linear in _linears(model).items():
        smooth = smoothing_factors(absmax[name], linear.weight, alpha) if absmax else None
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child,
                ActQuantLinear(linear, scheme, smooth, threshold))
    return model


@torch.no_grad()
def plant_activation_outliers(model: nn.Module, channels, factor: float) -> nn.Module:
    """A copy of a Llama-style ``model`` computing the same function, with outlier input channels.

    Each RMSNorm gain ``g_j`` of the ``channels`` is multiplied by ``factor`` and the matching input
    columns of the layers it feeds (q, k, v after ``input_layernorm``; gate, up after
    ``post_attention_layernorm``) divided by it: ``(g_j c) x_j (W_ij / c) = g_j x_j W_ij``.  The
    activations those layers read then carry ``factor``-times larger channels, as large models'
    do, while the model's outputs move only by float rounding.
    """
    factor = positive("factor", factor)
    model = copy.deepcopy(model)
    channels = torch.as_tensor(list(channels), dtype=torch.long)
    feeds = {"input_layernorm": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "post_attention_layernorm": ("mlp.gate_proj", "mlp.up_proj")}
    for layer in model.model.layers:
        for norm, linears in feeds.items():
            layer.get_submodule(norm).weight[channels] *= factor
            for name in linears:
                layer.get_submodule(name).weight[:, channels] /= factor
    return model
