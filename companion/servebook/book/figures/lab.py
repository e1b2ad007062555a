"""Figures of the GPU lab: measured bytes and times against the book's predictions.

Each function draws a results document of :mod:`servebook.lab`; by default the
most recent recorded run (a GPU run when one is recorded), so the files under
``figures/`` change only when a new run is committed.
"""

from __future__ import annotations

from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from ... import lab, models
from ...units import MiB
from . import _style

_BYTE_STYLES = {  # quantity -> (label, colour, marker, filled)
    "weight_bytes": ("weights (state dict)", _style.WEIGHTS, "o", True),
    "allocated_bytes": ("weights (CUDA allocator)", _style.WEIGHTS, "D", False),
    "kv_bytes": ("KV cache (cache tensors)", _style.KV, "s", True),
    "peak_bytes": ("peak above weights (CUDA)", _style.OVERHEAD, "^", True),
}
_MARKERS = ["o", "s", "^", "D", "v", "P"]


def _shown(run_label: str) -> str:
    """A run's model label as a reader reads it: "llama-2-7b/8" (an eighth of its layers) is "Llama-2-7B/8"."""
    model, _, part = run_label.partition("/")
    name = models.display_name(model) if model in models.names() else model
    return f"{name}/{part}" if part else name


def _results(results: dict[str, Any] | None) -> dict[str, Any]:
    return lab.latest_recorded() if results is None else results


def _where(results: dict[str, Any]) -> str:
    return f"{results['device']['name']}, {results['date'][:10]}"


def lab_bytes_check(results: dict[str, Any] | None = None) -> Figure:
    """Measured bytes against servebook.memory's predictions, log-log: exact predictions lie on the diagonal."""
    results = _results(results)
    fig, ax = _style.new_figure(6.4, 4.2)
    with matplotlib.rc_context(_style.RC):
        lows, highs = [], []
        for quantity, (label, colour, marker, filled) in _BYTE_STYLES.items():
            rows = [r for r in results["rows"] if r["quantity"] == quantity and r["predicted"]]
            if not rows:
                continue
            x = [r["predicted"] / MiB for r in rows]
            y = [r["measured"] / MiB for r in rows]
            lows.append(min(x + y))
            highs.append(max(x + y))
            ax.scatter(x, y, s=36, marker=marker, label=f"{label} ({len(rows)})", zorder=3,
                       color=colour if filled else "none", edgecolors=colour, linewidths=1.2)
        if lows:
            line = [min(lows) / 1.5, max(highs) * 1.5]
            ax.plot(line, line, color=_style.MUTED, linewidth=1, linestyle="--", zorder=2,
                    label="measured = predicted")
            ax.set_xlim(*line)
            ax.set_ylim(*line)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("predicted by servebook.memory (MiB)")
        ax.set_ylabel("measured on the device (MiB)")
        ax.set_title(f"Bytes on the device vs the formulas\n({_where(results)})")
        ax.legend(loc="upper left", fontsize=8)
    return fig


def _series(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["model"], row["variant"]), []).append(row)
    return grouped


def _plot_by_prompt_len(ax, grouped, x_of) -> tuple[bool, set[int]]:
    """One line per (model, variant, prompt length): colour by model and variant, marker by length.

    Returns whether any roofline bound was drawn, and the x values used.
    """
    drew_bound, xs = False, set()
    # Colours and markers cycle: a run with more series than colours must not lose lines.
    for i, (key, rows) in enumerate(sorted(grouped.items())):
        colour = _style.SEQUENCE[i % len(_style.SEQUENCE)]
        for j, s in enumerate(sorted({r["seq_len"] for r in rows})):
            marker = _MARKERS[j % len(_MARKERS)]
            line = sorted((r for r in rows if r["seq_len"] == s), key=x_of)
            x = [x_of(r) for r in line]
            xs.update(x)
            ax.plot(x, [r["measured"] * 1e3 for r in line], marker=marker, color=colour,
                    label=f"{_shown(key[0])} [{key[1]}], S={s}")
            bounded = [(xi, r["predicted"] * 1e3) for xi, r in zip(x, line, strict=True) if r["predicted"]]
            if bounded:
                drew_bound = True
                ax.plot(*zip(*bounded, strict=True), linestyle="--", color=colour, linewidth=1)
    return drew_bound, xs


def _plain_log_axis(ax, ticks: set[int]) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sorted(ticks), [f"{t:,}" for t in sorted(ticks)])
    ax.xaxis.set_minor_formatter(NullFormatter())


def lab_step_times(results: dict[str, Any] | None = None) -> Figure:
    """Prefill time against tokens per step, and decode step time against batch, with roofline bounds if known."""
    results = _results(results)
    fig, (left, right) = _style.new_figure(9.0, 4.6, ncols=2)
    prefill = _series([r for r in results["rows"] if r["quantity"] == "prefill_s"])
    decode = _series([r for r in results["rows"] if r["quantity"] == "decode_s"])
    with matplotlib.rc_context(_style.RC):
        bound_left, tokens = _plot_by_prompt_len(left, prefill, lambda r: r["batch"] * r["seq_len"])
        bound_right, batches = _plot_by_prompt_len(right, decode, lambda r: r["batch"])
        _plain_log_axis(left, tokens)
        _plain_log_axis(right, batches)
        left.set_xlabel("tokens in the prefill step (B x S)")
        left.set_ylabel("prefill step time (ms)")
        left.set_title("Prefill of B prompts of S tokens")
        right.set_xlabel("batch B (sequences per decode step)")
        right.set_ylabel("decode step time (ms)")
        right.set_title("Decode: one token per sequence, after S")
        handles, labels = right.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(3, max(1, len(labels))), fontsize=9)
        bound_note = ("dashed: servebook.roofline lower bound" if bound_left or bound_right
                      else "no roofline prediction for this device")
        fig.suptitle(f"Step times, median of repeats ({_where(results)}); {bound_note}", fontsize=10)
    return fig


FIGURES = {"lab-bytes-check": lab_bytes_check, "lab-step-times": lab_step_times}
