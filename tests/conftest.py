from pathlib import Path

import pytest
from tools import build

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def pages() -> list[Path]:
    return build.book_pages(ROOT)
