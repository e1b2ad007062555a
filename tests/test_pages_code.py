"""The code a page shows is the library's, used: a page defines no function and no class."""

import ast
import re
from pathlib import Path

import pytest
from tools import build

ROOT = Path(__file__).resolve().parents[1]
PAGES = [page for page in build.book_pages(ROOT) if page.exists()]
CELL = re.compile(r"^```\{python\}[^\n]*\n(.*?)^```", re.M | re.S)


def definitions(source: str) -> list[str]:
    """Names of the functions and classes a cell defines, at any depth (a sort key's lambda is an expression)."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, kinds)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_defines_no_function_or_class(page):
    found = [name for cell in CELL.findall(page.read_text(encoding="utf-8")) for name in definitions(cell)]
    assert not found, f"{page.name} defines {found}: a reused computation belongs in servebook.book"


def test_the_check_sees_a_definition():
    assert definitions("x = 1\nif x:\n    def f():\n        return x\nclass C: pass\ng = lambda: 2") == ["C", "f"]


SHOWN_WIDTH = 79  # the page holds about 75 columns; a few more wrap without breaking an expression


def shown_code(text: str) -> list[str]:
    """The code lines a reader sees: cells not hidden by echo or include, without their options."""
    return [line for cell in CELL.findall(text) if "#| echo: false" not in cell and "#| include: false" not in cell
            for line in cell.splitlines() if not line.startswith("#|")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shown_code_fits_the_page(page):
    wide = [line for line in shown_code(page.read_text(encoding="utf-8")) if len(line) > SHOWN_WIDTH]
    assert not wide, f"{page.name}: {len(wide)} shown code lines wider than {SHOWN_WIDTH} columns: {wide[:3]}"
