"""Figures of the quantization-basics chapter: the grid, its ticks and gaps, ties, zero point, clipping, bits.

Every number drawn is computed by :mod:`servebook.quant` on the book's examples, read from
:mod:`servebook.book.scenarios`: weights in [-0.6, 0.9], INT4, r = 0.35 (worked example 1), the outlier 1.4
(worked example 2), the range [-1, 1] for bit widths (worked example 4).
"""

from __future__ import annotations

from fractions import Fraction

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import quant
from .. import fmt, scenarios, ties
from . import _style

GRID = "#b8860b"     # dark gold: representable values (yellow ticks)
TRUE = _style.WASTE  # red: the true weight
SNAP = _style.ACCENT  # blue: where it lands
R_MIN, R_MAX = scenarios.EXAMPLE_RANGE
TIE_CASES = ((scenarios.EXAMPLE_WEIGHT, R_MIN, R_MAX), scenarios.BINARY_TIE)
TIE_COLUMNS = ("r / s", "half\nup", "half\neven")  # the tie table's columns: the quotient, then one per rounding
ROW_PHRASES = {"float64, r / s": "float64 division"}  # how the alt text names a row that differs


def _grid(r_min: str, r_max: str, bits: int):
    scale, zero_point = quant.choose_qparams_affine(r_min, r_max, bits)
    qmin, qmax = quant.qrange(bits)
    codes = np.arange(qmin, qmax + 1)
    values = np.array([float(quant.dequantize_affine(int(q), scale, zero_point)) for q in codes])
    return scale, zero_point, codes, values


def _number_line(ax, low, high):
    ax.axhline(0, color=_style.MUTED, linewidth=1, zorder=1)
    ax.set_xlim(low, high)
    ax.set_yticks([])
    ax.grid(False)
    ax.spines[["left"]].set_visible(False)


def _fence_ticks(r_min: str, r_max: str, bits: int):
    """The scale of ``bits`` on the range and its ticks r_min + k s, before the zero point is rounded."""
    scale, _ = quant.choose_qparams_affine(r_min, r_max, bits)
    qmin, qmax = quant.qrange(bits)
    # the zero point's rounding is the next figure's story
    return scale, np.array([float(Fraction(r_min) + k * scale) for k in range(qmax - qmin + 1)])


def quant_fence_posts(r_min: str = R_MIN, r_max: str = R_MAX, widths: tuple[int, ...] = (2, 3, 4)) -> Figure:
    """Fence posts: 2^b ticks leave 2^b - 1 gaps, and the scale is the range over the gaps."""
    low, high = Fraction(r_min), Fraction(r_max)
    fig, axes = _style.new_figure(7.0, 1.05 * len(widths) + 0.6, nrows=len(widths), sharex=True)
    with matplotlib.rc_context(_style.RC):
        for ax, bits in zip(axes, widths, strict=True):
            scale, ticks = _fence_ticks(r_min, r_max, bits)
            _number_line(ax, float(low) - 0.05, float(high) + 0.05)
            ax.plot(ticks, np.zeros_like(ticks), "|", color=GRID, markersize=20, markeredgewidth=2.2, zorder=3)
            for left, right in zip(ticks[:-1], ticks[1:], strict=True):
                ax.annotate("", (right, 0.32), (left, 0.32),
                            arrowprops={"arrowstyle": "<->", "color": _style.MUTED, "linewidth": 0.8,
                                        "shrinkA": 0, "shrinkB": 0})
            ax.text((ticks[0] + ticks[1]) / 2, 0.42, f"s = {float(scale):.4g}", ha="left", va="bottom",
                    fontsize=8, color=_style.MUTED)
            ax.set_ylim(-0.45, 0.85)
            ax.text(float(high) + 0.08, 0, f"b = {bits}: {len(ticks)} ticks,\n{len(ticks) - 1} gaps", va="center",
                    fontsize=9, clip_on=False)
        axes[-1].set_xlabel(f"real value r (range [{r_min}, {r_max}])")
        axes[0].set_title("s = (r_max - r_min) / (2^b - 1): divide by the gaps, not by the ticks")
    return fig


