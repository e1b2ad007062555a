"""Figures of the GPTQ and AWQ chapter: outliers against grid granularity, and the small model measured.

The synthetic matrices are seeded; the small-model figures read the cached results of
:func:`servebook.book.experiments.perplexity_table` and :func:`servebook.book.experiments.layer_errors`
(shipped in ``servebook/data/experiments``).
"""

from __future__ import annotations

from functools import partial

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


def _outlier_errors(bits: int, granularities: tuple, factor: float, n_outliers: int) -> dict[str, list[float]]:
    """Outlier kind -> the relative error (%) of its planted matrix at each granularity."""
    return {kind: [100 * relative_error(planted_outliers(kind, factor=factor, n_outliers=n_outliers), bits, g)
                   for g in granularities] for kind in OUTLIER_KINDS}


def groupwise_outliers(bits: int = 4, granularities: tuple = GRANULARITIES, factor: float = 20.0,
                       n_outliers: int = 4) -> Figure:
    """INT4 relative error against grid granularity, for a clean matrix and for planted outlier rows/columns."""
    fig, ax = _style.new_figure(7.0, 3.6)
    x = np.arange(len(granularities))
    labels = {"none": "no outliers", "rows": f"{n_outliers} outlier rows (x{factor:g})",
              "columns": f"{n_outliers} outlier columns (x{factor:g})"}
    colours = {"none": _style.MUTED, "rows": _style.SEQUENCE[3], "columns": _style.WASTE}
    with matplotlib.rc_context(_style.RC):
        for kind, errors in _outlier_errors(bits, granularities, factor, n_outliers).items():
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


def groupwise_outliers_alt(bits: int = 4, granularities: tuple = GRANULARITIES, factor: float = 20.0,
                           n_outliers: int = 4) -> str:
    """The alt text of :func:`groupwise_outliers`: each matrix's error at the coarsest and finest grids."""
    errors = _outlier_errors(bits, granularities, factor, n_outliers)
    clean, rows, columns = (np.array(errors[kind]) for kind in ("none", "rows", "columns"))
    if (np.any(np.abs(rows[1:] / clean[1:] - 1) > 0.05) or rows[0] < 2 * clean[0]
            or np.any(np.diff(columns) >= 0)):  # rows matter per tensor only; columns at every grid
        raise RuntimeError("groupwise_outliers_alt describes outlier rows that only the per-tensor grid feels "
                           "and outlier columns whose error falls with every finer grid")
    names = [_granularity_label(g) for g in granularities]
    return (f"Line chart, log scale. X axis: {', '.join(names)}. Y axis: relative INT{bits} error in percent. "
            f"Grey line, no outliers: from about {clean[0]:.0f} down to {clean[-1]:.0f}. Purple line, outlier "
            f"rows: about {rows[0]:.0f} {names[0]}, then on top of the grey line from {names[1]} on. Red line, "
            f"outlier columns: about {columns[0]:.0f} {names[0]}, {columns[1]:.0f} {names[1]}, then falling "
            f"steadily to about {columns[-1]:.0f} at {names[-1]}.")


def _perplexity_panels(table: list[dict] | None, low_bits: list[dict] | None):
    """The perplexity chart's two panels (title, rows), the FP32 perplexity, and its x axis's ends."""
    from ..experiments import LOW_BIT_ROWS, perplexity_table

    if table is None:
        table = perplexity_table()
    if low_bits is None:
        low_bits = perplexity_table(LOW_BIT_ROWS, name="perplexity-low-bits")
    fp32 = next(row["perplexity"] for row in table if row["method"] == "fp32")
    panels = (("INT8 and INT4 (packed)", table), ("3 and 2 bits, g128 (simulated)", low_bits))
    top = max(row["perplexity"] for _, rows in panels for row in rows)
    return panels, fp32, (fp32 * 0.97, top * 1.06)


def gptq_awq_perplexity(table: list[dict] | None = None, low_bits: list[dict] | None = None) -> Figure:
    """Held-out perplexity of the tiny Llama: the chapter's INT8/INT4 table, and 3- and 2-bit (simulated)."""
    from ..experiments import shown_perplexity

    panels, fp32, limits = _perplexity_panels(table, low_bits)
    heights = [len(rows) for _, rows in panels]
    fig, axes = _style.new_figure(7.4, 0.3 * sum(heights) + 1.6, nrows=2, height_ratios=heights, sharex=True)
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
        axes[-1].set_xlim(*limits)
        axes[-1].set_xlabel("held-out perplexity (dashed: FP32; % change against FP32)")
        fig.suptitle("The tiny Llama on unseen Python docs:\nINT4 costs little; at 2 bits GPTQ keeps the model")
    return fig


def _grouped_labels(labels: list[str]) -> list[str]:
    """Bar labels as prose groups them: 'INT4 RTN per tensor, per channel and g128', 'INT4 GPTQ and AWQ g128'."""
    parts = [label.split(" ", 2) if label.count(" ") >= 2 else [label] for label in labels]
    groups, i = [], 0
    while i < len(parts):
        if len(parts[i]) == 1:
            groups.append(parts[i][0])
            i += 1
            continue
        bits, method, grid = parts[i]
        same_method = next((j for j in range(i, len(parts)) if parts[j][:2] != [bits, method]), len(parts)) - i
        same_grid = next((j for j in range(i, len(parts)) if len(parts[j]) == 1
                          or (parts[j][0], parts[j][2]) != (bits, grid)), len(parts)) - i
        if same_method >= same_grid:
            groups.append(f"{bits} {method} {fmt.listed([p[2] for p in parts[i:i + same_method]])}")
        else:
            groups.append(f"{bits} {fmt.listed([p[1] for p in parts[i:i + same_grid]])} {grid}")
        i += max(same_method, same_grid)
    return groups


