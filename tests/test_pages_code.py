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
