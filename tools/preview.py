"""An HTML preview of the executed book, for machines without Quarto.

Quarto resolves cross-references, captions, callouts and citations when it
renders the site.  The preview does a plain version of the same to executed
notebooks, so an author without Quarto reads numbered figures and working
links rather than raw ``@fig-`` markup: enough to review a page, not a
replacement for ``quarto render``.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from .quarto import DIV_CLOSE, DIV_OPEN, cell_options, chapter_numbers

HEADING_LABEL = re.compile(r"^(#+ .*?)\s*\{#((?:sec)-[\w-]+)[^}]*\}\s*$", re.M)
HEADING_ATTRS = re.compile(r"^(#+ .*?)\s*\{[^}]*\}\s*$", re.M)
EQUATION_LABEL = re.compile(r"\$\$\s*\{#(eq-[\w-]+)\}")
TABLE_CAPTION = re.compile(r"^: (.*?)\s*\{#(tbl-[\w-]+)\}\s*$", re.M)
FENCE = re.compile(r"^:::+.*$", re.M)
REFERENCE = re.compile(r"(?<![\w@`/])-?@((?:sec|fig|tbl|eq)-[\w-]*\w)")
CITATION = re.compile(r"\[([^\[\]]*?@[A-Za-z][^\[\]]*)\]")


@dataclass
class Target:
    page: str
    text: str


def collect_targets(pages: list[tuple[str, object]]) -> dict[str, Target]:
    """Label -> where it lives and how a reference to it reads ("Figure 2.3", a section title)."""
    targets: dict[str, Target] = {}
    sources = ["\n".join(c.source for c in notebook.cells if c.cell_type == "markdown") for _, notebook in pages]
    for (href, notebook), number in zip(pages, chapter_numbers(sources), strict=True):
        counts = {"fig": 0, "tbl": 0, "eq": 0}

        def add(label: str, kind: str, href=href, number=number, counts=counts) -> None:
            counts[kind] += 1
            name = {"fig": "Figure", "tbl": "Table", "eq": "Equation"}[kind]
            targets[label] = Target(href, f"{name} {number}.{counts[kind]}")

        for cell in notebook.cells:
            if cell.cell_type == "markdown":
                for title, label in HEADING_LABEL.findall(cell.source):
                    targets[label] = Target(href, title.lstrip("# ").strip())
                for label in EQUATION_LABEL.findall(cell.source):
                    add(label, "eq")
                for _, label in TABLE_CAPTION.findall(cell.source):
                    add(label, "tbl")
                for label in DIV_OPEN.findall(cell.source):
                    add(label, label[:3])
            else:
                label = cell_options(cell.source).get("label", "")
                if label.startswith(("fig-", "tbl-")):
                    add(label, label[:3])
    return targets


def _link(label: str, targets: dict[str, Target], here: str) -> str:
    target = targets.get(label)
    if target is None:
        return f"**??{label}**"
    href = f"#{label}" if target.page == here else f"{_relative(here, target.page)}#{label}"
    return f"[{target.text}]({href})"


def _relative(here: str, there: str) -> str:
    depth = here.count("/")
    return "../" * depth + there


def _caption_div(source: str, pending: str | None, targets: dict[str, Target]) -> tuple[str, str | None]:
    """Mark a div figure's caption (the paragraph before its closing fence) and return the open label.

    jupytext splits a ``::: {#fig-x}`` div around its code cell: the opening fence ends one Markdown
    cell and the caption with the closing fence starts a later one.
    """
    if pending:
        close = DIV_CLOSE.search(source)
        if close:
            before, after = source[:close.start()].rstrip(), source[close.start():]
            head, _, caption = before.rpartition("\n\n")
            marked = f'<a id="{pending}"></a>*{targets[pending].text}: {caption.strip()}*'
            source, pending = (head + "\n\n" if head else "") + marked + "\n" + after, None
    opened = DIV_OPEN.findall(source)
    return source, (opened[-1] if opened else pending)


def render_markdown(source: str, targets: dict[str, Target], here: str) -> str:
    """Quarto markup -> plain Markdown with anchors, numbered links and visible citations."""
    source = HEADING_LABEL.sub(lambda m: f'{m.group(1)} <a id="{m.group(2)}"></a>', source)
    source = HEADING_ATTRS.sub(lambda m: m.group(1), source)
    source = EQUATION_LABEL.sub(lambda m: f'$$ <a id="{m.group(1)}"></a>({targets[m.group(1)].text})', source)
    source = TABLE_CAPTION.sub(
        lambda m: f'<a id="{m.group(2)}"></a>*{targets[m.group(2)].text}: {m.group(1)}*', source)
    source = FENCE.sub("", source)
    source = CITATION.sub(lambda m: "(" + html.escape(m.group(1).replace("@", "")) + ")", source)
    return REFERENCE.sub(lambda m: _link(m.group(1), targets, here), source)


def prepare(notebook, targets: dict[str, Target], here: str):
    """Rewrite one executed notebook for the preview, in place; captions follow their figures."""
    import nbformat

    cells = []
    pending = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            source, pending = _caption_div(cell.source, pending, targets)
            cell.source = render_markdown(source, targets, here)
            cells.append(cell)
            continue
        cells.append(cell)
        options = cell_options(cell.source)
        label = options.get("label", "")
        caption = options.get("fig-cap") or options.get("tbl-cap")
        if label in targets and caption:
            text = render_markdown(caption, targets, here)
            cells.append(nbformat.v4.new_markdown_cell(f'<a id="{label}"></a>*{targets[label].text}: {text}*'))
    notebook.cells = cells
    return notebook


def write(root: Path, results: list, out: Path) -> Path:
    """Write each executed page as HTML under ``out`` and an index page; return the index."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_input_tags = ("remove_input",)
    config.TagRemovePreprocessor.remove_cell_tags = ("remove_cell",)
    exporter = HTMLExporter(config=config)

    pages = [(str(r.path.relative_to(root).with_suffix(".html")), r.notebook) for r in results]
    targets = collect_targets(pages)
    links = []
    for (href, notebook), result in zip(pages, results, strict=True):
        body, _ = exporter.from_notebook_node(prepare(notebook, targets, href))
        target = out / href
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
        title = next((c.source.splitlines()[0].lstrip("# ").split(" <a id")[0]
                      for c in notebook.cells if c.cell_type == "markdown" and c.source.startswith("# ")), href)
        links.append(f'<li><a href="{href}">{html.escape(title)}</a> <small>({result.seconds:.1f} s)</small></li>')
    index = out / "index.html"
    index.write_text(
        "<!doctype html><meta charset='utf-8'><title>Serving LLMs, by the numbers (preview)</title>"
        "<h1>Serving LLMs, by the numbers</h1><p>Preview built without Quarto: every page executed "
        "from a clean kernel. Citations, callouts and search render only with <code>quarto render</code>.</p>"
        f"<ol>{''.join(links)}</ol>",
        encoding="utf-8",
    )
    return index
