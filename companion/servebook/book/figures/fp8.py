"""Figures of the chapter on activations, the KV cache and FP8: the FP8 grid against INT8's."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import quant
from .. import fmt
from . import _style


def _half_gap(grid: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Half the gap between the two grid values around each ``x``: the worst rounding error there."""
    i = np.clip(np.searchsorted(grid, x, side="right"), 1, len(grid) - 1)
    return (grid[i] - grid[i - 1]) / 2


def _grids(top: float):
    """The values drawn (four decades below ``top``), the symmetric INT8 grid and the E4M3 grid, both up to ``top``."""
    x = np.logspace(np.log10(top) - 4, np.log10(top) - 1e-9, 3000)
    int8 = np.arange(128) * (top / 127)
    e4m3 = quant.fp8_values("e4m3") * (top / quant.fp8_max("e4m3"))
    return x, int8, e4m3


def fp8_vs_int8_grid(top: float = 448.0) -> Figure:
    """Worst rounding error of E4M3 and of a symmetric INT8 grid over the same range, absolute and relative.

    INT8's step is ``top / 127`` everywhere; E4M3's doubles with every power of two, so its absolute
    error grows with the value while its relative error stays between 2^-5 and 2^-4.
    """
    x, int8, e4m3 = _grids(top)
    fig, (left, right) = _style.new_figure(7.0, 3.4, ncols=2)
    with matplotlib.rc_context(_style.RC):
        for grid, label, colour in ((int8, "INT8, 127 equal steps", _style.SEQUENCE[2]),
                                    (e4m3, "FP8 E4M3, 8 steps per power of 2", _style.ACCENT)):
            worst = _half_gap(grid, x)
            left.plot(x, worst, color=colour, label=label)
            right.plot(x, worst / x, color=colour, label=label)
        for ax in (left, right):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"value x (both grids span 0 .. {top:g})")
        left.set_ylabel("worst |x_hat - x|")
        left.set_title("Absolute error: INT8 flat, FP8 grows")
        right.set_ylabel("worst |x_hat - x| / x")
        right.set_title("Relative error: FP8 flat")
        right.legend(loc="upper right", fontsize=7)
    return fig


def fp8_vs_int8_grid_alt(top: float = 448.0) -> str:
    """The alt text of :func:`fp8_vs_int8_grid`: each grid's worst errors at the ends, and where they cross."""
    x, int8, e4m3 = _grids(top)
    flat, stairs = _half_gap(int8, x), _half_gap(e4m3, x)
    above = stairs > flat
    if np.ptp(flat) > 1e-9 * flat[0] or above[0] or not above[-1]:  # the text: INT8 flat, FP8 rising across it
        raise RuntimeError("fp8_vs_int8_grid_alt describes a flat INT8 error that FP8's rising error crosses")
    relative_int8, relative_fp8 = flat / x, stairs / x
    sig = fmt.significant
    return (f"Two log-log panels over values from {x[0]:.2g} to {top:g}. Left: worst absolute rounding error; "
            f"INT8 is a flat line near {flat[0]:.2g}, FP8 E4M3 a staircase rising from {sig(stairs.min(), 1)} "
            f"to {sig(stairs.max(), 2)}, crossing INT8 near {sig(x[np.argmax(above)], 2)}. Right: worst "
            f"relative error; INT8 falls as a straight line from {sig(relative_int8[0], 1)} to "
            f"{sig(relative_int8[-1], 1)}, FP8 is a flat sawtooth between {sig(relative_fp8.min(), 1)} "
            f"and {sig(relative_fp8.max(), 1)}.")

FIGURES = {"fp8-vs-int8-grid": fp8_vs_int8_grid}

ALT_TEXTS = {"fp8-vs-int8-grid": fp8_vs_int8_grid_alt}
