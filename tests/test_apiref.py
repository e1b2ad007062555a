"""The API reference appendix is what the docstrings say, is in the book, and links only to itself."""

import re
from pathlib import Path

import pytest
from tools import apiref, pages

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / apiref.PAGE


@pytest.fixture(scope="module")
def generated() -> str:
    return apiref.page_text()


def test_the_committed_page_is_what_the_docstrings_give(generated):
    assert PAGE.read_text(encoding="utf-8") == generated, (
        "the API reference is out of date: run `python -m tools.build reference` and commit it")


def test_it_is_an_appendix_of_the_book():
    outline = {page.path: page for page in pages.book_outline(ROOT)}
    assert outline[apiref.PAGE.as_posix()].appendix and outline[apiref.PAGE.as_posix()].number


def test_every_public_module_has_a_section_and_every_function_an_entry(generated):
    for module in apiref.public_modules():
        short = module.__name__.removeprefix("servebook.")
        assert f"## `{module.__name__}` {{#sec-api-{short}}}" in generated
        for name, _ in apiref.members(module):
            assert re.search(rf"^### `{re.escape(name)}` \{{#api-[\w-]+ \.unnumbered\}}$", generated, re.M)
    assert "servebook.book" not in re.findall(r"^## `([\w.]+)`", generated, re.M)


def test_the_docstrings_roles_are_rendered_and_link_to_entries_of_the_page(generated):
    prose = re.sub(r"^```.*?^```", "", generated, flags=re.M | re.S)
    assert not re.search(r":(?:func|class|meth|mod|data|attr):`", prose)
    assert "``" not in prose
    anchors = set(re.findall(r"\{#([\w-]+)", generated))
    links = re.findall(r"\]\(#([\w-]+)\)", generated)
    assert links and set(links) <= anchors


def test_signatures_and_roles_read_as_the_code_says():
    from servebook import memory

    text = apiref.signature("kv_cache_bytes", memory.kv_cache_bytes)
    assert text == ("kv_cache_bytes(model: ModelSpec | str, seq_len: int, batch: int = 1, dtype: str = 'fp16')"
                    " -> int") or text.startswith("kv_cache_bytes(\n    model: ModelSpec | str,\n")
    anchors = apiref.index(apiref.public_modules())
    doc = apiref.docstring(memory.capacity_plan, anchors, "servebook.memory")
    assert "``" not in doc
    linked = apiref.docstring(type("X", (), {"__doc__": "See :func:`servebook.memory.capacity_plan` and "
                                                        ":mod:`servebook.units`, not :func:`nowhere`."}),
                              anchors, "servebook.memory")
    assert linked == ("See [`servebook.memory.capacity_plan`](#api-memory-capacity_plan) and "
                      "[`servebook.units`](#sec-api-units), not `nowhere`.")
