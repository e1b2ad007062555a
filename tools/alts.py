"""The figures' alt texts in the pages, written by the build from the numbers the figures draw.

Quarto reads ``#| fig-alt:`` as a static cell option (its Jupyter engine evaluates
no expression there), so an alt text cannot be computed when the page runs, as the
prose's numbers are.  It is computed when the figures are: ``python -m tools.build
figures`` draws every figure and rewrites the ``fig-alt`` of each cell that calls
``figures.<name>(...)`` with the text :func:`servebook.book.figures.alt` gives for
it.  A page's alt texts are therefore build output, like ``figures/``, and the
tests hold every page to what the build would write.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .pages import book_pages

ALT_OPTION = re.compile(r"^(#\|\s*fig-alt\s*:\s*)(.*)$")
FIGURE_CALL = re.compile(r"\bfigures\.(\w+)\(")
CELL_OPEN = re.compile(r"^```\{python\}")


@dataclass(frozen=True)
class FigureAlt:
    """One figure cell of a page: the line of its ``fig-alt``, the figure function it calls, the text now."""

    line: int      # 0-based index of the ``#| fig-alt:`` line in the page
    name: str      # the figure function the cell calls
    text: str      # the alt text, unquoted


def figure_alts(text: str) -> list[FigureAlt]:
    """Every code cell of ``text`` that has a ``fig-alt`` and calls a figure function, in page order."""
    lines, found, i = text.split("\n"), [], 0
    while i < len(lines):
        if not CELL_OPEN.match(lines[i]):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        body = range(i + 1, end)
        alt = next((j for j in body if ALT_OPTION.match(lines[j])), None)
        call = next((m for j in body if not lines[j].startswith("#|") for m in [FIGURE_CALL.search(lines[j])] if m),
                    None)
        if alt is not None and call is not None:
            value = ALT_OPTION.match(lines[alt]).group(2).strip()
            found.append(FigureAlt(alt, call.group(1), value[1:-1] if value[:1] == value[-1:] == '"' else value))
        i = end + 1
    return found


def rewrite(text: str, describers: dict[str, Callable[[], str]]) -> str:
    """``text`` with the ``fig-alt`` of every cell whose figure has a describer replaced by its text."""
    lines = text.split("\n")
    for item in figure_alts(text):
        if item.name in describers:
            prefix = ALT_OPTION.match(lines[item.line]).group(1)
            lines[item.line] = f'{prefix}"{describers[item.name]()}"'
    return "\n".join(lines)


def write(root: Path) -> list[Path]:
    """Rewrite the alt texts of every page of the book; return the pages whose text changed."""
    from servebook.book import figures

    describers = {name: (lambda name=name: figures.alt(name)) for name in figures.alt_texts()}
    changed = []
    for path in book_pages(root):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, describers)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed
