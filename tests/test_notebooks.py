"""Notebooks read like the rendered page: numbered as Quarto numbers, no raw markup, hidden code hidden.

A small book in a temporary folder holds one of each construct the pages use; the notebook
of each page is built from it (unexecuted here: the pages of the real book are executed in
test_book.py and test_notebooks_from_wheel.py).
"""

import re
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from tools import citations, notebooks, pages, preview, quarto, render

import servebook

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SITE = "https://example.org/book/"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

QUARTO_YML = """\
project:
  type: book
book:
  site-url: https://example.org/book
  chapters:
    - index.qmd
    - part: "Part one"
      chapters:
        - chapters/first.qmd
    - part: "Part two"
      chapters:
        - chapters/second.qmd
        - exercises/first.qmd
    - references.qmd
  appendices:
    - appendices/tools.qmd
"""

FIRST = textwrap.dedent('''\
    # The first chapter {#sec-first}

    [![](https://colab.research.google.com/assets/colab-badge.svg){fig-alt="Open in Colab"}](https://colab.research.google.com/github/servebook/servebook/blob/gh-pages/notebooks/chapters/first.ipynb)

    ```{python}
    #| echo: false
    n = 6 * 7
    ```

    ## Where it starts {#sec-start}

    $$
    y = 2x
    $$ {#eq-line}

    As @eq-line shows and @fig-grid draws, see [@kwon2023vllm; @yu2022orca] and
    @williams2009roofline; -@fig-grid is its number [@frantar2022obc, p. 3].
    It is split over lines [@kwon2023vllm;
    @yu2022orca]. Not a citation: `@fig-grid` in code, nor me@example.org.

    ::: {#fig-grid}
    ```{python}
    #| fig-alt: "A grid."
    print("grid")
    ```

    A grid of `{python} n` cells, as @sec-start says.
    :::

    ::: {.callout-warning}
    ## Trap: units
    GiB is not GB.
    :::

    ```{python}
    #| label: fig-bars
    #| fig-cap: "Bars, after @fig-grid."
    print("bars")
    ```

    | a | b |
    |---|---|
    | 1 | 2 |

    : A table. {#tbl-small}

    ### Deeper {.unnumbered}

    ## Second section

    ```{python}
    #| include: false
    quiet = 1
    ```

    ```{python}
    #| eval: false
    never_run()
    ```
    ''')

SECOND = textwrap.dedent('''\
    # The second chapter {#sec-second}

    [![](https://colab.research.google.com/assets/colab-badge.svg){fig-alt="Open in Colab (GPU runtime)"}](https://colab.research.google.com/github/servebook/servebook/blob/gh-pages/notebooks/chapters/second.ipynb){accelerator="GPU"}

    ::: {#fig-later}
    ```{python}
    print("later")
    ```

    Later than @fig-grid.
    :::

    Appendix: @sec-tools.
    ''')

EXERCISES = textwrap.dedent('''\
    # Exercises: the first chapter {#sec-ex-first}

    ## Exercise 1: count

    How many?

    ::: {.callout-note collapse="true"}
    ## Solution

    ```{python}
    answer = 42
    print(answer)
    ```

    Forty-two, from @sec-first.
    :::

    ::: {.callout-note collapse="true"}
    ## Solution
    In words only: six times seven.
    :::
    ''')

BIB = textwrap.dedent('''\
    @inproceedings{kwon2023vllm,
      title  = {Efficient Memory Management with {PagedAttention}},
      author = {Kwon, Woosuk and Li, Zhuohan and Zhuang, Siyuan and Sheng, Ying},
      year   = {2023}
    }
    @inproceedings{yu2022orca,
      title  = {Orca},
      author = {Yu, Gyeong-In and Jeong, Joo Seong},
      year   = {2022}
    }
    @article{williams2009roofline,
      title  = {Roofline},
      author = {Williams, Samuel and Waterman, Andrew and Patterson, David},
      year   = {2009}
    }
    @inproceedings{frantar2022obc,
      title  = {Optimal Brain Compression},
      author = {Frantar, Elias and Alistarh, Dan},
      year   = {2022}
    }
    @misc{nvidiab, title = {B datasheet}, author = {{NVIDIA}}, year = {2023}}
    @misc{nvidiaa, title = {A datasheet}, author = {{NVIDIA}}, year = {2023}}
    ''')


