"""Quarto's markup as a reader sees it: numbered references, short citations, callouts, captions.

Quarto resolves ``@fig-x``, ``[@key]``, ``::: {.callout-*}`` and ``{#label}`` when it
renders the site.  The Colab notebooks and the HTML preview are built without Quarto, so
this module does the same to a page's cells: a reference reads "Figure 2.3" and links to
its anchor, a citation reads "(Kwon et al. 2023)" and links to the references page, a
callout becomes a quoted block (folded in a ``<details>`` element when the page folds it),
a heading carries its section number, a caption its figure number.  One walk numbers a
page for both: :func:`find_targets` walks every page once to learn the labels, then
:func:`render` walks a page again and writes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .quarto import (
    ANY_BADGE,
    HEADING_ATTRS,
    OJS_FENCE,
    OPTION,
    PIPE_CAPTION,
    VISIBILITY,
    BookPage,
    cell_options,
    heading_is_unnumbered,
    shown_in_format,
)

REFERENCE = re.compile(r"(?<![\w@`/])(-?)@((?:sec|fig|tbl|eq)-[\w-]*\w)")
CITE_GROUP = re.compile(r"\[([^\[\]]*?(?<![\w.])-?@[A-Za-z][^\[\]]*?)\](?![(\[{])")
CITE_ITEM = re.compile(r"^(?P<pre>.*?)(?P<minus>-?)@(?P<key>[A-Za-z][\w:.#$%&+?<>~/-]*\w)(?P<post>.*)$", re.S)
NARRATIVE = re.compile(r"(?<![\w@`/.\[-])@([A-Za-z][\w:.-]*\w)")
EQUATION_LABEL = re.compile(r"\$\$\s*\{#(eq-[\w-]+)\}")
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)(?:\{([^}]*)\})?")
LINK_ATTRS = re.compile(r"(\]\([^)\s]*\))\{[^}]*\}")
SPAN = re.compile(r"(?<!!)\[([^\]]*)\]\{[^}]*\}")
PROTECTED = re.compile(r"^(```+|~~~+).*?^\1\s*$|`[^`\n]+`", re.M | re.S)
FENCE = re.compile(r"^\s*(```+|~~~+)")
DIV_OPEN = re.compile(r"^(:{3,})\s*(?:\{(?P<attrs>[^}]*)\}|(?P<word>\S+))\s*$")
DIV_CLOSE = re.compile(r"^:{3,}\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
KINDS = {"fig": "Figure", "tbl": "Table", "eq": "Equation", "sec": "Section", "chapter": "Chapter",
         "appendix": "Appendix"}
CALLOUT_TITLES = {"note": "Note", "tip": "Tip", "warning": "Warning", "important": "Important", "caution": "Caution"}
# What stands for an Observable JS cell, which only a browser on the rendered site runs.
OJS_PLACEHOLDER = {
    "html": ('<div class="ojs-placeholder" style="border: 1px dashed #888; padding: 0.5em 1em;">'
             "<b>Interactive cell (Observable JS).</b> It runs in the reader's browser on the site that "
             "<code>quarto render</code> builds; this preview cannot run it.</div>"),
    "ipynb": ("> **Interactive cell (Observable JS).** It runs in the reader's browser on the book's web page; "
              "a notebook cannot run it."),
}


@dataclass(frozen=True)
class Target:
    """Where a label lives and how a reference to it reads."""

    page: str              # the page's address, e.g. "chapters/kv-cache.html"
    kind: str              # a key of KINDS
    number: str | None     # "2.3", "2", "A"; None for an unnumbered section
    title: str = ""

    @property
    def text(self) -> str:
        """"Figure 2.3", "Section 2.1", "Chapter 2", "Appendix A"; an unnumbered section reads as its title."""
        return f"{KINDS[self.kind]} {self.number}" if self.number else self.title or KINDS[self.kind]


@dataclass(frozen=True)
class Style:
    """What differs between the notebooks and the preview: where links go, whether anchors are written."""

    href: Callable[[str, str], str]   # (page address, anchor) -> link
    anchors: bool = False             # write <a id="label"></a> where a label is defined
    format: str = "ipynb"             # the output format, for content-visible/-hidden blocks: "ipynb" or "html"


@dataclass(frozen=True)
class Book:
    """What rendering one page needs to know of the others."""

    targets: dict[str, Target]
    citations: dict[str, tuple[str, str]]   # key -> (authors, year), from tools.citations
    style: Style
    references_page: str = "references.html"


@dataclass
class Markdown:
    text: str


@dataclass
class Code:
    """A code cell without its ``#|`` options, and how the page shows it."""

    cell: object
    hidden: bool = False     # its code is not shown (echo: false, include: false, a folded solution)
    silent: bool = False     # its output is not shown either (include: false, output: false)
    runs: bool = True        # eval: false cells are shown and never run
    title: str = ""          # what stands for hidden code: "Figure 2.3", "Solution", "Set-up"


