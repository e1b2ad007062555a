"""Figures of the chapter on activations, the KV cache and FP8: the FP8 grid against INT8's."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import quant
from . import _style


def _half_gap(grid: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Half the gap between the two grid values around each ``x``: the worst rounding error there."""
    i = np.clip(np.searchsorted(grid, x, side="right"), 1, len(grid) - 1)
    return (grid[i] - grid[i - 1]) / 2


def fp8_vs_int8_grid(top: float = 448.0) -> Figure:
    """Worst rounding error of E4M3 and of a symmetric INT8 grid over the same range, absolute and relative.

    INT8's step is ``top / 127`` everywhere; E4M3's doubles with every power of two, so its absolute
    error grows with the value while its relative error stays between 2^-5 and 2^-4.
    """
    x = np.logspace(np.log10(top) - 4, np.log10(top) - 1e-9, 3000)
    int8 = np.arange(128) * (top / 127)
    e4m3 = quant.fp8_values("e4m3") * (top / quant.fp8_max("e4m3"))
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


FIGURES = {"fp8-vs-int8-grid": fp8_vs_int8_grid}