@pytest.fixture
def book(tmp_path):
    files = {"_quarto.yml": QUARTO_YML, "index.qmd": "# Preface {.unnumbered}\n\n## How to read it\n",
             "chapters/first.qmd": FIRST, "chapters/second.qmd": SECOND, "exercises/first.qmd": EXERCISES,
             "references.qmd": "# References {.unnumbered}\n\n::: {#refs}\n:::\n",
             "appendices/tools.qmd": "# Tools {#sec-tools}\n\n## The command line {#sec-tools-cli}\n",
             "references.bib": BIB}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def notebook_of(book, path: str):
    page = pages.page_of(book, book / path)
    context = pages.book_context(book, render.Style(lambda there, anchor: f"{SITE}{there}#{anchor}"))
    source = pages.read_page(book / path)
    for cell in source.cells:  # as the build leaves them: inline expressions filled in
        cell.source = quarto.INLINE.sub("42", cell.source)
    badge = quarto.colab_badge((book / path).read_text())
    return notebooks.colab_notebook(source, page, context, COMMIT, SITE, gpu=bool(badge and badge.gpu))


def markdown(notebook) -> str:
    return "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


def test_pages_are_numbered_as_quarto_numbers_them(book):
    numbers = {p.path: p.number for p in pages.book_outline(book)}
    assert numbers == {"index.qmd": None, "chapters/first.qmd": "1", "chapters/second.qmd": "2",
                       "exercises/first.qmd": "3", "references.qmd": None, "appendices/tools.qmd": "A"}


def test_references_read_as_numbers_and_link_to_the_site(book):
    text = markdown(notebook_of(book, "chapters/first.qmd"))
    first = f"{SITE}chapters/first.html"
    assert f"As [Equation 1.1]({first}#eq-line) shows and [Figure 1.1]({first}#fig-grid) draws" in text
    assert f"[1.1]({first}#fig-grid) is its number" in text
    assert f"as [Section 1.1]({first}#sec-start) says" in text
    assert "\\tag{1.1}$$" in text
    second = markdown(notebook_of(book, "chapters/second.qmd"))
    assert f"Later than [Figure 1.1]({first}#fig-grid)." in second
    assert f"Appendix: [Appendix A]({SITE}appendices/tools.html#sec-tools)." in second
    exercises = markdown(notebook_of(book, "exercises/first.qmd"))
    assert f"from [Chapter 1]({first}#sec-first)." in exercises


def test_headings_and_captions_carry_their_numbers(book):
    text = markdown(notebook_of(book, "chapters/first.qmd"))
    assert re.search(r"^# 1 The first chapter$", text, re.M)
    assert re.search(r"^## 1\.1 Where it starts$", text, re.M) and re.search(r"^## 1\.2 Second section$", text, re.M)
    assert re.search(r"^### Deeper$", text, re.M)
    assert "**Figure 1.1:** A grid of 42 cells" in text
    assert f"**Figure 1.2:** Bars, after [Figure 1.1]({SITE}chapters/first.html#fig-grid)." in text
    assert "**Table 1.1:** A table." in text
    assert "**Figure 2.1:** Later than" in markdown(notebook_of(book, "chapters/second.qmd"))


def test_citations_are_short_author_year_links_to_the_references(book):
    text = markdown(notebook_of(book, "chapters/first.qmd"))
    refs = f"{SITE}references.html#ref-"
    assert f"see ([Kwon et al. 2023]({refs}kwon2023vllm); [Yu and Jeong 2022]({refs}yu2022orca)) and" in text
    assert f"[Williams, Waterman, and Patterson (2009)]({refs}williams2009roofline);" in text
    assert f"([Frantar and Alistarh 2022]({refs}frantar2022obc), p. 3)" in text
    assert f"split over lines ([Kwon et al. 2023]({refs}kwon2023vllm); [Yu and Jeong 2022]" in text
    assert "`@fig-grid` in code, nor me@example.org" in text


def test_two_works_that_read_alike_get_year_suffixes_in_bibliography_order(book):
    cited = citations.short_citations(citations.read_bibliography(book / "references.bib"))
    assert cited["nvidiaa"] == ("NVIDIA", "2023a") and cited["nvidiab"] == ("NVIDIA", "2023b")


