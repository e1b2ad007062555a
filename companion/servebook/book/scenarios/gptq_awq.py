"""Chapter 06's scenarios: a weight matrix with planted outliers."""

from __future__ import annotations

import torch

from ... import quant
from ...checks import choice

OUTLIER_KINDS = ("none", "rows", "columns")


def planted_outliers(kind: str = "columns", out_features: int = 256, in_features: int = 1024,
                     n_outliers: int = 4, factor: float = 20.0, seed: int = 0) -> torch.Tensor:
    """A Gaussian weight (std 0.02) with ``n_outliers`` output rows or input columns ``factor`` times larger.

    ``kind``: ``"none"`` (clean), ``"rows"`` (outlier output channels) or ``"columns"`` (outlier input
    channels, the pattern LLM weights and activations show).
    """
    choice("kind", kind, OUTLIER_KINDS)
    generator = torch.Generator().manual_seed(seed)
    W = torch.randn(out_features, in_features, generator=generator) * 0.02
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
