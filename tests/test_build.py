"""The build executes pages, evaluates inline expressions, names failing cells, writes Colab notebooks."""

import re
import textwrap

import nbformat
import pytest
from tools import build

PAGE = textwrap.dedent('''\
    # A page {#sec-a-page}

    ```{python}
    #| echo: false
    answer = 6 * 7
    ```

    The answer is `{python} answer`.

    ```{python}
    #| label: fig-demo
    print("visible")
    ```
    ''')


@pytest.fixture
def book(tmp_path):
    (tmp_path / "_quarto.yml").write_text(
        "project:\n  type: book\nbook:\n  chapters:\n    - index.qmd\n"
        "    - part: Part\n      chapters:\n        - chapters/01-a.qmd\n")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "index.qmd").write_text("# Preface {.unnumbered}\n")
    (tmp_path / "chapters" / "01-a.qmd").write_text(PAGE)
    return tmp_path


def test_book_pages_follow_quarto_yml(book):
    assert build.book_pages(book) == [book / "index.qmd", book / "chapters" / "01-a.qmd"]
    assert build.find_root(book / "chapters") == book


def test_page_executes_and_inline_expressions_are_filled(book):
    result = build.execute_page(book / "chapters" / "01-a.qmd")
    markdown = [c.source for c in result.notebook.cells if c.cell_type == "markdown"]
    assert "The answer is 42." in markdown
    hidden = [c for c in result.notebook.cells if "remove_input" in c.metadata.get("tags", [])]
    assert len(hidden) == 1 and "answer = 6 * 7" in hidden[0].source


def test_a_failing_cell_is_named(book):
    page = book / "chapters" / "01-a.qmd"
    page.write_text(PAGE.replace('print("visible")', "1 / 0"))
    with pytest.raises(build.PageError, match=r"01-a.qmd: cell \d+ \(fig-demo\) raised ZeroDivisionError"):
        build.execute_page(page)


def test_a_broken_inline_expression_is_named(book):
    page = book / "chapters" / "01-a.qmd"
    page.write_text(PAGE.replace("`{python} answer`", "`{python} answr`"))
    with pytest.raises(build.PageError, match="inline expressions.*NameError"):
        build.execute_page(page)


def test_an_executed_pages_notebook_holds_the_values_the_page_printed(book):
    result = build.execute_page(book / "chapters" / "01-a.qmd")
    written = build.write_notebooks(book, [result], book / "out", commit="f" * 40)
    notebook = nbformat.read(written[0], as_version=4)
    assert [p.relative_to(book / "out").as_posix() for p in written] == ["chapters/01-a.ipynb"]
    assert "The answer is 42." in [c.source for c in notebook.cells if c.cell_type == "markdown"]
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")


def test_cell_options_are_read_from_the_top_only():
    assert build.cell_options('#| label: fig-x\n#| fig-cap: "A cap"\nx = 1\n#| not: this') == {
        "label": "fig-x", "fig-cap": "A cap"}


def test_the_readme_has_two_commands_and_ci_runs_the_test_one(root):
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    assert re.findall(r"^```bash\n(.*)\n```$", readme, re.M)[:2] == ["make book", "make test"]
    assert ci.rstrip().endswith("make test")
    makefile = (root / "Makefile").read_text()
    assert re.search(r"^book: .*\n\t.*-m tools\.build$", makefile, re.M)
    assert re.search(r"^test: .*\n\t.*-m pytest -n 2$", makefile, re.M)