def quant_fence_posts_alt(r_min: str = R_MIN, r_max: str = R_MAX, widths: tuple[int, ...] = (2, 3, 4)) -> str:
    """The alt text of :func:`quant_fence_posts`: one line per width, its ticks, gaps and scale."""
    lines = [(len(ticks), f"{float(scale):.4g}") for scale, ticks in (_fence_ticks(r_min, r_max, b) for b in widths)]
    arrows = [f"{n} ticks with {n - 1} {'double-headed arrows between them' if i == 0 else 'arrows'} labelled s = {s}"
              for i, (n, s) in enumerate(lines)]
    return (f"{fmt.spelled(len(widths)).capitalize()} number lines from {r_min} to {r_max}, one above the other, "
            f"for {fmt.listed(widths)} bits. Gold ticks mark the representable values: {', then '.join(arrows)}. "
            f"Labels at the right read {'; '.join(f'{n} ticks, {n - 1} gaps' for n, _ in lines)}.")


def _snap(r_min: str, r_max: str, r: str):
    """The INT4 grid of the range, and the code, value and error ``r`` rounds to on it."""
    scale, zero_point, codes, values = _grid(r_min, r_max, 4)
    q = quant.quantize_affine(r, scale, zero_point, *quant.qrange(4))
    r_hat = quant.dequantize_affine(q, scale, zero_point)
    return scale, zero_point, codes, values, q, r_hat, abs(r_hat - Fraction(r))


def quant_int4_grid(r_min: str = R_MIN, r_max: str = R_MAX, r: str = scenarios.EXAMPLE_WEIGHT) -> Figure:
    """The INT4 grid on [-0.6, 0.9]: 16 ticks a step s = 0.1 apart; 0.35 snaps to 0.4 (worked example 1)."""
    scale, zero_point, codes, values, q, r_hat, error = _snap(r_min, r_max, r)
    fig, ax = _style.new_figure(7.2, 2.4)
    with matplotlib.rc_context(_style.RC):
        _number_line(ax, values[0] - 0.06, values[-1] + 0.06)
        ax.plot(values, np.zeros_like(values), "|", color=GRID, markersize=18, markeredgewidth=2, zorder=2)
        for code, value in zip(codes, values, strict=True):
            ax.text(value, -0.3, str(code), ha="center", va="top", fontsize=9, color=GRID)
        ax.text(values[0] - 0.05, -0.3, "q:", ha="right", va="top", fontsize=9, color=GRID)
        ax.plot([float(Fraction(r))], [0.25], "o", color=TRUE, markersize=7, zorder=4)
        ax.plot([float(r_hat)], [0], "o", color=SNAP, markersize=8, zorder=4)
        ax.annotate("", (float(r_hat), 0.06), (float(Fraction(r)), 0.25),
                    arrowprops={"arrowstyle": "->", "color": TRUE, "linewidth": 1.4})
        ax.text(float(Fraction(r)), 0.38, f"r = {r}", ha="center", color=TRUE, fontsize=9)
        ax.text(float(r_hat) + 0.02, 0.16, f"r_hat = {float(r_hat):g} (q = {q})", color=SNAP, fontsize=9)
        ax.text(float(Fraction(r)), 0.62, f"error = {float(error):g} = s/2", ha="center", fontsize=9)
        ax.set_ylim(-0.55, 0.8)
        ax.set_xticks(values[::3], [f"{v:.1f}" for v in values[::3]])
        ax.set_xlabel("real value r")
        ax.set_title(f"INT4 on [{r_min}, {r_max}]: {len(codes)} representable values, s = {float(scale):g}, "
                     f"z = {zero_point}")
    return fig