def test_callouts_read_as_blocks_and_solutions_fold(book):
    text = markdown(notebook_of(book, "chapters/first.qmd"))
    assert "> **Trap: units**\n>\n> GiB is not GB." in text
    exercises = notebook_of(book, "exercises/first.qmd")
    folded = markdown(exercises)
    assert "<details>\n<summary><b>Solution</b></summary>\n\nForty-two" in folded
    assert "<summary><b>Solution</b></summary>\n\nIn words only: six times seven.\n\n</details>" in folded
    solution = next(c for c in exercises.cells if c.cell_type == "code" and "answer = 42" in c.source)
    assert solution.source.startswith("# @title Solution\n") and solution.metadata["cellView"] == "form"


def test_no_quarto_markup_is_left(book):
    for path in ("chapters/first.qmd", "chapters/second.qmd", "exercises/first.qmd"):
        notebook = notebook_of(book, path)
        assert not notebooks.quarto_left(notebook), f"{path}: {notebooks.quarto_left(notebook)}"
        assert notebooks.QUARTO_MARKUP.search((book / path).read_text())  # the page had some


def test_hidden_code_stays_hidden_and_unrun_code_is_shown(book):
    cells = notebook_of(book, "chapters/first.qmd").cells
    setup = next(c for c in cells if "n = 6 * 7" in c.source)
    assert setup.source.startswith("# @title Set-up\n") and setup.metadata["jupyter"]["source_hidden"]
    quiet = next(c for c in cells if "quiet = 1" in c.source)
    assert quiet.source.startswith("%%capture\n") and quiet.metadata["jupyter"]["outputs_hidden"]
    hidden_figure = next(c for c in cells if 'print("grid")' in c.source)
    assert not hidden_figure.metadata  # echo is not false: the code is shown
    never = next(c for c in cells if "never_run()" in c.source)
    assert never.cell_type == "markdown" and never.source.startswith("```python")
    assert all(not c.get("outputs") for c in cells if c.cell_type == "code")


def test_the_note_and_the_first_code_cell_install_the_commit_that_built_the_page(book):
    cells = notebook_of(book, "chapters/first.qmd").cells
    note, install = cells[0], cells[1]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert servebook.__version__ == version  # read from the installed metadata: one place holds it
    assert note.cell_type == "markdown" and f"servebook {version} at commit" in note.source
    assert "[Chapter 1: The first chapter]" in note.source and "running the cells recomputes them" in note.source
    assert install.cell_type == "code" and "%pip install" in install.source
    assert f'"servebook[torch] @ git+https://github.com/servebook/servebook@{COMMIT}"' in install.source
    assert f'os.environ.get("{notebooks.INSTALL_VARIABLE}"' in install.source
    assert cells[2].source == "# 1 The first chapter"


def test_only_a_page_whose_badge_asks_for_it_requests_a_gpu(book):
    assert notebook_of(book, "chapters/second.qmd").metadata["accelerator"] == "GPU"
    for path in ("chapters/first.qmd", "exercises/first.qmd"):
        assert "accelerator" not in notebook_of(book, path).metadata
        assert "GPU runtime" not in notebook_of(book, path).cells[0].source


def test_notebooks_are_written_by_the_pages_path_for_chapters_and_exercises(book, monkeypatch):
    monkeypatch.setenv("GITHUB_SHA", COMMIT)
    results = [type("Result", (), {"path": book / p, "notebook": pages.read_page(book / p)})()
               for p in ("index.qmd", "chapters/first.qmd", "exercises/first.qmd", "appendices/tools.qmd")]
    written = notebooks.write_notebooks(book, results, book / "out")
    assert [p.relative_to(book / "out").as_posix() for p in written] == ["chapters/first.ipynb",
                                                                          "exercises/first.ipynb"]
    assert nbformat.read(written[0], as_version=4).cells[1].source.count(COMMIT) == 1


def test_the_preview_numbers_the_same_way(book, tmp_path):
    results = [type("Result", (), {"path": book / p, "notebook": pages.read_page(book / p), "seconds": 0.0})()
               for p in ("chapters/first.qmd", "chapters/second.qmd", "references.qmd")]
    preview.write(book, results, tmp_path / "html")
    first = (tmp_path / "html" / "chapters" / "first.html").read_text()
    assert '<a href="#fig-grid">Figure 1.1</a>' in first and '<a id="fig-grid"></a>' in first
    assert '<a href="../references.html#ref-kwon2023vllm">Kwon et al. 2023</a>' in first
    second = (tmp_path / "html" / "chapters" / "second.html").read_text()
    assert '<a href="../chapters/first.html#fig-grid">Figure 1.1</a>' in second
    assert 'id="ref-kwon2023vllm"' in (tmp_path / "html" / "references.html").read_text()
