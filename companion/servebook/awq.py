"""AWQ: scale up the weights that meet large activations before rounding them, and undo it on the input.

AWQ [Lin et al., 2024] starts from an observation: a weight's rounding error
reaches the output multiplied by its input, so the few input channels that carry
large activations matter most.  For any positive per-input-channel ``s``,
``W x = (W diag(s)) (x / s)`` exactly; quantizing ``W diag(s)`` instead of ``W``
shrinks the relative rounding error of the columns with ``s > 1``.  The factor
is a power of the channel's mean activation magnitude,

    s = mean|x|^alpha  (normalised so that max(s) * min(s) = 1),

with ``alpha`` searched on a grid of ``grid`` values in [0, 1) to minimise the
layer's output error on calibration data.  ``alpha = 0`` is plain round-to-nearest,
so the search can only do as well or better on the data it sees.  The weights are
then quantized group-wise, round to nearest, in :mod:`servebook.quant`'s format, on the grids of
:func:`servebook.quant.weight_qparams` (range widened to contain 0; the reference code's
``pseudo_quantize_tensor`` clips the zero point instead, and also searches a clipping range, which
this module leaves out); ``1 / s`` must be folded into whatever produces the input (the RMSNorm before
q/k/v, the up projection before down): :mod:`servebook.qmodel` does that.

The output error is measured as ``||X (W - W_hat)^T||^2 / n = tr(E G E^T)`` with the
Gram matrix ``G = X^T X / n`` (in x in): the same statistic GPTQ's Hessian is made of,
and far cheaper than pushing every token through every candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import quant
from .checks import group_size as check_group_size
from .checks import interval, member, whole
from .gptq import HessianAccumulator, _check_matrix, one_thread_on_cpu
from .quant import Mapping, QParams, Rounding

__all__ = ["AWQResult", "activation_scale", "awq_scales", "output_error", "relative_output_error", "search_scale",
           "awq_quantize"]

DEFAULT_GRID = 20     # the AWQ paper's grid size for alpha
SCALE_FLOOR = 1e-4    # a dead channel (mean |x| = 0) keeps a finite, tiny scale


def activation_scale(x: torch.Tensor) -> torch.Tensor:
    """``mean |x|`` per input channel, over every token of ``x`` (..., in_features)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (..., in_features), got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., in_features) (tokens x in_features), got {tuple(x.shape)}")
    acc = HessianAccumulator(x.shape[-1])
    acc.add(x)
    return acc.mean_abs


def awq_scales(mean_abs: torch.Tensor, alpha: float) -> torch.Tensor:
    """``s = mean|x|^alpha``, floored at 1e-4 and normalised so that ``max(s) * min(s) = 1``."""
    if not isinstance(mean_abs, torch.Tensor) or mean_abs.ndim != 1:
        raise ValueError("mean_abs must be a 1-D torch.Tensor, one value per input channel")
    if not bool(torch.isfinite(mean_abs).all()) or bool((mean_abs < 0).any()):
        raise ValueError("mean_abs must be finite and non-negative")
    alpha = interval("alpha", alpha, 0, 1)
    s = mean_abs.float().pow(alpha).clamp(min=SCALE_FLOOR)
    # Centre the scales on 1 (geometrically): the grid then stretches some columns and shrinks others.
    return s / torch.sqrt(s.max() * s.min())


def output_error(weight: torch.Tensor, weight_hat: torch.Tensor, gram: torch.Tensor) -> float:
    """Mean squared output error per token, ``tr((W - W_hat) G (W - W_hat)^T)`` with ``G = X^T X / n``."""
    E = (weight.float() - weight_hat.float())
    return float(((E @ gram.float()) * E).sum())


def relative_output_error(weight: torch.Tensor, weight_hat: torch.Tensor, gram: torch.Tensor) -> float:
    """``||X (W - W_hat)^T|| / ||X W^T||`` from ``G = X^T X / n``: the error a layer's outputs carry,
    as a share of the outputs themselves (the measure the GPTQ and AWQ chapter compares methods by)."""
    return math.sqrt(output_error(weight, weight_hat, gram) / output_error(weight, torch.zeros_like(weight), gram))


def _fake_rtn(weight: torch.Tensor, bits: int, group_size: int | None, mapping: Mapping, rounding) -> torch.Tensor:
    return quant.fake_quantize(weight, quant.weight_qparams(weight, bits, group_size, mapping, rounding),
                               rounding)