def quant_int4_grid_alt(r_min: str = R_MIN, r_max: str = R_MAX, r: str = scenarios.EXAMPLE_WEIGHT) -> str:
    """The alt text of :func:`quant_int4_grid`: the sixteen codes, and where ``r`` lands with what error."""
    scale, _, codes, values, q, r_hat, error = _snap(r_min, r_max, r)
    if len(codes) != 16 or error != quant.error_bound(scale):  # the text spells sixteen and reads s/2
        raise RuntimeError(f"quant_int4_grid_alt describes 16 codes and an error of s/2; got {len(codes)}, {error}")
    return (f"A number line from {values[0]:g} to {values[-1]:g} with sixteen gold ticks labelled with codes "
            f"{codes[0]} to {codes[-1]}. A red dot above the line at {r} has an arrow pointing down to a blue dot "
            f"on the tick at {float(r_hat):g}, labelled r_hat = {float(r_hat):g} (q = {q}). "
            f"Text above reads error = {float(error):g} = s/2.")


def quant_tie_breaking(cases: tuple[tuple[str, str, str], ...] = TIE_CASES) -> Figure:
    """Codes at two ties under each arithmetic and rounding rule: float64 division misses worked example 1's tie."""
    fig, axes = _style.new_figure(8.0, 3.1, ncols=len(cases))
    with matplotlib.rc_context(_style.RC):
        for ax, (r, r_min, r_max) in zip(np.atleast_1d(axes), cases, strict=True):
            outcomes = ties.tie_outcomes(r, r_min, r_max)
            names = list(outcomes)
            reference = outcomes["exact (Fraction)"][1][0]
            ax.grid(False)
            ax.set_xlim(-0.6, 2.7)
            ax.set_ylim(len(names) - 0.5, -1.2)
            ax.set_xticks([0.4, 1.75, 2.45], list(TIE_COLUMNS))
            ax.xaxis.tick_top()
            ax.set_yticks(range(len(names)), names)
            ax.spines[:].set_visible(False)
            ax.tick_params(length=0)
            for i, name in enumerate(names):
                quotient, codes = outcomes[name]
                ax.text(0.4, i, quotient, ha="center", va="center", fontsize=8, family="DejaVu Sans Mono")
                for j, code in enumerate(codes):
                    colour = _style.WASTE if code != reference else _style.KV
                    ax.text(1.75 + 0.7 * j, i, str(code), ha="center", va="center", fontsize=11,
                            color=colour, weight="bold")
            ax.set_title(f"r = {r} on [{r_min}, {r_max}]", fontsize=10, pad=28)
        fig.suptitle("Code q at a tie: teal = the exact half-up answer, red = different", fontsize=10)
    return fig


def _tie_panel(r: str, r_min: str, r_max: str) -> str:
    """One table of :func:`quant_tie_breaking` in words: its quotients, and which codes differ from exact."""
    outcomes = ties.tie_outcomes(r, r_min, r_max)
    quotients = [quotient for quotient, _ in outcomes.values()]
    rows = {name: codes for name, (_, codes) in outcomes.items()}
    reference = rows["exact (Fraction)"][0]
    colour = {True: "teal", False: "red"}
    if len({Fraction(q) for q in quotients}) == 1:
        said = f"{fmt.listed(list(dict.fromkeys(quotients)), 'or')} in every row"
    else:
        said = ", ".join(quotients)
    columns = list(zip(*rows.values(), strict=True))
    if all(len(set(column)) == 1 for column in columns):
        rules = [name.replace("\n", "-") for name in TIE_COLUMNS[1:]]
        return f"the quotient is {said}, " + " and ".join(
            f"{rule} gives {column[0]} in {colour[column[0] == reference]}"
            for rule, column in zip(rules, columns, strict=True)) + " in every row"
    odd = [name for name, codes in rows.items() if codes != [reference] * len(codes)]
    if len(odd) != 1 or odd[0] not in ROW_PHRASES or len(set(rows[odd[0]])) != 1:
        raise RuntimeError(f"_tie_panel describes one row that differs in every rounding, or none; {rows}")
    return (f"the quotient is {said}, and the codes are {fmt.listed(rows['exact (Fraction)'])} in teal "
            f"except the {ROW_PHRASES[odd[0]]} row, {fmt.listed(rows[odd[0]])} in red")


