"""The book's look, and deterministic saving.

Colour code kept throughout the book: weights orange, KV cache teal.  Saving
fixes the SVG hash salt and strips dates and software versions from metadata,
so the same code writes the same bytes on every build.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

WEIGHTS = "#e07b1a"   # orange: model weights
KV = "#15908a"        # teal: KV cache
OVERHEAD = "#8c8c8c"  # grey: activations, CUDA context, reserved
FREE = "#d9d9d9"      # light grey: unused memory
WASTE = "#d9534f"     # red: reserved but never used
ACCENT = "#3466b0"    # blue: a highlighted value or boundary
MUTED = "#5f5f5f"
# Series colours for lines that are neither weights nor KV cache: no orange or teal among them,
# so those two keep their meaning in every figure.
SEQUENCE = ["#3466b0", "#6b8e23", "#8c564b", "#8e5ea2", "#c2185b", "#b8860b", "#17becf", "#5f5f5f"]

RC = {
    "svg.hashsalt": "servebook",
    "svg.fonttype": "none",      # text stays text: searchable, selectable, small
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "standard",  # "tight" can shift by a pixel between runs
    "path.simplify": False,
}

_METADATA = {
    "svg": {"Date": None, "Creator": None},
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
}


class BookFigure(Figure):
    """A Figure that shows itself in any notebook (Jupyter, Colab, Quarto) when a cell returns it.

    It is never registered with pyplot, so it is shown once, and nothing leaks between cells.
    """

    def _render(self, fmt: str) -> bytes:
        buffer = io.BytesIO()
        save(self, buffer, fmt=fmt)
        return buffer.getvalue()

    def _repr_svg_(self) -> str:
        return self._render("svg").decode("utf-8")

    def _repr_png_(self) -> bytes:
        return self._render("png")


def new_figure(width: float = 7.0, height: float = 3.6, **subplots) -> tuple[Figure, object]:
    """A figure in the book's style, not registered with pyplot (no global state, no leaks).

    Returns ``(fig, axes)`` like ``plt.subplots``.
    """
    with matplotlib.rc_context(RC):
        fig = BookFigure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(**subplots)
    return fig, axes


def save(fig: Figure, path: str | Path | io.BytesIO, fmt: str | None = None) -> str | Path | io.BytesIO:
    """Write ``fig`` to ``path`` (format from the suffix, or ``fmt``) with no dates or versions in it."""
    if fmt is None:
        fmt = Path(path).suffix.lstrip(".")
    # Constrained layout starts from the layout the last draw left, and a draw at one resolution
    # leaves another layout than a draw at the next: a PNG written after the SVG of the same
    # figure differed by a pixel from a PNG written first.  So every file is written from a copy
    # of the figure as its function returned it, and the figure itself is never drawn.
    copy = pickle.loads(pickle.dumps(fig))
    with matplotlib.rc_context(RC):
        # Constrained layout reaches its fixed point in two passes; without them the first file
        # written from a new figure can differ by a pixel of layout from every later one.
        for _ in range(2):
            copy.draw_without_rendering()
        copy.savefig(path, format=fmt, metadata=_METADATA.get(fmt, {}))
    return path
