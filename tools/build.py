"""Build the book: regenerate figures and the API reference, execute every page, write Colab notebooks, render.

Usage (from the repository root)::

    python -m tools.build              # everything: figures, reference, execute, notebooks, render
    python -m tools.build figures      # only rewrite figures/, their alt texts in the pages, the calculators' data
    python -m tools.build reference    # only rewrite the API reference pages from the docstrings
    python -m tools.build page chapters/kv-cache.qmd   # execute one page, report
    python -m tools.build notebooks    # execute the chapter and exercise pages, write their notebooks

Pages are the ``.qmd`` files listed in ``_quarto.yml`` (:mod:`tools.pages`), executed
from a clean kernel with nbclient, in the page's own folder as Quarto does.  Where the
Quarto CLI is on the PATH the site is rendered with ``quarto render`` and the notebooks
are copied into it; elsewhere an HTML preview is written with nbconvert, with an index page.
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

from . import alts, apiref, preview
from .notebooks import COLAB_BASE, has_notebook, write_notebooks
from .pages import book_outline, book_pages, find_root, read_page
from .quarto import INLINE, cell_options

__all__ = ["COLAB_BASE", "INLINE", "PageError", "PageResult", "book_pages", "cell_options", "execute_page",
           "find_root", "main", "read_page", "write_figures", "write_notebooks"]

INLINE_TAG = "servebook-inline"
NOTEBOOKS = Path("_build") / "notebooks"


class PageError(RuntimeError):
    """A page failed to execute; the message names the page and the cell."""


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
    """Every figure, the pages whose alt texts it rewrote (:mod:`tools.alts`), and the data the site's
    calculators read (``ojs/calculators.json``): all before pages execute."""
    from servebook.book import calculators, figures

    return [*figures.save_all(root / "figures"), *alts.write(root), calculators.write(root / "ojs")]


def execute_all(paths: list[Path]) -> tuple[list[PageResult], list[str]]:
    """Execute pages in order, reporting each page's time; failures are collected, not raised."""
    results, failures = [], []
    for path in paths:
        try:
            result = execute_page(path)
        except PageError as error:
            failures.append(str(error))
            print(f"FAILED  {error}", flush=True)
            continue
        results.append(result)
        print(f"{result.seconds:7.1f} s  {path}", flush=True)
    return results, failures


def render_site(root: Path, results: list[PageResult]) -> None:
    """``quarto render`` where Quarto is installed (the notebooks copied into the site), else the preview."""
    quarto = shutil.which("quarto")
    if quarto:
        subprocess.run([quarto, "render"], cwd=root, check=True)
        shutil.copytree(root / NOTEBOOKS, root / "_site" / "notebooks", dirs_exist_ok=True)
        print(f"site: {root / '_site' / 'index.html'} (quarto render)")
    else:
        index = preview.write(root, results, root / "_build" / "html")
        print(f"site: {index} (HTML preview; install Quarto for the full site)")


def build(root: Path, render: bool = True) -> int:
    started = time.perf_counter()
    print(f"figures: {len(write_figures(root))} files written (figures/, pages' alt texts, ojs/)")
    print(f"reference: {len(apiref.write(root))} pages written")
    results, failures = execute_all(book_pages(root))
    notebooks = write_notebooks(root, results, root / NOTEBOOKS)
    print(f"notebooks: {len(notebooks)} Colab notebooks in {root / NOTEBOOKS}")
    if render and not failures:
        render_site(root, results)
    print(f"{len(results)} pages executed, {len(failures)} failed, {time.perf_counter() - started:.1f} s in all")
    for failure in failures:
        print(f"FAILED  {failure}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="all",
                        choices=["all", "figures", "reference", "page", "notebooks"])
    parser.add_argument("paths", nargs="*", type=Path, help="pages to execute (with 'page' or 'notebooks')")
    parser.add_argument("--no-render", action="store_true", help="skip quarto render / the HTML preview")
    args = parser.parse_args(argv)
    root = find_root()
    if args.what == "figures":
        print(f"figures: {len(write_figures(root))} files written (figures/, pages' alt texts, ojs/)")
        return 0
    if args.what == "reference":
        print(f"reference: {len(apiref.write(root))} pages written")
        return 0
    if args.what == "notebooks":
        pages = args.paths or [root / p.path for p in book_outline(root) if has_notebook(p)]
        results, failures = execute_all(pages)
        print(f"notebooks: {len(write_notebooks(root, results, root / NOTEBOOKS))} written to {root / NOTEBOOKS}")
        return 1 if failures else 0
    if args.what == "page":
        return 1 if execute_all(args.paths or book_pages(root))[1] else 0
    return build(root, render=not args.no_render)


if __name__ == "__main__":
    sys.exit(main())
