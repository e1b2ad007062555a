"""The book's pages as the build reads them: where the root is, which pages, in which order, numbered how.

Pages are the ``.qmd`` files listed in ``_quarto.yml``.  Each is read with jupytext
(``fmt="Rmd"``: Quarto's chunk syntax is R Markdown's).  The numbering and the labels
of every page come from one walk (:mod:`tools.render`), shared by the notebooks, the
preview and the tests.
"""

from __future__ import annotations

from pathlib import Path

from . import citations, render
from .quarto import BookPage, cell_options, listed_pages, outline

ROOT_MARKER = "_quarto.yml"
SITE_URL = "https://servebook.github.io/servebook/"


def find_root(start: Path | None = None) -> Path:
    """The book's root: the nearest folder at or above ``start`` holding ``_quarto.yml``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ROOT_MARKER).exists():
            return folder
    raise FileNotFoundError(f"no {ROOT_MARKER} in {here} or any folder above it")


def config(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / ROOT_MARKER).read_text(encoding="utf-8")) or {}


def site_url(root: Path) -> str:
    """The published site's address, ending in ``/`` (``book.site-url`` of ``_quarto.yml``)."""
    return (config(root).get("book", {}).get("site-url") or SITE_URL).rstrip("/") + "/"


def book_outline(root: Path) -> list[BookPage]:
    """Every page listed in ``_quarto.yml``, in book order, with the number Quarto gives it."""
    book = config(root)
    chapters, appendices = listed_pages(book)
    sources = {p: (root / p).read_text(encoding="utf-8") for p in chapters + appendices if (root / p).exists()}
    return outline(book, sources)


def book_pages(root: Path) -> list[Path]:
    """Every page listed in ``_quarto.yml``, in book order."""
    return [root / page.path for page in book_outline(root)]


def read_page(path: Path):
    """A ``.qmd`` page as a notebook, with set-up cells tagged so previews hide their code."""
    import jupytext

    notebook = jupytext.reads(Path(path).read_text(encoding="utf-8"), fmt="Rmd")
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in notebook.cells:
        if cell.cell_type == "code":
            options = cell_options(cell.source)
            tags = set(cell.metadata.get("tags", []))
            if options.get("echo") == "false":
                tags.add("remove_input")
            if options.get("include") == "false":
                tags.add("remove_cell")
            cell.metadata["tags"] = sorted(tags)
    return notebook


def page_of(root: Path, path: Path) -> BookPage:
    """The outline's entry for one page file."""
    relative = Path(path).resolve().relative_to(root.resolve()).as_posix()
    for page in book_outline(root):
        if page.path == relative:
            return page
    raise ValueError(f"{relative} is not listed in {ROOT_MARKER}")


def book_context(root: Path, style: render.Style) -> render.Book:
    """What rendering any page needs: every label of the book, the citations, where links go."""
    outline_ = [page for page in book_outline(root) if (root / page.path).exists()]
    targets = render.find_targets((page, read_page(root / page.path).cells) for page in outline_)
    bibliography = citations.read_bibliography(root / "references.bib") if (root / "references.bib").exists() else {}
    return render.Book(targets, citations.short_citations(bibliography), style)
