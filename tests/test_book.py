"""The book is valid without Quarto, and every page executes from a clean kernel."""

import re
from pathlib import Path

import pytest
from tools import build, notebooks, pages, quarto, render

from servebook import gpus, models
from servebook.book import fmt

ROOT = Path(__file__).resolve().parents[1]
PAGES = build.book_pages(ROOT)
QMD = {page: page.read_text(encoding="utf-8") for page in PAGES if page.exists()}

LABEL_DEF = re.compile(r"\{#((?:sec|fig|tbl|eq)-[\w-]+)[\s}]|^#\|\s*label:\s*((?:fig|tbl)-[\w-]+)", re.M)
REFERENCE = re.compile(r"(?<![\w@`/])-?@((?:sec|fig|tbl|eq)-[\w-]*\w)")
CITATION_GROUP = re.compile(r"\[([^\[\]]*@[^\[\]]*)\]")
CITATION_KEY = re.compile(r"-?@([A-Za-z][\w:.-]*\w)")
BIB_KEY = re.compile(r"^@\w+\{([^,]+),", re.M)
CODE_BLOCK = re.compile(r"^```\{python\}.*?^```", re.M | re.S)


def strip_code(text: str) -> str:
    """Prose only: code cells and inline code hold Python, not cross-references."""
    return re.sub(r"`[^`\n]*`", "", CODE_BLOCK.sub("", text))


def code_cells(text: str) -> list[str]:
    return [block.split("\n", 1)[1].rsplit("```", 1)[0] for block in CODE_BLOCK.findall(text)]


def test_every_listed_page_exists():
    missing = [str(p.relative_to(ROOT)) for p in PAGES if not p.exists()]
    assert not missing, f"_quarto.yml lists pages that do not exist: {missing}"


def test_renamed_pages_redirect_from_their_first_edition_urls():
    """Pages are named by slug; the first edition's numbered URLs stay valid through Quarto's aliases."""
    for page in PAGES:
        assert not re.match(r"\d", page.name), f"{page.name}: name pages by slug, without a number"
    first_edition = [(page.parent.name, m.group(1)) for page in PAGES
                     for m in re.finditer(r"^  - (\d\d-[\w-]+\.html)$", QMD[page], re.M)]
    assert len(set(first_edition)) == 17  # 9 chapters and 8 exercise pages, each its old name once


def test_every_chapter_and_exercise_file_is_listed():
    on_disk = {p for folder in ("chapters", "exercises") for p in (ROOT / folder).glob("*.qmd")}
    assert on_disk <= set(PAGES), f"not in _quarto.yml: {sorted(str(p) for p in on_disk - set(PAGES))}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_one_title_heading_and_no_title_metadata(page):
    text = strip_code(QMD[page])
    assert not re.match(r"^---\n(?:.*\n)*?title:", QMD[page]), "a page's title is its # heading, not front matter"
    headings = re.findall(r"^# .*$", text, re.M)
    assert len(headings) == 1, f"expected one level-1 heading, found {headings}"
    if page.parent.name in ("chapters", "exercises"):
        assert re.search(r"\{#sec-[\w-]+", headings[0]), f"the heading needs a {{#sec-...}} label: {headings[0]}"


def test_labels_are_unique():
    seen: dict[str, Path] = {}
    for page, text in QMD.items():
        for match in LABEL_DEF.finditer(text):
            label = match.group(1) or match.group(2)
            assert label not in seen, f"label {label} defined in {seen.get(label)} and {page}"
            seen[label] = page


def test_every_cross_reference_resolves():
    labels = {m.group(1) or m.group(2) for text in QMD.values() for m in LABEL_DEF.finditer(text)}
    dangling = [(page.name, ref) for page, text in QMD.items()
                for ref in REFERENCE.findall(strip_code(text)) if ref not in labels]
    assert not dangling, f"cross-references with no label: {dangling}"


