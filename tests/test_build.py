"""The build executes pages, evaluates inline expressions, names failing cells, writes Colab notebooks."""

import textwrap

import pytest
from tools import build

from servebook import __version__

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


def test_colab_notebook_installs_this_version_first(book):
    notebook = build.colab_notebook(book / "chapters" / "01-a.qmd")
    install = notebook.cells[1]
    assert install.cell_type == "code" and "%pip install" in install.source
    assert f"@v{__version__}" in install.source
    assert notebook.cells[2].source.startswith("# A page")
    written = build.write_notebooks(book, book / "out")
    assert [p.name for p in written] == ["01-a.ipynb"]


def test_cell_options_are_read_from_the_top_only():
    assert build.cell_options('#| label: fig-x\n#| fig-cap: "A cap"\nx = 1\n#| not: this') == {
        "label": "fig-x", "fig-cap": "A cap"}


def test_ci_runs_the_readme_test_command(root):
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    command = "python -m pytest -n 2"
    assert f"```bash\n{command}\n```" in readme
    assert ci.rstrip().endswith(command)


def test_preview_numbers_figures_and_links_references(book, tmp_path):
    page = book / "chapters" / "01-a.qmd"
    page.write_text(PAGE.replace("The answer is", "See @fig-demo and @sec-a-page [@kwon2023vllm]. The answer is")
                    .replace('#| label: fig-demo', '#| label: fig-demo\n#| fig-cap: "A demo."'))
    result = build.execute_page(page)
    index = build.preview.write(book, [result], tmp_path / "html")
    html = (tmp_path / "html" / "chapters" / "01-a.html").read_text()
    assert '<a href="#fig-demo">Figure 1.1</a>' in html
    assert '<a href="#sec-a-page">A page</a>' in html
    assert "Figure 1.1: A demo." in html and "(kwon2023vllm)" in html
    assert "chapters/01-a.html" in index.read_text()
