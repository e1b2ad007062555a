"""Chapter 06's scenarios: a weight matrix with planted outliers."""

from __future__ import annotations

import torch

from ... import quant
from ...checks import choice

OUTLIER_KINDS = ("none", "rows", "columns")
OUTLIER_SHAPE = (256, 1024)   # out_features, in_features
OUTLIER_COUNT = 4             # planted rows or columns
OUTLIER_FACTOR = 20.0         # how much larger than the rest they are
WEIGHT_STD = 0.02             # of the Gaussian weights around them


def planted_outliers(kind: str = "columns", out_features: int = OUTLIER_SHAPE[0],
                     in_features: int = OUTLIER_SHAPE[1], n_outliers: int = OUTLIER_COUNT,
                     factor: float = OUTLIER_FACTOR, seed: int = 0) -> torch.Tensor:
    """A Gaussian weight (std ``WEIGHT_STD``) with ``n_outliers`` output rows or input columns ``factor``
    times larger.

    ``kind``: ``"none"`` (clean), ``"rows"`` (outlier output channels) or ``"columns"`` (outlier input
    channels, the pattern LLM weights and activations show).
    """
    choice("kind", kind, OUTLIER_KINDS)
    generator = torch.Generator().manual_seed(seed)
    W = torch.randn(out_features, in_features, generator=generator) * WEIGHT_STD
    if kind == "rows":
        W[torch.randperm(out_features, generator=generator)[:n_outliers], :] *= factor
    elif kind == "columns":
        W[:, torch.randperm(in_features, generator=generator)[:n_outliers]] *= factor
    return W


def relative_error(weight: torch.Tensor, bits: int, granularity) -> float:
    """``||W - W_hat|| / ||W||`` (Frobenius) after round-to-nearest per tensor, per channel or per group."""
    if granularity == "tensor":
        qparams = quant.choose_qparams(weight, bits)
    elif granularity == "channel":
        qparams = quant.choose_qparams(weight, bits, axis=0)
    else:
        qparams = quant.choose_qparams(weight, bits, group_size=granularity)
    return quant.relative_error(weight, qparams)