def test_every_citation_is_in_the_bibliography():
    keys = set(BIB_KEY.findall((ROOT / "references.bib").read_text(encoding="utf-8")))
    cited = [(page.name, key) for page, text in QMD.items()
             for group in CITATION_GROUP.findall(strip_code(text)) for key in CITATION_KEY.findall(group)
             if not key.startswith(("sec-", "fig-", "tbl-", "eq-"))]
    unknown = [(name, key) for name, key in cited if key not in keys]
    assert not unknown, f"citations missing from references.bib: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_figure_cells_have_label_caption_and_alt_text(page):
    figures = {cell for item in quarto.captioned(QMD[page]) if item.label.startswith("fig-") for cell in item.cells}
    for item in quarto.captioned(QMD[page]):
        assert item.caption, f"{page.name}: {item.label} has no caption"
        if item.label.startswith("fig-"):
            assert all(build.cell_options(cell).get("fig-alt") for cell in item.cells), f"{item.label} has no fig-alt"
    for cell in code_cells(QMD[page]):
        body = "\n".join(line for line in cell.splitlines() if not line.startswith("#|"))
        if re.search(r"\bfigures\.[a-z]\w*\(", body):
            where = f"{page.name}: cell {cell.splitlines()[0]!r}"
            assert cell in figures, f"{where} draws a figure outside a labelled figure"


# A number standing alone in a caption ("7 regions", "95 %", "1,000 requests") must be computed: written as
# an inline expression in a ::: {#fig-...} div.  Digits inside names (INT4, g128, Llama-2-13B, A100) are fine.
TYPED_NUMBER = re.compile(r"(?<![\w.-])[-+]?\d[\d,.]*(?![\w-])")


def _typed_numbers(caption: str) -> list[str]:
    text = quarto.INLINE.sub("", caption)
    text = re.sub(r"\b(?:Table|Figure|Section|Eq\.|[Ww]orked example)\s+\d+", "", text)  # numbering is a name
    text = re.sub(r"\[[^\]]*@[^\]]*\]|@(?:fig|tbl|eq|sec)-[\w-]+|\$[^$]*\$", "", text)
    return TYPED_NUMBER.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_caption_numbers_are_computed(page):
    typed = {item.label: _typed_numbers(item.caption) for item in quarto.captioned(QMD[page])}
    typed = {label: numbers for label, numbers in typed.items() if numbers}
    assert not typed, f"{page.name}: captions with typed numbers (compute them with inline expressions): {typed}"


def test_the_caption_reader_finds_divs_and_cells():
    text = ("::: {#fig-a}\n```{python}\n#| fig-alt: \"A.\"\nfigures.a()\n```\n\nWe find `{python} n` of them.\n:::\n\n"
            "```{python}\n#| label: fig-b\n#| fig-cap: \"Seven.\"\nfigures.b()\n```\n")
    found = {item.label: item for item in quarto.captioned(text)}
    assert found["fig-a"].div and found["fig-a"].caption == "We find `{python} n` of them."
    assert not found["fig-b"].div and found["fig-b"].caption == "Seven."
    assert _typed_numbers("Seven ways, 7 of them, INT4 g128 on Llama-2-13B, `{python} n` computed") == ["7"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_callout_fences_are_balanced(page):
    depth = 0
    for line in CODE_BLOCK.sub("", QMD[page]).splitlines():
        fence = re.match(r"^:{3,}\s*(\S.*)?$", line)
        if fence:
            depth += 1 if fence.group(1) else -1
            assert depth >= 0, f"a ::: closes nothing: {line!r}"
    assert depth == 0, f"{depth} ::: div(s) left open"


NOTEBOOK_PAGES = [p for p in pages.book_outline(ROOT) if notebooks.has_notebook(p)]


@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=lambda p: p.path)
def test_chapter_and_exercise_pages_link_to_their_notebook_with_a_badge_that_is_not_a_figure(page):
    text = QMD[ROOT / page.path]
    badge = quarto.colab_badge(text)
    assert badge, "the page needs its Open in Colab badge, written as quarto.COLAB_BADGE says"
    assert badge.url == notebooks.colab_url(page) and badge.alt.startswith("Open in Colab")
    # An image with a caption alone in a paragraph is a figure in Quarto: the badge has alt text, no caption.
    assert len(quarto.ANY_BADGE.findall(text)) == 1


