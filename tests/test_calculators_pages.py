"""The calculators on their pages: the site gets the Observable JS cells, the notebooks the widgets.

Quarto drops a ``content-visible when-format=...`` block from the formats it does not
name; the preview (the site without Quarto) and the Colab notebooks must do the same,
and the preview shows a marked placeholder where the site runs Observable JS.
"""

import re
import textwrap
from pathlib import Path

import pytest
from tools import notebooks, pages, preview, quarto, render

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR_PAGES = {"chapters/kv-cache.qmd": ("kvText", "kv_calculator()"),
                    "chapters/capacity-planning.qmd": ("capacityText", "capacity_planner()")}
OJS_CELL = re.compile(r"^```\{ojs\}\n(.*?)^```", re.M | re.S)
HTML_ONLY = re.compile(r'^::: \{\.content-visible when-format="html"\}\n(.*?)^:::$', re.M | re.S)
IPYNB_ONLY = re.compile(r'^::: \{\.content-visible when-format="ipynb"\}\n(.*?)^:::$', re.M | re.S)
EXPORTS = set(re.findall(r"^export function (\w+)", (ROOT / "ojs" / "calculators.js").read_text(), re.M))


@pytest.mark.parametrize(("attributes", "html", "ipynb"), [
    ('.content-visible when-format="html"', True, False),
    ('.content-visible when-format="ipynb"', False, True),
    ('.content-visible unless-format="html"', False, True),
    ('.content-hidden when-format="html"', False, True),
    ('.content-hidden unless-format="html"', True, False),
    (".content-hidden", False, False),
    (".callout-note", True, True),
])
def test_a_block_shows_in_the_formats_quarto_shows_it_in(attributes, html, ipynb):
    assert (quarto.shown_in_format(attributes, "html"), quarto.shown_in_format(attributes, "ipynb")) == (html, ipynb)


@pytest.mark.parametrize("path", CALCULATOR_PAGES)
def test_the_site_gets_ojs_cells_that_read_servebooks_data(path):
    source = (ROOT / path).read_text(encoding="utf-8")
    page_dir = (ROOT / path).parent
    cells, site_only = OJS_CELL.findall(source), "".join(HTML_ONLY.findall(source))
    assert cells and all(cell in site_only for cell in cells)  # and so never in the PDF or a notebook
    code = "".join(cells)
    imported = re.findall(r'import \{(\w+)\} from "([^"]+)"', code)
    assert imported and all((page_dir / where).resolve() == ROOT / "ojs" / "calculators.js" for _, where in imported)
    assert {name for name, _ in imported} <= EXPORTS and CALCULATOR_PAGES[path][0] in code
    attached = re.findall(r'FileAttachment\("([^"]+)"\)', code)
    assert [(page_dir / where).resolve() for where in attached] == [ROOT / "ojs" / "calculators.json"]
    assert all(len(line) <= 75 for line in code.splitlines())


@pytest.mark.parametrize("path", CALCULATOR_PAGES)
def test_the_notebook_gets_the_widget_with_its_note(path):
    source = (ROOT / path).read_text(encoding="utf-8")
    widget = CALCULATOR_PAGES[path][1]
    ipynb = "".join(IPYNB_ONLY.findall(source))
    assert widget in ipynb and "needs a running Python kernel" in ipynb
    outside = IPYNB_ONLY.sub("", source)
    assert widget not in outside and "{ojs}" not in IPYNB_ONLY.sub("", HTML_ONLY.sub("", source))


def test_every_page_with_a_widget_on_the_site_says_it_needs_a_kernel():
    widget_pages = []
    for path in sorted((ROOT / "chapters").glob("*.qmd")):
        on_the_site = IPYNB_ONLY.sub("", path.read_text(encoding="utf-8"))
        if re.search(r"^\w+_(?:explorer|calculator|planner)\(\)", on_the_site, re.M):
            widget_pages.append(path.name)
            if path.name != "quantization-basics.qmd":  # its note is placed by the page's author
                assert "needs a running Python kernel" in on_the_site, path.name
    assert widget_pages == ["paged-attention.qmd", "quantization-basics.qmd"]


PAGE = textwrap.dedent('''\
    # First {#sec-first}

    A calculator.

    ::: {.content-visible when-format="html"}
    In your browser:

    ```{ojs}
    //| echo: false
    calc = FileAttachment("../ojs/calculators.json").json()
    ```

    ```{ojs}
    html`<pre>${calc.models.length}</pre>`
    ```
    :::

    ::: {.content-visible when-format="ipynb"}
    Needs a kernel.

    ```{python}
    widget_here = 1
    ```
    :::

    ```{python}
    print("both")
    ```
    ''')


@pytest.fixture
def book(tmp_path):
    files = {"_quarto.yml": "project:\n  type: book\nbook:\n  chapters:\n    - chapters/first.qmd\n",
             "chapters/first.qmd": PAGE}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_preview_shows_the_sites_blocks_and_one_placeholder_for_the_ojs_cells(book, tmp_path):
    result = type("Result", (), {"path": book / "chapters/first.qmd", "seconds": 0.0,
                                 "notebook": pages.read_page(book / "chapters/first.qmd")})()
    preview.write(book, [result], tmp_path / "html")
    page = (tmp_path / "html" / "chapters" / "first.html").read_text()
    assert "In your browser:" in page and page.count('class="ojs-placeholder"') == 1
    assert "Interactive cell (Observable JS)" in page and "FileAttachment" not in page and "{ojs}" not in page
    assert "Needs a kernel." not in page and "widget_here" not in page
    assert "both" in page


def test_the_notebook_shows_its_own_blocks_and_no_ojs(book):
    page = pages.page_of(book, book / "chapters/first.qmd")
    context = pages.book_context(book, render.Style(lambda there, anchor: f"{there}#{anchor}",
                                                    format=notebooks.NOTEBOOK_FORMAT))
    notebook = notebooks.colab_notebook(pages.read_page(book / "chapters/first.qmd"), page, context, "0" * 40,
                                        "https://example.org/")
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "Needs a kernel." in text and "widget_here = 1" in text and 'print("both")' in text
    assert "In your browser:" not in text and "Observable JS" not in text and "FileAttachment" not in text
    assert not notebooks.quarto_left(notebook)


def test_an_ojs_cell_outside_any_block_is_a_placeholder_in_a_notebook_and_flagged_if_left(book):
    (book / "chapters/first.qmd").write_text("# First\n\n```{ojs}\nx = 1\n```\n")
    page = pages.page_of(book, book / "chapters/first.qmd")
    context = pages.book_context(book, render.Style(lambda there, anchor: f"{there}#{anchor}"))
    items = render.render(pages.read_page(book / "chapters/first.qmd").cells, page, context)
    assert items[-1].text.endswith("\n\n" + render.OJS_PLACEHOLDER["ipynb"])
    raw = type("Notebook", (), {"cells": pages.read_page(book / "chapters/first.qmd").cells})()
    assert "{ojs}" in notebooks.quarto_left(raw)