def quant_tie_breaking_alt(cases: tuple[tuple[str, str, str], ...] = TIE_CASES) -> str:
    """The alt text of :func:`quant_tie_breaking`: each table's quotients and the codes that differ from exact."""
    if len(cases) != 2:  # the text reads left and right
        raise RuntimeError(f"quant_tie_breaking_alt describes two tables, got {len(cases)}")
    names = [name.replace(", ", " ") for name in ties.tie_outcomes(*cases[0])]
    panels = [f"{side}, for r = {r} on [{r_min}, {r_max}]: {_tie_panel(r, r_min, r_max)}."
              for side, (r, r_min, r_max) in zip(("Left", "Right"), cases, strict=True)]
    columns = [name.replace("\n", " ") for name in TIE_COLUMNS]
    return (f"Two tables side by side. Rows: {', '.join(names)}. "
            f"Columns: {', '.join(columns)}. {' '.join(panels)}")


def quant_zero_point(r_min: str = R_MIN, r_max: str = R_MAX, bits: int = 4) -> Figure:
    """The zero point: code z = 6 is the tick that sits exactly on real 0."""
    scale, zero_point, codes, values = _grid(r_min, r_max, bits)
    fig, ax = _style.new_figure(7.2, 2.6)
    with matplotlib.rc_context(_style.RC):
        ax.grid(False)
        ax.set_yticks([1, 0], ["integer code q", "real value r = s (q - z)"])
        ax.spines[["left"]].set_visible(False)
        ax.tick_params(axis="y", length=0)
        low, high = values[0], values[-1]
        span = high - low
        code_x = low + (codes - codes[0]) / (codes[-1] - codes[0]) * span
        ax.hlines([0, 1], low - 0.03, high + 0.03, color=_style.MUTED, linewidth=1)
        for code, x_code, value in zip(codes, code_x, values, strict=True):
            highlight = code == zero_point
            colour = SNAP if highlight else GRID
            ax.plot([x_code, value], [1, 0], color=colour, linewidth=2.2 if highlight else 0.8, zorder=2)
            ax.text(x_code, 1.1, str(code), ha="center", va="bottom", fontsize=8, color=colour,
                    weight="bold" if highlight else "normal")
        ax.plot([0.0], [0], "o", color=SNAP, zorder=3)
        ax.annotate(f"q = z = {zero_point} lands on r = 0.0 exactly", (0.0, 0), (0.12, -0.45),
                    color=SNAP, fontsize=9, arrowprops={"arrowstyle": "->", "color": SNAP})
        ax.set_xticks([low, 0.0, high], [f"{low:g}", "0", f"{high:g}"])
        ax.set_ylim(-0.7, 1.45)
        ax.set_xlim(low - 0.05, high + 0.05)
        ax.set_title(f"z = round(-r_min / s) = {zero_point}: real 0 is a code, so zeros are stored exactly")
    return fig


def quant_zero_point_alt(r_min: str = R_MIN, r_max: str = R_MAX, bits: int = 4) -> str:
    """The alt text of :func:`quant_zero_point`: the codes, the values, and the zero point's line."""
    _, zero_point, codes, values = _grid(r_min, r_max, bits)
    return (f"Two horizontal lines: integer codes {codes[0]} to {codes[-1]} on top, real values from "
            f"{values[0]:g} to {values[-1]:g} below, each code joined to its real value by a thin gold line. "
            f"The line from code {zero_point} is thick and blue and ends on a blue dot at real 0, "
            f"annotated q = z = {zero_point} lands on r = 0.0 exactly.")


def _clipped(r_min: str, r_max: str, outlier: str):
    """The INT4 grid, the code ``outlier`` wants, the code it gets, its value and error, and the missing ticks."""
    scale, zero_point, codes, values = _grid(r_min, r_max, 4)
    qmin, qmax = quant.qrange(4)
    wanted = quant.round_half_up(Fraction(outlier) / scale) + zero_point
    q = quant.quantize_affine(outlier, scale, zero_point, qmin, qmax)
    r_hat = quant.dequantize_affine(q, scale, zero_point)
    error = abs(Fraction(outlier) - r_hat)
    ghosts = [float(quant.dequantize_affine(k, scale, zero_point)) for k in range(qmax + 1, wanted + 1)]
    return scale, codes, values, qmax, wanted, q, r_hat, error, ghosts


