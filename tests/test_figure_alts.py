"""A figure's alt text is written by the build from the numbers the figure draws (``tools/alts.py``)."""

import re
from pathlib import Path

import pytest
from tools import alts
from tools.pages import book_pages

from servebook.book import figures

ROOT = Path(__file__).resolve().parents[1]
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in book_pages(ROOT)}
DESCRIBED = figures.alt_texts()
REBUILD = "python -m tools.build figures rewrites it; commit what it writes"



def _page_alts():
    return [(page, item) for page, text in PAGES.items() for item in alts.figure_alts(text)]


def test_every_described_alt_on_a_page_is_what_the_build_writes():
    stale = [f"{page}:{item.line + 1} ({item.name})" for page, item in _page_alts()
             if item.name in DESCRIBED and item.text != figures.alt(item.name)]
    assert not stale, f"stale alt texts: {stale}; {REBUILD}"


def test_an_alt_text_that_quotes_a_number_is_written_from_its_figure():
    typed = {item.name for _, item in _page_alts() if item.name not in DESCRIBED and re.search(r"\d", item.text)}
    assert not typed, f"alt texts with numbers typed by hand: {sorted(typed)}"


def test_every_described_figure_is_on_a_page():
    on_pages = {item.name for _, item in _page_alts()}
    assert set(DESCRIBED) <= on_pages, f"described but on no page: {sorted(set(DESCRIBED) - on_pages)}"


@pytest.mark.parametrize("name", sorted(DESCRIBED))
def test_an_alt_text_is_one_quotable_line(name):
    text = figures.alt(name)
    assert text.endswith(".") and '"' not in text and "\\" not in text and "\n" not in text
    assert len(text) < 1000


def test_the_build_rewrites_only_the_alt_of_a_described_figure():
    page = ("```{python}\n#| label: fig-a\n#| fig-alt: \"Old, 1.\"\nfigures.kv_growth()\n```\n\n"
            "```{python}\n#| fig-alt: \"Kept, 2.\"\nfigures.other(x=1)\n```\n"
            "```{python}\nfigures.kv_growth()\n```\n")
    found = alts.figure_alts(page)
    assert [(item.line, item.name, item.text) for item in found] == [(2, "kv_growth", "Old, 1."),
                                                                     (7, "other", "Kept, 2.")]
    new = alts.rewrite(page, {"kv_growth": lambda: "New, 3."})
    assert new == page.replace('"Old, 1."', '"New, 3."')
    assert alts.rewrite(new, {"kv_growth": lambda: "New, 3."}) == new


def test_an_unknown_figure_has_no_alt_text_and_the_error_names_the_known_ones():
    with pytest.raises(ValueError, match="kv_growth"):
        figures.alt("no_such_figure")

