"""Build the book: regenerate figures, execute every page, write Colab notebooks, render.

Usage (from the repository root)::

    python -m tools.build              # everything: figures, execute, notebooks, render
    python -m tools.build figures      # only rewrite figures/
    python -m tools.build page chapters/kv-cache.qmd   # execute one page, report

Pages are the ``.qmd`` files listed in ``_quarto.yml``.  Each is read with
jupytext (``fmt="Rmd"``: Quarto's chunk syntax is R Markdown's) and executed
from a clean kernel with nbclient, in the page's own folder as Quarto does.
Where the Quarto CLI is on the PATH the site is rendered with ``quarto render``;
elsewhere an HTML preview is written with nbconvert, with an index page.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from servebook import __version__

from . import preview
from .quarto import INLINE, cell_options

ROOT_MARKER = "_quarto.yml"
INLINE_TAG = "servebook-inline"
COLAB_BASE = "https://colab.research.google.com/github/servebook/servebook/blob/gh-pages/notebooks"
INSTALL_SPEC = f"servebook[torch] @ git+https://github.com/servebook/servebook@v{__version__}"


class PageError(RuntimeError):
    """A page failed to execute; the message names the page and the cell."""


def find_root(start: Path | None = None) -> Path:
    """The book's root: the nearest folder at or above ``start`` holding ``_quarto.yml``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ROOT_MARKER).exists():
            return folder
    raise FileNotFoundError(f"no {ROOT_MARKER} in {here} or any folder above it")


def _walk_chapters(entries) -> list[str]:
    found: list[str] = []
    for entry in entries or []:
        if isinstance(entry, str):
            found.append(entry)
        elif isinstance(entry, dict):
            if "file" in entry:
                found.append(entry["file"])
            found.extend(_walk_chapters(entry.get("chapters")))
    return found


def book_pages(root: Path) -> list[Path]:
    """Every page listed in ``_quarto.yml``, in book order."""
    import yaml

    config = yaml.safe_load((root / ROOT_MARKER).read_text())
    book = config.get("book", {})
    names = _walk_chapters(book.get("chapters")) + _walk_chapters(book.get("appendices"))
    return [root / name for name in names]


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


def _with_inline_cells(notebook):
    """Insert, after each markdown cell with inline expressions, a cell that evaluates them.

    Quarto evaluates `` `{python} expr` `` in the kernel; the preview and the
    tests do the same, so a broken inline expression fails the build here too.
    """
    import nbformat

    cells = []
    for cell in notebook.cells:
        cells.append(cell)
        if cell.cell_type == "markdown":
            expressions = INLINE.findall(cell.source)
            if expressions:
                code = "import json as _json\nprint(_json.dumps([str(_v) for _v in (" + ", ".join(
                    f"({e})" for e in expressions) + ",)]))"
                cells.append(nbformat.v4.new_code_cell(code, metadata={"tags": [INLINE_TAG]}))
    notebook.cells = cells
    return notebook


def _fill_inline(notebook):
    """Replace inline expressions by their values and drop the evaluation cells."""
    cells = []
    pending = None
    for cell in notebook.cells:
        if INLINE_TAG in cell.metadata.get("tags", []):
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
            values = iter(json.loads(text))
            pending.source = INLINE.sub(lambda _, values=values: next(values), pending.source)
            continue
        if cell.cell_type == "markdown":
            pending = cell
        cells.append(cell)
    notebook.cells = cells
    return notebook


@dataclass
class PageResult:
    path: Path
    seconds: float
    notebook: object = field(repr=False)


def _describe_failure(path: Path, notebook, error: Exception) -> str:
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                options = cell_options(cell.source)
                where = options.get("label") or cell.source.strip().splitlines()[0][:80]
                if INLINE_TAG in cell.metadata.get("tags", []):
                    where = "inline expressions of the text above: " + cell.source.splitlines()[1][:200]
                return (f"{path}: cell {index} ({where}) raised "
                        f"{output.get('ename')}: {output.get('evalue')}")
    return f"{path}: {type(error).__name__}: {error}"


