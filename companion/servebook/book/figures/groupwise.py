"""Figures of the GPTQ and AWQ chapter: outliers against grid granularity, and the small model measured.

The synthetic matrices are seeded; the small-model figures read the cached results of
:func:`servebook.book.experiments.perplexity_table` and :func:`servebook.book.experiments.layer_errors`
(shipped in ``servebook/data/experiments``).
"""

from __future__ import annotations

import matplotlib
import matplotlib.ticker
import numpy as np
from matplotlib.figure import Figure

from .. import fmt
from ..scenarios import OUTLIER_KINDS, planted_outliers, relative_error
from . import _style

GRANULARITIES = ("tensor", "channel", 256, 128, 64, 32)
# Methods take series colours: orange and teal mean weights and KV cache everywhere in the book.
METHOD_COLOURS = {"fp32": _style.MUTED, "rtn": _style.SEQUENCE[2], "gptq": _style.ACCENT, "awq": _style.SEQUENCE[3]}


def _granularity_label(granularity) -> str:
    return f"g{granularity}" if isinstance(granularity, int) else f"per {granularity}"


def groupwise_outliers(bits: int = 4, granularities: tuple = GRANULARITIES, factor: float = 20.0,
                       n_outliers: int = 4) -> Figure:
    """INT4 relative error against grid granularity, for a clean matrix and for planted outlier rows/columns."""
    fig, ax = _style.new_figure(7.0, 3.6)
    x = np.arange(len(granularities))
    labels = {"none": "no outliers", "rows": f"{n_outliers} outlier rows (x{factor:g})",
              "columns": f"{n_outliers} outlier columns (x{factor:g})"}
    colours = {"none": _style.MUTED, "rows": _style.SEQUENCE[3], "columns": _style.WASTE}
    with matplotlib.rc_context(_style.RC):
        for kind in OUTLIER_KINDS:
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


def gptq_awq_perplexity(table: list[dict] | None = None, low_bits: list[dict] | None = None) -> Figure:
    """Held-out perplexity of the tiny Llama: the chapter's INT8/INT4 table, and 3- and 2-bit (simulated)."""
    from ..experiments import LOW_BIT_ROWS, perplexity_table, shown_perplexity

    if table is None:
        table = perplexity_table()
    if low_bits is None:
        low_bits = perplexity_table(LOW_BIT_ROWS, name="perplexity-low-bits")
    fp32 = next(row["perplexity"] for row in table if row["method"] == "fp32")
    panels = (("INT8 and INT4 (packed)", table), ("3 and 2 bits, g128 (simulated)", low_bits))
    heights = [len(rows) for _, rows in panels]
    fig, axes = _style.new_figure(7.4, 0.3 * sum(heights) + 1.6, nrows=2, height_ratios=heights, sharex=True)
    top = max(row["perplexity"] for _, rows in panels for row in rows)
    with matplotlib.rc_context(_style.RC):
        for ax, (title, rows) in zip(axes, panels, strict=True):
            y = np.arange(len(rows))[::-1]
            values = [row["perplexity"] for row in rows]
            ax.barh(y, values, color=[METHOD_COLOURS[row["method"]] for row in rows], height=0.65)
            ax.axvline(fp32, color=_style.MUTED, linestyle="--", linewidth=1)
            for yy, row in zip(y, rows, strict=True):
                note = "" if row["method"] == "fp32" else f"  {fmt.change(row['perplexity'], fp32)}"
                ax.text(row["perplexity"], yy, f" {shown_perplexity(row['perplexity'])}{note}", va="center",
                        fontsize=8)
            ax.set_yticks(y, [row["label"] for row in rows], fontsize=8)
            ax.set_title(title, fontsize=9, loc="left")
            ax.grid(axis="y", visible=False)
        axes[-1].set_xlim(fp32 * 0.97, top * 1.06)
        axes[-1].set_xlabel("held-out perplexity (dashed: FP32; % change against FP32)")
        fig.suptitle("The tiny Llama on unseen Python docs:\nINT4 costs little; at 2 bits GPTQ keeps the model")
    return fig


def gptq_awq_layer_errors(rows: list[dict] | None = None, group_size: int = 128) -> Figure:
    """Relative output error of each linear layer of the tiny Llama: RTN, GPTQ and AWQ at INT4, same groups."""
    if rows is None:
        from ..experiments import layer_errors

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
        ax.set_xticks(x, names, rotation=90, fontsize=8)
        ax.set_ylabel("output error ||X (W - W_hat)^T|| / ||X W^T|| (%)", fontsize=9)
        ax.set_title(f"Every layer, INT4 g{group_size}, on held-out text:\n"
                     "GPTQ far below round-to-nearest, AWQ about level with it")
        ax.legend(loc="upper left", ncols=3)
        ax.grid(axis="x", visible=False)
    return fig


FIGURES = {
    "groupwise-outliers": groupwise_outliers,
    "gptq-awq-perplexity": gptq_awq_perplexity,
    "gptq-awq-layer-errors": gptq_awq_layer_errors,
}
