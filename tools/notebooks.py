"""Colab notebooks that read like the rendered page and install the code that built it.

One notebook per chapter and exercise page, generated from the executed page, never
kept by hand, named after the page's path (``notebooks/chapters/kv-cache.ipynb``):

- a note names the page, the servebook version and the commit that built it, and says
  that the numbers in the text are the page's and that running the cells recomputes them;
- the first code cell installs servebook at that commit
  (``servebook[torch] @ git+https://github.com/servebook/servebook@<sha>``): the publish
  workflow builds the notebooks and the site from one commit, so the reference exists
  whenever the page does.  ``SERVEBOOK_INSTALL`` replaces the reference when the cell
  runs, so a test can run the notebook exactly as published against a wheel built here;
- the text reads like the page (:mod:`tools.render`): inline expressions replaced by the
  values the build computed, references as "Figure 2.3" linked to the site, citations as
  "(Kwon et al. 2023)", callouts as quoted blocks, solutions folded;
- code hidden on the page stays hidden (Colab's form view, Jupyter's ``source_hidden``);
  cells the page does not run are shown as code blocks; outputs are left to the reader's run;
- only a page whose Colab badge says ``accelerator="GPU"`` asks Colab for a GPU runtime.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import servebook

from . import render
from .pages import book_context, page_of, site_url
from .quarto import BookPage, colab_badge

REPOSITORY = "https://github.com/servebook/servebook"
COLAB_BASE = "https://colab.research.google.com/github/servebook/servebook/blob/gh-pages/notebooks"
INSTALL_VARIABLE = "SERVEBOOK_INSTALL"
NOTEBOOK_FOLDERS = ("chapters", "exercises")
# A notebook shows what Quarto's ipynb format would (content-visible when-format="ipynb": the widgets).
NOTEBOOK_FORMAT = "ipynb"
# Quarto's own markup, which a notebook must not show: inline expressions, div fences, references,
# anchors and attributes, citation keys, the page's badge (a notebook is already open in Colab), OJS cells.
QUARTO_MARKUP = re.compile(r"`\{python\}|^\s*(?:>\s*)*:::|(?<![\w`])-?@(?:fig|eq|sec|tbl)-|\{#|\[-?@|colab-badge"
                           r"|\{ojs\}")


def build_commit(root: Path) -> str:
    """The commit the book is built from: ``GITHUB_SHA`` in the publish workflow, else the checkout's HEAD."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the notebooks install servebook by commit, and {root} is not a git checkout "
                           "(set GITHUB_SHA to the commit the site is built from)")
    return done.stdout.strip()


def install_spec(commit: str) -> str:
    """What the install cell gives pip: the companion, with the extras the chapters import, at ``commit``."""
    return f"servebook[torch] @ git+{REPOSITORY}@{commit}"


def colab_url(page: BookPage) -> str:
    """Where a page's Open in Colab badge points: its notebook on the published site's branch."""
    return f"{COLAB_BASE}/{Path(page.path).with_suffix('.ipynb').as_posix()}"


def install_cell(commit: str):
    import nbformat

    return nbformat.v4.new_code_cell(
        "# Installs servebook as it was when this page was built (the commit named above).\n"
        f"# {INSTALL_VARIABLE}, where set, installs another build instead, e.g. a local wheel.\n"
        "import os\n\n"
        f'servebook_install = os.environ.get("{INSTALL_VARIABLE}", "{install_spec(commit)}")\n'
        '%pip install --quiet "{servebook_install}"')


def note_cell(page: BookPage, title: str, site: str, commit: str, gpu: bool):
    import nbformat

    runtime = ("This page measures a GPU: the notebook asks Colab for a GPU runtime "
               "(Runtime > Change runtime type, if yours has none)." if gpu else
               "Every cell runs on Colab's default CPU runtime.")
    return nbformat.v4.new_markdown_cell(
        f"*Serving LLMs, by the numbers*: [{title}]({site}{page.html}), as a notebook.\n\n"
        f"Generated from the page with servebook {servebook.__version__} at commit "
        f"[`{commit[:12]}`]({REPOSITORY}/tree/{commit}); the next cell installs exactly that code. "
        "The numbers in the text are the ones the page printed when the site was built; running the cells "
        f"recomputes them. {runtime}")


def _code_cell(item: render.Code):
    """A page's code cell as the notebook shows it: hidden code behind a form title, no outputs."""
    import nbformat

    source = item.cell.source
    if not item.runs:
        return nbformat.v4.new_markdown_cell(f"```python\n{source}\n```")
    metadata = {}
    if item.hidden:
        source = f"# @title {item.title}\n{source}"
        metadata = {"cellView": "form", "jupyter": {"source_hidden": True}}
    if item.silent:
        source = f"%%capture\n{source}"
        metadata.setdefault("jupyter", {})["outputs_hidden"] = True
    return nbformat.v4.new_code_cell(source, metadata=metadata)


def colab_notebook(notebook, page: BookPage, book: render.Book, commit: str, site: str, gpu: bool = False):
    """The Colab notebook of an executed page (inline expressions filled in by the build)."""
    import nbformat

    cells = []
    items = render.render(notebook.cells, page, book)
    for item in items:
        cells.append(nbformat.v4.new_markdown_cell(item.text) if isinstance(item, render.Markdown)
                     else _code_cell(item))
    title = page_title(page, book)
    colab = {"provenance": [], "toc_visible": True}
    result = nbformat.v4.new_notebook(cells=[note_cell(page, title, site, commit, gpu), install_cell(commit), *cells])
    result.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}, "colab": colab}
    if gpu:
        colab["gpuType"] = "T4"
        result.metadata["accelerator"] = "GPU"
    return result


def page_title(page: BookPage, book: render.Book) -> str:
    """"Chapter 2: The KV cache", as the note names the page (the title alone for an unnumbered page)."""
    heading = next((t for t in book.targets.values() if t.page == page.html and t.kind in ("chapter", "appendix")
                    or t.page == page.html and t.kind == "sec" and t.number is None), None)
    if heading is None:
        return page.path
    return f"{heading.text}: {heading.title}" if heading.number else heading.title


def quarto_left(notebook) -> list[str]:
    """Quarto markup left in a notebook (code spans in the text and code cells aside), and any ``#|`` option."""
    found = [m.group(0) for c in notebook.cells if c.cell_type == "markdown"
             for m in QUARTO_MARKUP.finditer(re.sub(r"`[^`\n]*`", "", c.source))]
    found += [line for c in notebook.cells if c.cell_type == "code" for line in c.source.splitlines()
              if line.startswith("#|")]
    return found


def has_notebook(page: BookPage) -> bool:
    return page.path.split("/", 1)[0] in NOTEBOOK_FOLDERS


def notebook_path(out: Path, page: BookPage) -> Path:
    return out / Path(page.path).with_suffix(".ipynb")


def write_notebooks(root: Path, results: list, out: Path, commit: str | None = None) -> list[Path]:
    """One notebook per executed chapter and exercise page, under ``out`` by the page's path."""
    import nbformat

    commit = commit or build_commit(root)
    site = site_url(root)
    book = book_context(root, render.Style(lambda page, anchor: f"{site}{page}#{anchor}", format=NOTEBOOK_FORMAT))
    written = []
    for result in results:
        page = page_of(root, result.path)
        if not has_notebook(page):
            continue
        badge = colab_badge(Path(result.path).read_text(encoding="utf-8"))
        notebook = colab_notebook(result.notebook, page, book, commit, site, gpu=bool(badge and badge.gpu))
        target = notebook_path(out, page)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, target)
        written.append(target)
    return written
