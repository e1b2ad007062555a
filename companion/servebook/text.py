"""Plain text for a terminal and for the book's page, both 75 columns wide: labelled lines and tables.

The command line and the advisor's reports are laid out here, once, so what `servebook advise`
prints and what a chapter prints from ``str(advice)`` are the same text.
"""

from __future__ import annotations

import textwrap
from typing import Any

__all__ = ["WIDTH", "cell", "pairs", "table", "wrap"]

WIDTH = 75  # what a terminal and the book's page both hold


def wrap(text: str, first: str = "", later: str = "  ", width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` columns, the first indented by ``first``, the rest by ``later``."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=later, break_on_hyphens=False)


def pairs(rows: list[tuple[str, str]]) -> str:
    """``key  value`` lines with the keys padded to one width."""
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in rows)


def cell(value: Any) -> str:
    """A table cell: ``-`` for nothing, thousands separators for numbers, two decimals for floats."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def table(rows: list[dict[str, Any]]) -> str:
    """Rows of equal keys as fixed-width columns; numbers right-aligned, with thousands separators."""
    keys = list(rows[0])
    cells = [[cell(v) for v in row.values()] for row in rows]
    numeric = [all(isinstance(row[k], (int, float, type(None))) and not isinstance(row[k], bool) for row in rows)
               for k in keys]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    return "\n".join([line(keys), line(["-" * w for w in widths]), *(line(c) for c in cells)])
