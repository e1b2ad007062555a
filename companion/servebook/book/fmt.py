"""How the book prints numbers: one way for a size, a share, a change, a table.

Chapters, exercise pages, figures and widgets format through these helpers,
so "3.125 GiB", "12.5%" and "+0.4%" look the same on every page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal

from .. import checks
from .. import text as plain
from ..units import fmt_both, fmt_bytes

__all__ = ["WIDTH", "size", "both", "pct", "change", "num", "power_of_two", "spelled", "ordinal", "listed", "nearest",
           "significant", "table", "wrap"]

WIDTH = plain.WIDTH
"""Columns of a page's output block: what a code cell prints fits in this many characters."""

size = fmt_bytes
"""A byte count in one named unit: ``size(3 * GiB + GiB // 8)`` is ``'3.125 GiB'``."""

both = fmt_both
"""Both readings of one size: ``'3.125 GiB = 3.355 GB'``."""


def pct(share: float, digits: int = 1) -> str:
    """A share as a percentage: ``pct(0.125)`` is ``'12.5%'``."""
    return f"{100 * share:.{digits}f}%"


def change(value: float, reference: float, digits: int = 1) -> str:
    """The signed relative change of ``value`` against ``reference``, never ``'-0.0%'``."""
    return f"{round(100 * (value / reference - 1), digits) + 0.0:+.{digits}f}%"


def num(value, digits: int = 6) -> str:
    """A number in its shortest form (``'0.0333333'``, ``'17'``): exact Fractions and floats alike."""
    return f"{float(value):.{digits}g}"


def significant(value: float, digits: int = 2) -> str:
    """``value`` to ``digits`` significant digits, written plainly, as prose rounds: ``significant(11115)`` is
    ``'11,000'``, ``significant(39.4, 1)`` is ``'40'`` (where :func:`num` writes ``'4e+01'``)."""
    digits = checks.whole("digits", digits, 1)
    return _positional(float(f"{float(value):.{digits}g}"))


def nearest(value: float, step: float) -> str:
    """``value`` rounded to the nearest multiple of ``step``: ``nearest(873, 10)`` is ``'870'``,
    ``nearest(4.67, 0.5)`` is ``'4.5'``."""
    step = checks.positive("step", step)
    return _positional(round(value / step) * step)


def _positional(value: float) -> str:
    """A rounded number without an exponent, with thousands separators and no trailing zeros:
    ``1,200,000``, ``0.00012``, ``4.5`` (``:g`` would write ``1.2e+06``)."""
    # 12 digits drop a multiple's float residue (7 * 0.1 is 0.7000000000000001); + 0.0 writes -0.0 as 0
    text = format(Decimal(f"{float(value) + 0.0:.12g}"), ",f")
    return text.rstrip("0").rstrip(".") if "." in text else text


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_two(value: float) -> str:
    """An exact power of two as one, in prose: ``power_of_two(2**-6)`` is ``'2⁻⁶'``."""
    mantissa, exponent = math.frexp(checks.positive("value", value))
    if mantissa != 0.5:
        raise ValueError(f"value must be a power of two, got {value!r}")
    return "2" + str(exponent - 1).translate(_SUPERSCRIPT)


_SMALL = "zero one two three four five six seven eight nine ten".split()


def spelled(count: int) -> str:
    """A count as prose writes it: ``spelled(4)`` is ``'four'``, ``spelled(12)`` is ``'12'`` (words to ten)."""
    count = checks.whole("count", count, 0)
    return _SMALL[count] if count < len(_SMALL) else f"{count:,}"


def ordinal(n: int) -> str:
    """A position as prose writes it: ``ordinal(501)`` is ``'501st'``, ``ordinal(112)`` is ``'112th'``."""
    n = checks.whole("n", n, 1)
    # 11, 12 and 13 take "th" in every hundred (111th, 212th); otherwise the last digit decides.
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def listed(items: Sequence[object], last: str = "and") -> str:
    """Items as prose lists them, without a serial comma: ``listed([1, 4, 8, 16])`` is ``'1, 4, 8 and 16'``."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise TypeError(f"items must be a non-empty sequence of things to list, got {items!r}")
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None):
    """A Markdown table for a page: ``align`` holds one ``l`` or ``r`` per column (default: all left).

    Returns an ``IPython.display.Markdown`` object, which a page displays as a table.
    """
    from IPython.display import Markdown

    align = align or "l" * len(header)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align must hold one 'l' or 'r' per column ({len(header)}), got {align!r}")
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells for {len(header)} columns: {row!r}")
    rule = ["--:" if a == "r" else ":--" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return Markdown("\n".join(lines))


def wrap(text: str, width: int = WIDTH, indent: str = "") -> str:
    """``text`` broken at spaces into lines of at most ``width`` columns, later lines indented by ``indent``."""
    width = checks.whole("width", width, minimum=len(indent) + 1)
    return "\n".join(plain.wrap(text, later=indent, width=width))


_LABEL = re.compile(r"^\S.*?\s{2,}(?=\S)")  # "plan         ": a label and the spaces that align its value


def hang(text: str, width: int = WIDTH) -> str:
    """Labelled lines (``label   value``) wrapped to ``width``, each value's later lines under its start."""
    lines = []
    for line in text.splitlines():
        label = _LABEL.match(line)
        lines.append(wrap(line, width, " " * len(label.group(0))) if label and len(line) > width else line)
    return "\n".join(lines)