def test_every_chapter_and_exercise_page_has_a_notebook_and_only_the_gpu_lab_asks_for_a_gpu():
    listed = {str(p.relative_to(ROOT)) for p in PAGES if p.parent.name in ("chapters", "exercises")}
    assert {p.path for p in NOTEBOOK_PAGES} == listed
    gpu = [p.path for p in NOTEBOOK_PAGES if quarto.colab_badge(QMD[ROOT / p.path]).gpu]
    assert gpu == ["chapters/gpu-lab.qmd"]


@pytest.fixture(scope="module")
def book_context():
    site = pages.site_url(ROOT)
    return pages.book_context(ROOT, render.Style(lambda there, anchor: f"{site}{there}#{anchor}"))


@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=lambda p: p.path)
def test_every_notebook_is_free_of_quarto_markup(page, book_context):
    """Built from the unexecuted page (its inline expressions stood in for); the slow test fills them."""
    source = pages.read_page(ROOT / page.path)
    for cell in source.cells:
        cell.source = quarto.INLINE.sub("1", cell.source)
    notebook = notebooks.colab_notebook(source, page, book_context, "0" * 40, pages.site_url(ROOT))
    assert not notebooks.quarto_left(notebook)


def page_group(page: Path):
    """The page as a parameter whose tests run in one worker (see the ``executed`` fixture)."""
    return pytest.param(page, marks=pytest.mark.xdist_group(page.stem if page.parent == ROOT else
                                                            f"{page.parent.name}/{page.stem}"),
                        id=str(page.relative_to(ROOT)))