def gptq_awq_perplexity_alt(table: list[dict] | None = None, low_bits: list[dict] | None = None) -> str:
    """The alt text of :func:`gptq_awq_perplexity`: the axis, the bars of each panel, and where they end."""
    from ..experiments import shown_perplexity

    ((_, top_rows), (_, low_rows)), fp32, (left, right) = _perplexity_panels(table, low_bits)
    quantized = [row["perplexity"] for row in top_rows if row["method"] != "fp32"]
    changes = [fmt.change(value, fp32).rstrip("%") for value in (min(quantized), max(quantized))]
    low = [row["label"].split() + [row["perplexity"]] for row in low_rows if row["method"] != "fp32"]
    widths, methods = (list(dict.fromkeys(row[k] for row in low)) for k in (0, 1))
    grids = {row[2] for row in low}
    if len(grids) != 1 or len(low) != len(widths) * len(methods):  # the text: every width by every method
        raise RuntimeError(f"gptq_awq_perplexity_alt describes one grid, each width by each method: {low}")
    best, *worse = sorted((row for row in low if row[0] == widths[-1]), key=lambda row: row[3])
    worse = worse[::-1]  # the worst first, as the text reads them
    rises = sorted(round(100 * (row[3] / fp32 - 1)) for row in worse)
    return (f"Two horizontal bar charts sharing a perplexity axis from about {left:.0f} to {right:.0f}, with a "
            f"dashed line at the FP32 value near {fp32:.0f}. Top: {fmt.spelled(len(top_rows))} bars, "
            f"{', '.join(_grouped_labels([row['label'] for row in top_rows]))}; all end between "
            f"{shown_perplexity(min(quantized))} and {shown_perplexity(max(quantized))}, labelled with changes "
            f"from {changes[0]} to {changes[1]} percent. Bottom: FP32 and {fmt.listed(widths)} bars for "
            f"{fmt.listed(methods)} at {grids.pop()}; {widths[-1]} {fmt.listed([row[1] for row in worse])} reach "
            f"about {fmt.listed([f'{row[3]:.0f}' for row in worse])} (+{rises[0]} to +{rises[-1]} percent), "
            f"{widths[-1]} {best[1]} about {best[3]:.0f}.")


def _layer_rows(rows: list[dict] | None, group_size: int) -> tuple[list[dict], list[str]]:
    """The layer-error rows (the cached ones by default) and each layer's short name, 'L0.q' for layer 0's q_proj."""
    if rows is None:
        from ..experiments import layer_errors

        rows = layer_errors(group_size=group_size)
    names = [row["layer"].replace("model.layers.", "L").replace("self_attn.", "").replace("mlp.", "")
             .replace("_proj", "") for row in rows]
    return rows, names


def gptq_awq_layer_errors(rows: list[dict] | None = None, group_size: int = 128) -> Figure:
    """Relative output error of each linear layer of the tiny Llama: RTN, GPTQ and AWQ at INT4, same groups."""
    rows, names = _layer_rows(rows, group_size)
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


def gptq_awq_layer_errors_alt(rows: list[dict] | None = None, group_size: int = 128) -> str:
    """The alt text of :func:`gptq_awq_layer_errors`: the layers, and the range of each method's errors."""
    rows, names = _layer_rows(rows, group_size)
    rtn, gptq, awq = (100 * np.array([row[method] for row in rows]) for method in ("rtn", "gptq", "awq"))
    level = np.concatenate([rtn, awq])
    worst = {names[int(np.argmax(errors))].rsplit(".", 1)[1] for errors in (rtn, awq)}
    if np.any(np.abs(awq / rtn - 1) > 0.1) or np.any(gptq >= rtn) or worst != {"down"}:
        raise RuntimeError("gptq_awq_layer_errors_alt describes AWQ level with RTN, worst at a down projection, "
                           "and GPTQ below both")
    half = partial(fmt.nearest, step=0.5)  # the text rounds to the nearest half

    return (f"Grouped bar chart with {len(rows)} groups, one per linear layer from {names[0]} to {names[-1]}, each "
            "with a brown RTN bar, a blue GPTQ bar and a purple AWQ bar; y axis output error in percent from 0 to "
            f"about {np.ceil(level.max()):.0f}. Brown and purple bars are nearly equal everywhere, between about "
            f"{half(level.min())} and {half(level.max())} percent, highest at the down projections; blue bars "
            f"are much lower, between about {half(gptq.min())} and {half(gptq.max())} percent.")


FIGURES = {
    "groupwise-outliers": groupwise_outliers,
    "gptq-awq-perplexity": gptq_awq_perplexity,
    "gptq-awq-layer-errors": gptq_awq_layer_errors,
}

ALT_TEXTS = {
    "groupwise-outliers": groupwise_outliers_alt,
    "gptq-awq-perplexity": gptq_awq_perplexity_alt,
    "gptq-awq-layer-errors": gptq_awq_layer_errors_alt,
}
