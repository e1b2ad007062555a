"""What the build knows of Quarto's markup: cell options, labels, figure and table divs, captions.

One reader of the markup for the preview, the notebooks and the tests, so
they agree on what a page's figures and captions are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPTION = re.compile(r"^#\|\s*([\w-]+)\s*:\s*(.*)$")
CODE_BLOCK = re.compile(r"^```\{python\}.*?^```", re.M | re.S)
INLINE = re.compile(r"`\{python\}\s+([^`]+)`")
# A cross-reference div: ::: {#fig-name} ... caption paragraph ... :::  (the caption is its last paragraph).
CAPTION_DIV = re.compile(
    r"^(?P<fence>:{3,})\s*\{#(?P<label>(?:fig|tbl)-[\w-]+)[^}\n]*\}\s*\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
DIV_OPEN = re.compile(r"^:{3,}\s*\{#((?:fig|tbl)-[\w-]+)[^}\n]*\}\s*$", re.M)
DIV_CLOSE = re.compile(r"^:{3,}\s*$", re.M)
PIPE_CAPTION = re.compile(r"^: (.*?)\s*\{#(tbl-[\w-]+)\}\s*$", re.M)   # a Markdown table's caption line


def cell_options(source: str) -> dict[str, str]:
    """The ``#| key: value`` options at the top of a code cell."""
    found = {}
    for line in source.splitlines():
        match = OPTION.match(line)
        if not match:
            break
        found[match.group(1)] = match.group(2).strip().strip('"').strip("'")
    return found


@dataclass(frozen=True)
class Captioned:
    """A figure or table of a page: its label, its caption's source text, and how it is written."""

    label: str
    caption: str
    div: bool        # True: a ::: {#label} div with the caption as its last paragraph; False: cell options
    cells: tuple[str, ...]   # the code cells inside it (a cell-option figure is its own cell)


def last_paragraph(markdown: str) -> str:
    """The last paragraph of a block of Markdown (code blocks removed): a div's caption."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", CODE_BLOCK.sub("", markdown)) if p.strip()]
    return paragraphs[-1] if paragraphs else ""


def code_cells(text: str) -> list[str]:
    """The bodies of a page's ``{python}`` code cells, options included."""
    return [block.split("\n", 1)[1].rsplit("```", 1)[0] for block in CODE_BLOCK.findall(text)]


def captioned(text: str) -> list[Captioned]:
    """Every labelled figure and table of a ``.qmd`` page, as a div or as a cell with options."""
    found = []
    for match in CAPTION_DIV.finditer(text):
        body = match.group("body")
        found.append(Captioned(match.group("label"), last_paragraph(body), True, tuple(code_cells(body))))
    found += [Captioned(label, caption, False, ()) for caption, label in PIPE_CAPTION.findall(CODE_BLOCK.sub("", text))]
    inside = {cell for c in found for cell in c.cells}
    for cell in code_cells(text):
        options = cell_options(cell)
        label = options.get("label", "")
        if label.startswith(("fig-", "tbl-")) and cell not in inside:
            found.append(Captioned(label, options.get("fig-cap") or options.get("tbl-cap") or "", False, (cell,)))
    return found


UNNUMBERED = re.compile(r"^# .*\{[^}]*(?:\.unnumbered\b|(?<=[{\s])-(?=[\s}]))[^}]*\}\s*$", re.M)


def is_numbered(markdown: str) -> bool:
    """Whether Quarto numbers a page as a chapter: its ``#`` heading is not marked ``{.unnumbered}``."""
    return not UNNUMBERED.search(markdown)


def chapter_numbers(sources: list[str]) -> list[int | None]:
    """The chapter number Quarto gives each page of a book, from the pages' sources in book order."""
    numbers, count = [], 0
    for source in sources:
        if is_numbered(source):
            count += 1
            numbers.append(count)
        else:
            numbers.append(None)
    return numbers