def quant_outlier_clipping(r_min: str = R_MIN, r_max: str = R_MAX, outlier: str = scenarios.EXAMPLE_OUTLIER) -> Figure:
    """An outlier beyond r_max wants a code that does not exist and saturates at the top code (worked example 2)."""
    scale, codes, values, qmax, wanted, q, r_hat, error, ghosts = _clipped(r_min, r_max, outlier)
    fig, ax = _style.new_figure(7.2, 2.4)
    with matplotlib.rc_context(_style.RC):
        _number_line(ax, values[0] - 0.05, float(Fraction(outlier)) + 0.25)
        ax.plot(values, np.zeros_like(values), "|", color=GRID, markersize=18, markeredgewidth=2)
        ax.plot(ghosts, np.zeros_like(ghosts), "|", color=_style.FREE, markersize=18, markeredgewidth=2)
        for k, ghost in zip(range(qmax + 1, wanted + 1), ghosts, strict=True):
            ax.text(ghost, -0.3, str(k), ha="center", va="top", fontsize=9, color=_style.MUTED)
        ax.text(values[-1], -0.3, str(qmax), ha="center", va="top", fontsize=9, color=GRID)
        ax.text(float(np.mean(ghosts)), 0.5, f"codes {qmax + 1}..{wanted} do not exist in 4 bits", ha="center",
                fontsize=8, color=_style.MUTED)
        x_out = float(Fraction(outlier))
        ax.plot([x_out], [0.0], "o", color=TRUE, markersize=7, zorder=4)
        ax.plot([float(r_hat)], [0.0], "o", color=SNAP, markersize=8, zorder=4)
        ax.annotate("", (float(r_hat), -0.05), (x_out, -0.05),
                    arrowprops={"arrowstyle": "->", "color": TRUE, "linewidth": 1.4,
                                "connectionstyle": "arc3,rad=0.35"})
        ax.text(float(r_hat), -0.55, f"saturates at q = {q}: r_hat = {float(r_hat):g}, "
                f"error {float(error):g} = {float(error / quant.error_bound(scale)):g} x s/2", ha="center",
                fontsize=9, color=TRUE)
        ax.text(x_out, 0.1, f"r = {outlier}\nwants q = {wanted}", ha="center", va="bottom", fontsize=8,
                color=TRUE)
        ax.set_ylim(-0.75, 0.65)
        ax.set_xlabel("real value r")
        ax.set_title("Clipping: an outlier is capped at the top code; nothing wraps around")
    return fig


def quant_outlier_clipping_alt(r_min: str = R_MIN, r_max: str = R_MAX,
                               outlier: str = scenarios.EXAMPLE_OUTLIER) -> str:
    """The alt text of :func:`quant_outlier_clipping`: the codes that exist, those wanted, and the clipped error."""
    scale, codes, values, qmax, wanted, q, r_hat, error, ghosts = _clipped(r_min, r_max, outlier)
    return (f"The INT4 number line from {values[0]:g} with gold ticks for codes {codes[0]} to {codes[-1]}, "
            f"continued by pale grey ticks for the missing codes {qmax + 1} to {wanted} up to {ghosts[-1]:g}. "
            f"A red dot at {outlier}, labelled wants q = {wanted}, has a curved arrow back to a blue dot on the "
            f"last gold tick at {float(r_hat):g}. Red text below: saturates at q = {q}, r_hat = {float(r_hat):g}, "
            f"error {float(error):g} = {float(error / quant.error_bound(scale)):g} x s/2.")


ANNOTATED_BITS = (4, 8, 16)  # the widths whose bound the error chart writes out
NAIVE_FROM_BITS = 4  # where the wrong '1/b' curve meets the bound


def _unit_bound(bits: int) -> Fraction:
    """The worst rounding error s/2 of ``bits`` on the book's range for bit widths, [-1, 1]."""
    low, high = scenarios.UNIT_RANGE
    return quant.error_bound(quant.choose_qparams_affine(low, high, bits)[0])


def _bounds(max_bits: int):
    """The bit widths 1 to ``max_bits`` and the worst error of each on [-1, 1], as floats to plot."""
    bits = np.arange(1, max_bits + 1)
    return bits, [float(_unit_bound(int(b))) for b in bits]


def quant_error_vs_bits(max_bits: int = 16, samples: int = scenarios.ERROR_SAMPLES, seed: int = 0) -> Figure:
    """Worst-case error s/2 = 1/(2^b - 1) on [-1, 1] against bit width, with the measured maximum."""
    low, high = scenarios.UNIT_RANGE
    bits, bounds = _bounds(max_bits)
    x = np.random.default_rng(seed).uniform(low, high, samples)
    x[:2] = (low, high)
    measured = [float(quant.quantization_error(x, quant.choose_qparams(x, int(b))).max()) for b in bits]
    fig, ax = _style.new_figure(6.8, 3.6)
    with matplotlib.rc_context(_style.RC):
        ax.semilogy(bits, bounds, "-", color=_style.WEIGHTS, label="bound s/2 = 1 / (2^b - 1)")
        ax.semilogy(bits, measured, "o", color=_style.ACCENT, markersize=4,
                    label=f"measured max error, {samples:,} uniform samples")
        naive = [bounds[NAIVE_FROM_BITS - 1] * NAIVE_FROM_BITS / b for b in bits]
        ax.semilogy(bits, naive, ":", color=_style.MUTED, label="'error proportional to 1/b' (wrong)")
        for b in ANNOTATED_BITS:
            bound = _unit_bound(b)
            ax.annotate(f"b = {b}: {bound}", (b, float(bound)), xytext=(6, 6), textcoords="offset points",
                        fontsize=8)
        ratio = quant.choose_qparams_affine(low, high, 4)[0] / quant.choose_qparams_affine(low, high, 8)[0]
        ax.set_xlabel("bit width b")
        ax.set_ylabel(f"worst rounding error on [{low}, {high}]")
        ax.set_xticks(bits[::1 if max_bits <= 8 else 2] if max_bits > 1 else bits)
        ax.set_title(f"Each extra bit roughly halves the error: INT4 is {ratio}x worse than INT8, not 2x")
        ax.legend(loc="lower left", fontsize=8)
    return fig


def quant_error_vs_bits_alt(max_bits: int = 16, samples: int = scenarios.ERROR_SAMPLES, seed: int = 0) -> str:
    """The alt text of :func:`quant_error_vs_bits`: the bound's ends, the widths annotated, the '1/b' curve."""
    bits, bounds = _bounds(max_bits)
    mantissa, exponent = f"{bounds[-1]:.1e}".split("e")  # 1.5e-5, as the text writes it, not 1.5e-05
    marks = ", ".join(f"b = {b}: {_unit_bound(b)}" for b in ANNOTATED_BITS)
    return (f"Log-scale chart of worst rounding error against bit width from {bits[0]} to {bits[-1]}. "
            f"An orange line falls steeply and straight from {bounds[0]:g} to about {mantissa}e{int(exponent)}, "
            f"with blue measured points on it; annotations mark {marks}. A dotted grey curve for error "
            f"proportional to 1/b starts near the orange line at {NAIVE_FROM_BITS} bits and flattens out far "
            "above it.")


FIGURES = {
    "quant-fence-posts": quant_fence_posts,
    "quant-int4-grid": quant_int4_grid,
    "quant-tie-breaking": quant_tie_breaking,
    "quant-zero-point": quant_zero_point,
    "quant-outlier-clipping": quant_outlier_clipping,
    "quant-error-vs-bits": quant_error_vs_bits,
}

ALT_TEXTS = {
    "quant-fence-posts": quant_fence_posts_alt,
    "quant-int4-grid": quant_int4_grid_alt,
    "quant-tie-breaking": quant_tie_breaking_alt,
    "quant-zero-point": quant_zero_point_alt,
    "quant-outlier-clipping": quant_outlier_clipping_alt,
    "quant-error-vs-bits": quant_error_vs_bits_alt,
}
