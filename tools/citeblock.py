"""The "Cite this page" block of a page, for the preview: what ``filters/cite-this.lua`` writes on the site.

Quarto builds no citation block for a book, so a Lua filter appends one to every HTML page:
the page's BibTeX (an ``@incollection`` in the book, at the page's own address) and the
address of each figure (the page's address and the figure's anchor).  The preview is built
without Quarto; this module writes the same entry from the same settings (``book:`` of
``_quarto.yml``) and the page's source, and a test runs the filter with pandoc and compares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

FIGURE_LABEL = re.compile(r"\{#(fig-[\w-]+)|^#\|\s*label:\s*(fig-[\w-]+)", re.M)
HEADING = re.compile(r"^# (.*?)\s*(?:\{[^{}]*\})?\s*$", re.M)
FENCED = re.compile(r"^(```+|~~~+).*?^\1\s*$", re.M | re.S)


@dataclass(frozen=True)
class Entry:
    """One page as a citation: a chapter (``@incollection``) of the book at its own address."""

    key: str
    title: str
    book: str
    author: str
    date: str
    url: str

    @property
    def year(self) -> str:
        return self.date[:4]


def page_entry(config: dict, path: str, source: str) -> Entry:
    """The citation of the page at ``path`` (relative to the book's root) with ``source`` as its text."""
    book = config.get("book", {})
    date = str(book.get("date", ""))
    stem = str(PurePosixPath(path).with_suffix(""))
    heading = HEADING.search(FENCED.sub("", source))
    title = re.sub(r"[*`]", "", heading.group(1)) if heading else path
    site = str(book.get("site-url") or config.get("citation", {}).get("url", "")).rstrip("/")
    return Entry(key=f"servebook{date[:4]}-" + re.sub(r"[/_]", "-", stem), title=title,
                 book=str(book.get("title", "")), author=str(book.get("author", "")), date=date,
                 url=f"{site}/{stem}.html")


def bibtex(entry: Entry) -> str:
    return "\n".join([
        f"@incollection{{{entry.key},",
        f"  title     = {{{{{entry.title}}}}},",
        f"  booktitle = {{{{{entry.book}}}}},",
        f"  author    = {{{{{entry.author}}}}},",
        f"  year      = {{{entry.year}}},",
        f"  url       = {{{entry.url}}}",
        "}",
    ])


def figure_labels(source: str) -> list[str]:
    """Every figure label of a page once, in page order: a ``{#fig-...}`` attribute or a cell's label."""
    found: list[str] = []
    for match in FIGURE_LABEL.finditer(source):
        label = match.group(1) or match.group(2)
        if label not in found:
            found.append(label)
    return found


def markdown(entry: Entry, labels: list[str]) -> str:
    """The block as Markdown, as the filter writes it (references to figures left for the renderer)."""
    lines = ["## Cite this page {#cite-this-page .unnumbered .unlisted}", "", "```bibtex", bibtex(entry), "```"]
    if labels:
        lines += ["", "Each figure at its own address:", ""]
        lines += [f"- @{label}: <{entry.url}#{label}>" for label in labels]
    return "\n".join(lines) + "\n"
