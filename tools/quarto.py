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
HEADING_ATTRS = re.compile(r"\{([^{}]*)\}\s*$")
# The Open in Colab badge under a page's title: an image without a caption (so Quarto does not make it a
# figure) whose fig-alt is the alt text, linking to the page's notebook; {accelerator="GPU"} asks for a GPU.
COLAB_BADGE = re.compile(
    r"^\[!\[\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\)\{fig-alt=\"(?P<alt>[^\"]+)\"\}\]"
    r"\((?P<url>[^)\s]+)\)(?:\{(?P<attrs>[^}]*)\})?\s*$", re.M)
ANY_BADGE = re.compile(r"^\[!\[[^\]]*\]\(https://colab\.research\.google\.com/assets/colab-badge\.svg\).*$", re.M)


def is_numbered(markdown: str) -> bool:
    """Whether Quarto numbers a page as a chapter: its ``#`` heading is not marked ``{.unnumbered}``."""
    return not UNNUMBERED.search(markdown)


def heading_is_unnumbered(attributes: str) -> bool:
    """Whether a heading's ``{...}`` attributes (without the braces) hold ``.unnumbered`` or ``-``."""
    return bool(re.search(r"(?:^|\s)(?:\.unnumbered|-)(?=\s|$)", attributes))


@dataclass(frozen=True)
class BookPage:
    """A page of the book as Quarto numbers it: ``"2"`` for the second chapter, ``"A"`` for the first
    appendix, ``None`` for an unnumbered page (the preface, the references)."""

    path: str               # relative to the book's root, e.g. "chapters/kv-cache.qmd"
    number: str | None
    appendix: bool = False

    @property
    def html(self) -> str:
        """The page's address relative to the site's root."""
        return self.path.rsplit(".", 1)[0] + ".html"


def _listed(entries) -> list[str]:
    """Files of a ``chapters:`` or ``appendices:`` list in order; a part's own file counts as a page too."""
    found: list[str] = []
    for entry in entries or []:
        if isinstance(entry, str):
            found.append(entry)
        elif isinstance(entry, dict):
            for key in ("file", "href"):
                if isinstance(entry.get(key), str):
                    found.append(entry[key])
            if isinstance(entry.get("part"), str) and entry["part"].endswith((".qmd", ".md", ".ipynb")):
                found.append(entry["part"])
            found.extend(_listed(entry.get("chapters")))
    return found


def listed_pages(config: dict) -> tuple[list[str], list[str]]:
    """The chapter files and the appendix files of a ``_quarto.yml`` book, each in book order."""
    book = config.get("book", {})
    return _listed(book.get("chapters")), _listed(book.get("appendices"))


def outline(config: dict, sources: dict[str, str]) -> list[BookPage]:
    """Every page of the book with the number Quarto gives it (one numbering for the preview and the notebooks).

    Chapters are numbered 1, 2, ... in book order across parts; appendices are lettered A, B, ...; a page
    whose ``#`` heading is ``{.unnumbered}`` gets no number and does not advance the count.  A part's own
    page (``part: intro.qmd``) is not a chapter.
    """
    chapters, appendices = listed_pages(config)
    part_pages = {e["part"] for e in config.get("book", {}).get("chapters") or []
                  if isinstance(e, dict) and isinstance(e.get("part"), str) and e["part"] in chapters}
    pages, count, letters = [], 0, 0
    for path in chapters:
        numbered = path not in part_pages and is_numbered(sources.get(path, ""))
        count += numbered
        pages.append(BookPage(path, str(count) if numbered else None))
    for path in appendices:
        numbered = is_numbered(sources.get(path, ""))
        letters += numbered
        pages.append(BookPage(path, chr(ord("A") + letters - 1) if numbered else None, appendix=True))
    return pages


@dataclass(frozen=True)
class Badge:
    """A page's Open in Colab badge: its alt text, the notebook it opens, whether it asks for a GPU."""

    alt: str
    url: str
    gpu: bool


def colab_badge(source: str) -> Badge | None:
    """The page's Colab badge, or None where it has none written as :data:`COLAB_BADGE` says."""
    match = COLAB_BADGE.search(source)
    if not match:
        return None
    gpu = bool(re.search(r'\baccelerator="GPU"', match.group("attrs") or ""))
    return Badge(match.group("alt"), match.group("url"), gpu)


# --- content for one format, and Observable JS cells

# ::: {.content-visible when-format="html"} ... :::  (or unless-format, or .content-hidden): Quarto keeps or drops
# the block per output format; the preview is "html", the Colab notebooks "ipynb".
VISIBILITY = re.compile(r"\.content-(visible|hidden)\b")
FORMAT_CONDITION = re.compile(r'\b(when|unless)-format="([^"]*)"')
# An Observable JS cell: Quarto runs it in the reader's browser; jupytext leaves it in the Markdown.
OJS_FENCE = re.compile(r"^\s*(`{3,})\s*\{ojs\}\s*$")


def shown_in_format(attributes: str, output_format: str) -> bool:
    """Whether a div with ``attributes`` shows in ``output_format``, as Quarto's content-visible/-hidden decide."""
    visibility = VISIBILITY.search(attributes)
    if not visibility:
        return True
    conditions = dict(FORMAT_CONDITION.findall(attributes))
    applies = conditions.get("when", output_format) == output_format and conditions.get("unless") != output_format
    return applies if visibility.group(1) == "visible" else not applies
