"""An HTML preview of the executed book, for machines without Quarto.

Quarto resolves cross-references, captions, callouts and citations when it
renders the site.  The preview does a plain version of the same to the executed
pages with :mod:`tools.render`, numbered as the notebooks and as Quarto number
them, so an author without Quarto reads "Figure 2.3" and working links rather
than raw ``@fig-`` markup: enough to review a page, not a replacement for
``quarto render``.
"""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

from . import citeblock, render
from .pages import book_context, config, page_of

# The preview is the site without Quarto: it shows what the site shows (content-visible when-format="html"),
# and a placeholder for each Observable JS cell, which only a browser on the rendered site runs.
PREVIEW_FORMAT = "html"


def relative_href(here: str, there: str, anchor: str) -> str:
    """A link from page ``here`` to ``anchor`` on page ``there`` (addresses relative to the site's root)."""
    if there == here:
        return f"#{anchor}"
    return "../" * here.count("/") + f"{there}#{anchor}"


def preview_notebook(notebook, items: list):
    """The executed notebook with its Markdown rendered; hidden code tagged for nbconvert to remove."""
    import nbformat

    cells = []
    for item in items:
        if isinstance(item, render.Markdown):
            cells.append(nbformat.v4.new_markdown_cell(item.text))
            continue
        tags = set(item.cell.metadata.get("tags", []))
        if item.hidden:
            tags.add("remove_cell" if item.silent else "remove_input")
        item.cell.metadata["tags"] = sorted(tags)
        cells.append(item.cell)
    notebook.cells = cells
    return notebook


def cite_cell(root: Path, path: str):
    """The page's "Cite this page" block, as ``filters/cite-this.lua`` appends it on the site."""
    import nbformat

    source = (root / path).read_text(encoding="utf-8")
    entry = citeblock.page_entry(config(root), path, source)
    return nbformat.v4.new_markdown_cell(citeblock.markdown(entry, citeblock.figure_labels(source)))


def write(root: Path, results: list, out: Path) -> Path:
    """Write each executed page as HTML under ``out`` and an index page; return the index."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_input_tags = ("remove_input",)
    config.TagRemovePreprocessor.remove_cell_tags = ("remove_cell",)
    exporter = HTMLExporter(config=config)

    links = []
    whole_book = book_context(root, render.Style(lambda there, anchor: f"{there}#{anchor}", anchors=True,
                                                 format=PREVIEW_FORMAT))
    for result in results:
        page = page_of(root, result.path)
        style = render.Style(lambda there, anchor, here=page.html: relative_href(here, there, anchor), anchors=True,
                             format=PREVIEW_FORMAT)
        book = replace(whole_book, style=style)
        cells = [*result.notebook.cells, cite_cell(root, page.path)]
        notebook = preview_notebook(result.notebook, render.render(cells, page, book))
        body, _ = exporter.from_notebook_node(notebook)
        target = out / page.html
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
        title = next((c.source.splitlines()[0].lstrip("# ").split(" <a id")[0]
                      for c in notebook.cells if c.cell_type == "markdown" and c.source.startswith("# ")), page.html)
        links.append(f'<li><a href="{page.html}">{html.escape(title)}</a> <small>({result.seconds:.1f} s)</small></li>')
    index = out / "index.html"
    index.write_text(
        "<!doctype html><meta charset='utf-8'><title>Serving LLMs, by the numbers (preview)</title>"
        "<h1>Serving LLMs, by the numbers</h1><p>Preview built without Quarto: every page executed "
        "from a clean kernel. Search and the site's layout render only with <code>quarto render</code>.</p>"
        f"<ul>{''.join(links)}</ul>",
        encoding="utf-8",
    )
    return index