def search_scale(weights, mean_abs: torch.Tensor, gram: torch.Tensor, bits: int = 4,
                 group_size: int | None = 128, *, mapping: Mapping | str = Mapping.ASYMMETRIC,
                 grid: int = DEFAULT_GRID, rounding: Rounding | str = Rounding.HALF_UP
                 ) -> tuple[torch.Tensor, float, tuple[tuple[float, float], ...]]:
    """The ``s`` (and its ``alpha``) that minimise the summed output error of ``weights`` sharing one input.

    ``weights``: one (out x in) matrix or a list of them (q, k and v read the same input).
    Returns ``(s, alpha, ((alpha, error), ...))`` over the grid ``alpha = 0, 1/grid, ..., (grid-1)/grid``.
    ``rounding`` defaults to ``HALF_UP`` (the book's convention); the reference code's ``torch.round``
    is ``HALF_EVEN``.
    """
    weights = [weights] if isinstance(weights, torch.Tensor) else list(weights)
    if not weights:
        raise ValueError("weights must hold at least one weight matrix")
    in_features = _check_matrix(weights[0], "weights[0]").shape[1]
    for k, w in enumerate(weights):
        _check_matrix(w, f"weights[{k}]")
        if w.shape[1] != in_features:
            raise ValueError(f"weights[{k}] has {w.shape[1]} input features; all must share {in_features}")
    if not isinstance(mean_abs, torch.Tensor) or mean_abs.shape != (in_features,):
        raise ValueError(f"mean_abs must have shape ({in_features},), one value per input channel")
    if not isinstance(gram, torch.Tensor) or gram.shape != (in_features, in_features):
        raise ValueError(f"gram must have shape ({in_features}, {in_features})")
    mapping = member("mapping", mapping, Mapping)
    quant.qrange(bits, mapping)
    group_size = check_group_size(group_size, in_features)
    grid = whole("grid", grid)

    history = []
    best = (float("inf"), 0.0, None)
    with one_thread_on_cpu(weights[0].device):
        for step in range(grid):
            alpha = step / grid
            s = awq_scales(mean_abs, alpha)
            error = sum(output_error(w, _fake_rtn(w.float() * s, bits, group_size, mapping, rounding) / s, gram)
                        for w in weights)
            history.append((alpha, error))
            if error < best[0]:
                best = (error, alpha, s)
    return best[2], best[1], tuple(history)


@dataclass(frozen=True)
class AWQResult:
    """Codes and grid of the *scaled* weight ``W diag(s)``, and the ``s`` the input must be divided by."""

    codes: torch.Tensor          # (out_features, in_features), integer codes of W * s
    qparams: QParams             # quant's format, group-wise (out, in // g) or per output row (out,)
    input_scale: torch.Tensor    # s, (in_features,): the layer computes W_hat_s (x / s)
    alpha: float
    history: tuple[tuple[float, float], ...]   # (alpha, output error) over the grid

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        """The stored, scaled weight ``W_hat_s`` (what a kernel multiplies ``x / s`` by)."""
        return quant.dequantize(self.codes, self.qparams, dtype=dtype)

    def effective_weight(self, dtype=torch.float32) -> torch.Tensor:
        """``W_hat_s diag(1/s)``: the weight the unscaled input effectively meets."""
        return self.dequantize(dtype) / self.input_scale.to(dtype)


def awq_quantize(weight: torch.Tensor, x: torch.Tensor | None = None, bits: int = 4,
                 group_size: int | None = 128, *, mean_abs: torch.Tensor | None = None,
                 gram: torch.Tensor | None = None, mapping: Mapping | str = Mapping.ASYMMETRIC,
                 grid: int = DEFAULT_GRID, rounding: Rounding | str = Rounding.HALF_UP) -> AWQResult:
    """AWQ for one linear layer: search ``s`` on its inputs, then round ``W diag(s)`` to nearest, group-wise.

    Pass the calibration activations ``x`` (..., in_features), or their statistics
    ``mean_abs`` (in,) and ``gram = X^T X / n`` (in x in) as :class:`~servebook.gptq.HessianAccumulator`
    collects them.

    The grid is :func:`servebook.quant.weight_qparams` (its range always contains 0).  ``rounding``
    defaults to :attr:`~servebook.quant.Rounding.HALF_UP`, the book's convention; the reference
    code rounds with ``torch.round`` (ties to even): pass ``Rounding.HALF_EVEN`` to match it.
    """
    weight = _check_matrix(weight, "weight")
    if x is not None:
        if mean_abs is not None or gram is not None:
            raise ValueError("pass either x or (mean_abs, gram), not both")
        acc = HessianAccumulator(weight.shape[1], device=weight.device)
        acc.add(x)
        mean_abs, gram = acc.mean_abs, acc.H / 2
    elif mean_abs is None or gram is None:
        raise ValueError("awq_quantize needs calibration activations x, or both mean_abs and gram")
    s, alpha, history = search_scale(weight, mean_abs, gram, bits, group_size, mapping=mapping, grid=grid,
                                     rounding=rounding)
    mapping = member("mapping", mapping, Mapping)
    scaled = weight.detach().float() * s
    qparams = quant.weight_qparams(scaled, bits, group_size, mapping, rounding)
    codes = quant.quantize(scaled, qparams, rounding)
    return AWQResult(codes, qparams, s, alpha, history)
