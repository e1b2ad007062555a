"""Figures of the GPTQ and AWQ chapter: outliers against grid granularity, and the small model measured.

The synthetic matrices are seeded; the small-model figures read the cached results of
:func:`servebook.smallmodel.perplexity_table` and :func:`servebook.smallmodel.layer_errors`
(computed on first use, then read from ``servebook/data/cache``).
"""

from __future__ import annotations

import matplotlib
import matplotlib.ticker
import numpy as np
import torch
from matplotlib.figure import Figure

from .. import quant
from . import _style

GRANULARITIES = ("tensor", "channel", 256, 128, 64, 32)
KINDS = ("none", "rows", "columns")
METHOD_COLOURS = {"fp32": _style.MUTED, "rtn": _style.WEIGHTS, "gptq": _style.ACCENT, "awq": _style.KV}


def planted_outliers(kind: str = "columns", out_features: int = 256, in_features: int = 1024,
                     n_outliers: int = 4, factor: float = 20.0, seed: int = 0) -> torch.Tensor:
    """A Gaussian weight (std 0.02) with ``n_outliers`` output rows or input columns ``factor`` times larger.

    ``kind``: ``"none"`` (clean), ``"rows"`` (outlier output channels) or ``"columns"`` (outlier input
    channels, the pattern LLM weights and activations show).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
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
    return float(torch.linalg.matrix_norm(weight - quant.fake_quantize(weight, qparams))
                 / torch.linalg.matrix_norm(weight))


def _granularity_label(granularity) -> str:
    return f"g{granularity}" if isinstance(granularity, int) else f"per {granularity}"


def groupwise_outliers(bits: int = 4, granularities: tuple = GRANULARITIES, factor: float = 20.0,
                       n_outliers: int = 4) -> Figure:
    """INT4 relative error against grid granularity, for a clean matrix and for planted outlier rows/columns."""
    fig, ax = _style.new_figure(7.0, 3.6)
    x = np.arange(len(granularities))
    labels = {"none": "no outliers", "rows": f"{n_outliers} outlier rows (x{factor:g})",
              "columns": f"{n_outliers} outlier columns (x{factor:g})"}
    colours = {"none": _style.MUTED, "rows": _style.WEIGHTS, "columns": _style.WASTE}
    with matplotlib.rc_context(_style.RC):
        for kind in KINDS:
            W = planted_outliers(kind, factor=factor, n_outliers=n_outliers)
            errors = [100 * relative_error(W, bits, g) for g in granularities]
            ax.plot(x, errors, "o-", color=colours[kind], label=labels[kind])
        ax.set_xticks(x, [_granularity_label(g) for g in granularities])
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([5, 10, 20, 50, 100]))
        ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("one scale and zero point per ...  (256 x 1024 weight, Gaussian, std 0.02)")
        ax.set_ylabel(f"INT{bits} error ||W - W_hat|| / ||W|| (%)")
        ax.set_title("Outlier rows need per-channel grids; outlier columns need groups")
        ax.legend(loc="upper right")
    return fig


def gptq_awq_perplexity(table: list[dict] | None = None) -> Figure:
    """Held-out perplexity of the tiny Llama under each quantization of the chapter's table."""
    if table is None:
        from ..smallmodel import perplexity_table

        table = perplexity_table()
    labels = [row["label"] for row in table]
    values = np.array([row["perplexity"] for row in table])
    fp32 = next(row["perplexity"] for row in table if row["method"] == "fp32")
    fig, ax = _style.new_figure(7.0, 0.32 * len(table) + 1.2)
    y = np.arange(len(table))[::-1]
    with matplotlib.rc_context(_style.RC):
        colours = [METHOD_COLOURS[row["method"]] for row in table]
        ax.barh(y, values, color=colours, height=0.65)
        ax.axvline(fp32, color=_style.MUTED, linestyle="--", linewidth=1)
        for yy, value, row in zip(y, values, table, strict=True):
            ax.text(value, yy, f" {value:.2f}  ({row['bits_per_weight']:.2f} bits/weight)", va="center", fontsize=8)
        ax.set_yticks(y, labels)
        ax.set_xscale("log")
        ax.set_xlim(fp32 * 0.8, values.max() * 4)
        ax.set_xlabel("held-out perplexity (log scale; dashed: FP32)")
        ax.set_title("The tiny Llama on unseen Python docs: groups, GPTQ and AWQ close the INT4 gap")
        ax.grid(axis="y", visible=False)
    return fig


def gptq_awq_layer_errors(rows: list[dict] | None = None, group_size: int = 128) -> Figure:
    """Relative output error of each linear layer of the tiny Llama: RTN, GPTQ and AWQ at INT4, same groups."""
    if rows is None:
        from ..smallmodel import layer_errors

        rows = layer_errors(group_size=group_size)
    names = [row["layer"].replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
             .replace("_proj", "") for row in rows]
    x = np.arange(len(rows))
    width = 0.28
    fig, ax = _style.new_figure(7.6, 3.6)
    with matplotlib.rc_context(_style.RC):
        for k, method in enumerate(("rtn", "gptq", "awq")):
            ax.bar(x + (k - 1) * width, [100 * row[method] for row in rows], width, color=METHOD_COLOURS[method],
                   label=method.upper())
        ax.set_xticks(x, names, rotation=90, fontsize=7)
        ax.set_ylabel("||X (W - W_hat)^T|| / ||X W^T|| (%)")
        ax.set_title(f"Every layer, INT4 g{group_size}: GPTQ and AWQ below round-to-nearest")
        ax.legend(loc="upper left", ncols=3)
        ax.grid(axis="x", visible=False)
    return fig


FIGURES = {
    "groupwise-outliers": groupwise_outliers,
    "gptq-awq-perplexity": gptq_awq_perplexity,
    "gptq-awq-layer-errors": gptq_awq_layer_errors,
}
