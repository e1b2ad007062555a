"""The book is valid without Quarto, and every page executes from a clean kernel."""

import re
from pathlib import Path

import pytest

from tools import build

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
    for cell in code_cells(QMD[page]):
        options = build.cell_options(cell)
        body = "\n".join(line for line in cell.splitlines() if not line.startswith("#|"))
        draws = re.search(r"\bfigures\.[a-z]\w*\(", body) is not None
        if options.get("label", "").startswith("fig-") or draws:
            where = f"{page.name}: cell {cell.splitlines()[0]!r}"
            assert options.get("label", "").startswith("fig-"), f"{where} draws a figure without a fig- label"
            assert options.get("fig-cap"), f"{where} has no fig-cap"
            assert options.get("fig-alt"), f"{where} has no fig-alt"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_callout_fences_are_balanced(page):
    depth = 0
    for line in CODE_BLOCK.sub("", QMD[page]).splitlines():
        fence = re.match(r"^:{3,}\s*(\S.*)?$", line)
        if fence:
            depth += 1 if fence.group(1) else -1
            assert depth >= 0, f"a ::: closes nothing: {line!r}"
    assert depth == 0, f"{depth} ::: div(s) left open"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent.name == "chapters"], ids=lambda p: p.name)
def test_chapters_link_to_their_colab_notebook(page):
    assert f"{build.COLAB_BASE}/{page.stem}.ipynb" in QMD[page], "the chapter needs its Open in Colab badge"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_executes(page):
    result = build.execute_page(page)
    errors = [o for cell in result.notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    leftover = [c.source for c in result.notebook.cells if c.cell_type == "markdown" and build.INLINE.search(c.source)]
    assert not leftover, "inline expressions were not evaluated"


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
def test_executing_a_page_twice_gives_the_same_outputs():
    page = ROOT / "chapters" / "04-continuous-batching.qmd"  # a seeded simulation, figures and tables
    first, second = (_visible_outputs(build.execute_page(page).notebook) for _ in range(2))
    assert first == second