@pytest.mark.slow
@pytest.mark.parametrize("page", [page_group(page) for page in PAGES])
def test_page_executes(page, executed):
    result = executed(page)
    errors = [o for cell in result.notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    leftover = [c.source for c in result.notebook.cells if c.cell_type == "markdown" and build.INLINE.search(c.source)]
    assert not leftover, "inline expressions were not evaluated"
    outline = pages.page_of(ROOT, page)
    if notebooks.has_notebook(outline):
        site = pages.site_url(ROOT)
        context = pages.book_context(ROOT, render.Style(lambda there, anchor: f"{site}{there}#{anchor}"))
        notebook = notebooks.colab_notebook(result.notebook, outline, context, "0" * 40, site)
        assert not notebooks.quarto_left(notebook), "the notebook shows Quarto markup"
    unfit = []
    for cell in result.notebook.cells:
        unfit += [f"[{len(line)}] {line}" for line in shown_lines(cell) if len(line) > fmt.WIDTH]
        unfit += [f"registry id {name!r} in: {row}" for row in table_rows(cell) for name in REGISTRY_ID.findall(row)]
    assert not unfit, f"outputs wider than the column ({fmt.WIDTH}) or naming registry ids: {unfit}"


# A table shows display names ("Llama-2-13B", "A100 80GB SXM"); ids are lower case, so case tells them apart.
REGISTRY_ID = re.compile(r"(?<![\w./-])(" + "|".join(
    re.escape(name) for name in sorted([*models.names(), *gpus.names()], key=len, reverse=True)) + r")(?![\w-]|\.\w)")


def _visible(markdown: str) -> str:
    """A table cell as rendered, near enough: no emphasis or math markers, a TeX command one character."""
    text = re.sub(r"\\text\{([^}]*)\}", r"\1", markdown)
    return re.sub(r"\*\*|\$|`", "", re.sub(r"\\[A-Za-z]+", "x", text))


def _shown_output(output) -> dict:
    """What Quarto shows of one output: text it prints, or a rich form in place of the plain text."""
    data = output.get("data", {})
    rich = {kind: value for kind, value in data.items() if kind != "text/plain"}
    return rich or {"text/plain": data.get("text/plain", "")}


def _cells(notebook_or_cell) -> list:
    return notebook_or_cell.cells if "cells" in notebook_or_cell else [notebook_or_cell]


def table_rows(notebook_or_cell) -> list[str]:
    """Each row of each Markdown table displayed, as the reader sees it: cells two spaces apart."""
    rows = []
    for cell in _cells(notebook_or_cell):
        for output in cell.get("outputs", []):
            markdown = "".join(_shown_output(output).get("text/markdown", ""))
            table = [[c.strip() for c in _visible(line).strip().strip("|").split("|")]
                     for line in markdown.splitlines() if line.startswith("|") and not re.match(r"\|[:-]", line)]
            # a column is as wide as its widest cell
            widths = [max(map(len, column)) for column in zip(*table, strict=True)]
            rows += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    return rows


def shown_lines(notebook_or_cell) -> list[str]:
    """Every line of every output block of an executed page (or cell): printed text, plain results, table rows."""
    lines = []
    for cell in _cells(notebook_or_cell):
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else \
                "".join(_shown_output(output).get("text/plain", ""))
            lines += text.splitlines()
    return lines + table_rows(notebook_or_cell)


def test_the_column_check_sees_printed_text_and_tables_but_not_what_a_figure_stands_for():
    import nbformat

    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 80 + "\nshort\n"),
                    nbformat.v4.new_output("display_data", data={"text/plain": "<Figure " + "y" * 90 + ">",
                                                                 "image/svg+xml": "<svg/>"}),
                    nbformat.v4.new_output("display_data", data={
                        "text/plain": "<IPython.core.display.Markdown object>",
                        "text/markdown": "| GPU | **Memory** |\n|:--|--:|\n| $a$ a100-80gb-sxm | $\\text{80}$ |"})]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    assert shown_lines(notebook) == ["x" * 80, "short", "GPU              Memory", "a a100-80gb-sxm  80"]
    assert REGISTRY_ID.findall(table_rows(notebook)[1]) == ["a100-80gb-sxm"]
    assert not REGISTRY_ID.findall("A100 80GB SXM  Llama-2-13B  llama-2-13b.json")


def _visible_outputs(notebook) -> list:
    """Per cell: its printed text and its rich outputs, without widget model ids (random by design)."""
    cells = []
    for cell in notebook.cells:
        outputs = cell.get("outputs", [])
        text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
        data = [{k: v for k, v in o.get("data", {}).items() if k != "application/vnd.jupyter.widget-view+json"}
                for o in outputs if "data" in o]
        cells.append((cell.source, text, data))
    return cells


@pytest.mark.slow
@pytest.mark.xdist_group("chapters/continuous-batching")
def test_executing_a_page_twice_gives_the_same_outputs(executed):
    page = ROOT / "chapters" / "continuous-batching.qmd"  # a seeded simulation, figures and tables
    first, second = (_visible_outputs(run(page).notebook) for run in (executed, build.execute_page))
    assert first == second


def test_a_power_of_two_is_printed_as_one():
    assert [fmt.power_of_two(v) for v in (2.0**-6, 2**16, 1, 0.5)] == ["2⁻⁶", "2¹⁶", "2⁰", "2⁻¹"]
    for bad, error in ((3.0, ValueError), (0.0, ValueError), (-4.0, ValueError), ("8", TypeError)):
        with pytest.raises(error, match="value"):
            fmt.power_of_two(bad)


def test_a_small_count_is_spelled_and_a_large_one_is_not():
    assert [fmt.spelled(n) for n in (0, 1, 4, 10, 11, 1024)] == ["zero", "one", "four", "ten", "11", "1,024"]
    for bad, error in ((-1, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="count"):
            fmt.spelled(bad)