@dataclass
class _Div:
    kind: str                    # "callout", "float", "refs", "hidden" (not in this format), "other"
    label: str = ""
    callout: str = ""
    title: str = ""
    collapse: bool = False
    awaiting_title: bool = True  # a callout's first heading is its title
    shown: bool = False          # its opening has been written in the current cell
    start: int = 0               # where its lines begin in the current cell's output


def _attributes(text: str) -> dict[str, str]:
    return {key: value for key, value in re.findall(r'([\w-]+)="([^"]*)"', text)}


def _protect(text: str, change: Callable[[str], str]) -> str:
    """``change`` applied to ``text`` outside code blocks and inline code."""
    pieces, last = [], 0
    for match in PROTECTED.finditer(text):
        pieces += [change(text[last:match.start()]), match.group(0)]
        last = match.end()
    return "".join([*pieces, change(text[last:])])


@dataclass
class _Walk:
    """One pass over one page's cells: numbers what Quarto numbers, and writes what the reader reads."""

    page: BookPage
    book: Book
    found: dict[str, Target] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"fig": 0, "tbl": 0, "eq": 0})
    sections: list[int] = field(default_factory=list)
    divs: list[_Div] = field(default_factory=list)
    fence: str = ""
    out: list[str] = field(default_factory=list)
    ojs: bool = False                 # the open fence is an Observable JS cell's
    placeholder_end: int | None = None  # where the last OJS placeholder of this cell ends

    # --- labels and numbers

    def number(self, label: str) -> Target:
        kind = label.split("-", 1)[0]
        self.counts[kind] += 1
        prefix = f"{self.page.number}." if self.page.number else ""
        self.found[label] = Target(self.page.html, kind, f"{prefix}{self.counts[kind]}")
        return self.found[label]

    def anchor(self, label: str) -> str:
        return f'<a id="{label}"></a>' if self.book.style.anchors else ""

    def link(self, label: str, number_only: bool = False) -> str:
        target = self.book.targets.get(label)
        if target is None:
            return f"**??{label}**"
        text = target.number if number_only and target.number else target.text
        return f"[{text}]({self.book.style.href(target.page, label)})"

    # --- inline markup

    def cite(self, key: str, minus: str = "", narrative: bool = False) -> str:
        authors, year = self.book.citations[key]
        href = self.book.style.href(self.book.references_page, f"ref-{key}")
        if narrative:
            return f"[{authors} ({year})]({href})"
        return f"[{year if minus else f'{authors} {year}'}]({href})"

    def citation_group(self, match: re.Match) -> str:
        items = [CITE_ITEM.match(item.strip()) for item in match.group(1).split(";")]
        if not all(items) or not all(i["key"] in self.book.citations or i["key"] in self.book.targets
                                     or REFERENCE.match("@" + i["key"]) for i in items):
            return match.group(0)
        cited = [i["key"] in self.book.citations for i in items]
        shown = [f"{i['pre']}{self.cite(i['key'], i['minus']) if c else self.link(i['key'], bool(i['minus']))}"
                 f"{i['post']}" for i, c in zip(items, cited, strict=True)]
        return "(" + "; ".join(shown) + ")" if any(cited) else "; ".join(shown)

    def inline(self, text: str) -> str:
        text = EQUATION_LABEL.sub(lambda m: self.equation(m.group(1)), text)
        text = CITE_GROUP.sub(self.citation_group, text)
        text = REFERENCE.sub(lambda m: self.link(m.group(2), bool(m.group(1))), text)
        text = NARRATIVE.sub(lambda m: self.cite(m.group(1), narrative=True)
                             if m.group(1) in self.book.citations else m.group(0), text)
        text = IMAGE.sub(lambda m: f"![{_attributes(m.group(3) or '').get('fig-alt', m.group(1))}]({m.group(2)})",
                         text)
        return SPAN.sub(r"\1", LINK_ATTRS.sub(r"\1", text))

    def equation(self, label: str) -> str:
        target = self.number(label)
        return f"\\tag{{{target.number}}}$${self.anchor(label)}"

    # --- lines

    def quote(self, depth: int | None = None) -> str:
        """The blockquote prefix of the open callouts (the first ``depth`` of them) that are not folded."""
        return "".join("> " for d in self.divs[:depth] if d.kind == "callout" and not d.collapse)

    @property
    def hidden(self) -> bool:
        """Inside a block that this format does not show (``.content-visible when-format=...``)."""
        return any(div.kind == "hidden" for div in self.divs)

    def emit(self, line: str) -> None:
        if self.hidden:
            return
        unopened = [d for d in self.divs if d.kind == "callout" and not d.shown]
        if unopened and not line.strip():
            return  # blank lines before a callout's first words
        for div in unopened:
            div.awaiting_title = False
            self.open_callout(div)
        quote = self.quote()
        self.out.append((quote + line).rstrip() if quote else line)

    def open_callout(self, div: _Div) -> None:
        div.shown = True
        title = div.title or CALLOUT_TITLES.get(div.callout, "Note")
        quote = self.quote(self.divs.index(div))
        if div.collapse:
            self.out += [f"{quote}<details>", f"{quote}<summary><b>{title}</b></summary>", quote.rstrip()]
        else:
            self.out += [f"{quote}> **{title}**", f"{quote}>"]

    def close_callout(self, div: _Div) -> None:
        """End a callout's block in this cell (a code cell inside it, or its closing fence)."""
        if div.shown and div.collapse:
            quote = self.quote(self.divs.index(div))
            self.out += [quote.rstrip(), f"{quote}</details>"]
        div.shown = False

    def open_div(self, attrs: str) -> None:
        label = re.match(r"#((?:fig|tbl)-[\w-]+)", attrs.strip())
        callout = re.search(r"\.callout-(\w+)", attrs)
        if not shown_in_format(attrs, self.book.style.format):
            self.divs.append(_Div("hidden"))
        elif VISIBILITY.search(attrs):
            self.divs.append(_Div("other"))
        elif label:
            self.number(label.group(1))
            self.divs.append(_Div("float", label=label.group(1), start=len(self.out)))
        elif callout:
            given = _attributes(attrs)
            self.divs.append(_Div("callout", callout=callout.group(1), title=given.get("title", ""),
                                  collapse=given.get("collapse") == "true"))
        elif re.match(r"#refs\b", attrs.strip()):
            self.divs.append(_Div("refs"))
        else:
            self.divs.append(_Div("other"))

    def close_div(self) -> None:
        div = self.divs[-1]
        if div.kind == "callout":
            self.close_callout(div)
        self.divs.pop()
        if div.kind == "float":
            self.caption(div)
        elif div.kind == "refs":
            self.out += self.bibliography()

    def caption(self, div: _Div) -> None:
        """The last paragraph of a figure or table div is its caption: prefix it with the number."""
        end = len(self.out)
        while end > div.start and not self.out[end - 1].strip():
            end -= 1
        begin = end
        while begin > div.start and self.out[begin - 1].strip():
            begin -= 1
        if begin < end:
            target = self.found[div.label]
            self.out[begin] = f"{self.anchor(div.label)}**{target.text}:** {self.out[begin]}"

    def bibliography(self) -> list[str]:
        lines = []
        for key, (authors, year) in sorted(self.book.citations.items(), key=lambda kv: kv[1]):
            lines.append(f'- <a id="ref-{key}"></a>{authors} {year}.' if self.book.style.anchors
                         else f"- {authors} {year}.")
        return lines

    def heading(self, hashes: str, text: str) -> None:
        attrs = HEADING_ATTRS.search(text)
        title = HEADING_ATTRS.sub("", text).strip() if attrs else text
        label = re.search(r"#(sec-[\w-]+)", attrs.group(1)) if attrs else None
        unnumbered = bool(attrs) and heading_is_unnumbered(attrs.group(1))
        level = len(hashes)
        number = None
        if level == 1:
            number = self.page.number
            kind = ("appendix" if self.page.appendix else "chapter") if number else "sec"
        elif self.page.number and not unnumbered:
            depth = level - 1
            self.sections = (self.sections + [0] * depth)[:depth]
            self.sections[-1] += 1
            number = ".".join([self.page.number, *map(str, self.sections)])
            kind = "sec"
        else:
            kind = "sec"
        if label:
            self.found[label.group(1)] = Target(self.page.html, kind, number, title)
        shown = f"{number} {title}" if number else title
        self.emit(f"{hashes} {shown} {self.anchor(label.group(1)) if label else ''}".rstrip())

    def ojs_placeholder(self) -> None:
        """One placeholder for a run of Observable JS cells (they run only in a browser on the site)."""
        after = self.out[self.placeholder_end:] if self.placeholder_end is not None else None
        if self.hidden or (after is not None and not any(line.strip() for line in after)):
            return
        self.emit(OJS_PLACEHOLDER[self.book.style.format])
        self.placeholder_end = len(self.out)

    def line(self, line: str) -> None:
        if self.fence:
            if not self.ojs:
                self.emit(line)
            if line.strip().startswith(self.fence) and not line.strip()[len(self.fence):].strip():
                self.fence, self.ojs = "", False
            return
        fence, opened, heading = FENCE.match(line), DIV_OPEN.match(line), HEADING.match(line)
        caption, ojs = PIPE_CAPTION.match(line), OJS_FENCE.match(line)
        if ojs:
            self.fence, self.ojs = ojs.group(1), True
            self.ojs_placeholder()
        elif fence:
            self.fence = fence.group(1)
            self.emit(line)
        elif DIV_CLOSE.match(line) and self.divs:
            self.close_div()
        elif opened:
            self.open_div(opened.group("attrs") or "." + opened.group("word"))
        elif heading and self.divs and self.divs[-1].kind == "callout" and self.divs[-1].awaiting_title:
            self.divs[-1].title, self.divs[-1].awaiting_title = heading.group(2), False
        elif heading:
            self.heading(heading.group(1), heading.group(2))
        elif caption:
            target = self.number(caption.group(2))
            self.emit(f"{self.anchor(caption.group(2))}**{target.text}:** {caption.group(1)}")
        elif not ANY_BADGE.match(line):
            self.emit(line)

    # --- cells

    def markdown(self, source: str) -> Markdown | None:
        self.out, self.placeholder_end = [], None
        for div in self.divs:
            div.start = 0
        for line in _protect(source, self.inline).splitlines():
            self.line(line)
        for div in reversed(self.divs):
            if div.kind == "callout":
                self.close_callout(div)
        text = "\n".join(self.out).strip("\n")
        return Markdown(text) if text.strip() else None

    def code(self, cell) -> list[Markdown | Code]:
        options = cell_options(cell.source)
        lines = cell.source.splitlines()
        option_lines = next((i for i, line in enumerate(lines) if not OPTION.match(line)), len(lines))
        cell.source = "\n".join(lines[option_lines:]).strip("\n")
        if self.hidden:
            return []  # a cell for another format (the notebook's widget is not the site's)
        for div in self.divs:
            div.awaiting_title = False  # a heading after the code is not the callout's title
        label = options.get("label", "")
        target = self.number(label) if label.startswith(("fig-", "tbl-")) else None
        folded = next((d for d in reversed(self.divs) if d.kind == "callout" and d.collapse), None)
        floating = next((d for d in reversed(self.divs) if d.kind == "float"), None)
        if folded:
            title = folded.title or "Solution"
        elif target or floating:
            title = (target or self.found[floating.label]).text
        else:
            title = "Set-up"
        code = Code(cell, hidden=options.get("echo") == "false" or options.get("include") == "false" or bool(folded),
                    silent=options.get("include") == "false" or options.get("output") == "false",
                    runs=options.get("eval") != "false", title=title)
        caption = options.get("fig-cap") or options.get("tbl-cap")
        if target and caption:
            return [code, Markdown(f"{self.anchor(label)}**{target.text}:** {self.inline(caption)}")]
        return [code]


def render(cells: Iterable, page: BookPage, book: Book) -> list[Markdown | Code]:
    """A page's cells (a jupytext notebook's, executed or not) as what a reader sees; raw cells are dropped."""
    walk = _Walk(page, book)
    items: list[Markdown | Code] = []
    for cell in cells:
        if cell.cell_type == "markdown":
            item = walk.markdown(cell.source)
            items += [item] if item else []
        elif cell.cell_type == "code":
            items += walk.code(cell)
    return items


def find_targets(pages: Iterable[tuple[BookPage, Iterable]]) -> dict[str, Target]:
    """Every label of the book: each page walked once in book order."""
    found: dict[str, Target] = {}
    silent = Book({}, {}, Style(lambda page, anchor: ""))
    for page, cells in pages:
        walk = _Walk(page, silent)
        for cell in cells:
            if cell.cell_type == "markdown":
                walk.markdown(cell.source)
            elif cell.cell_type == "code":
                walk.code(type(cell)(cell))  # a copy: the walk strips the options it reads
        found.update(walk.found)
    return found