def execute_page(path: Path, timeout: int = 600) -> PageResult:
    """Execute one page from a clean kernel; raise :class:`PageError` naming the failing cell."""
    import nbclient

    path = Path(path).resolve()
    notebook = _with_inline_cells(read_page(path))
    client = nbclient.NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as error:  # nbclient raises several types; all mean "this page failed"
        raise PageError(_describe_failure(path, notebook, error)) from error
    return PageResult(path, time.perf_counter() - start, _fill_inline(notebook))


def write_figures(root: Path) -> list[Path]:
    from servebook.book import figures

    return figures.save_all(root / "figures")


def colab_notebook(path: Path):
    """The Colab notebook of a page: generated from the ``.qmd``, never maintained by hand.

    Its first cell installs the companion pinned to this version, so the reader
    runs the same code that built the book.
    """
    import nbformat

    notebook = read_page(path)
    install = nbformat.v4.new_code_cell(
        "# Install the companion package at the version this book was built with.\n"
        f"%pip install --quiet \"{INSTALL_SPEC}\""
    )
    note = nbformat.v4.new_markdown_cell(
        f"*Generated from `{path.name}` of servebook {__version__}. "
        "Runtime > Change runtime type > GPU makes the GPU sections run; everything else runs on a CPU.*"
    )
    notebook.cells = [note, install, *notebook.cells]
    notebook.metadata["colab"] = {"provenance": []}
    notebook.metadata["accelerator"] = "GPU"
    return notebook


def write_notebooks(root: Path, out: Path) -> list[Path]:
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for page in book_pages(root):
        if page.parent.name != "chapters":
            continue
        target = out / page.parent.name / (page.stem + ".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(colab_notebook(page), target)
        written.append(target)
    return written


def build(root: Path, render: bool = True) -> int:
    started = time.perf_counter()
    print(f"figures: {len(write_figures(root))} files written to {root / 'figures'}")
    results, failures = [], []
    for page in book_pages(root):
        try:
            result = execute_page(page)
        except PageError as error:
            failures.append(str(error))
            print(f"FAILED  {error}", flush=True)
            continue
        results.append(result)
        print(f"{result.seconds:7.1f} s  {page.relative_to(root)}", flush=True)
    notebooks = write_notebooks(root, root / "_build" / "notebooks")
    print(f"notebooks: {len(notebooks)} Colab notebooks in {root / '_build' / 'notebooks'}")
    if render and not failures:
        quarto = shutil.which("quarto")
        if quarto:
            subprocess.run([quarto, "render"], cwd=root, check=True)
            shutil.copytree(root / "_build" / "notebooks", root / "_site" / "notebooks", dirs_exist_ok=True)
            print(f"site: {root / '_site' / 'index.html'} (quarto render)")
        else:
            index = preview.write(root, results, root / "_build" / "html")
            print(f"site: {index} (HTML preview; install Quarto for the full site)")
    total = time.perf_counter() - started
    print(f"{len(results)} pages executed, {len(failures)} failed, {total:.1f} s in all")
    for failure in failures:
        print(f"FAILED  {failure}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="all", choices=["all", "figures", "page", "notebooks"])
    parser.add_argument("paths", nargs="*", type=Path, help="pages to execute (with 'page')")
    parser.add_argument("--no-render", action="store_true", help="skip quarto render / the HTML preview")
    args = parser.parse_args(argv)
    root = find_root()
    if args.what == "figures":
        print(f"figures: {len(write_figures(root))} files written to {root / 'figures'}")
        return 0
    if args.what == "notebooks":
        print(f"notebooks: {len(write_notebooks(root, root / '_build' / 'notebooks'))} written")
        return 0
    if args.what == "page":
        status = 0
        for path in args.paths or book_pages(root):
            try:
                result = execute_page(path)
                print(f"{result.seconds:7.1f} s  {path}")
            except PageError as error:
                print(f"FAILED  {error}")
                status = 1
        return status
    return build(root, render=not args.no_render)


if __name__ == "__main__":
    sys.exit(main())
