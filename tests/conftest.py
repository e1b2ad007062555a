import copy
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


@pytest.fixture(scope="session")
def executed():
    """Each page executed once per test process: the page test and the notebook tests read one result.

    A page's tests carry ``xdist_group`` marks named after the page, and ``--dist loadgroup`` (the
    project's default) sends a group to one worker, so no page runs twice in a suite.  Each test gets
    its own copy: building a notebook rewrites the cells it is given.
    """
    results = {}

    def run(page: Path) -> build.PageResult:
        if page not in results:
            results[page] = build.execute_page(page)
        return copy.deepcopy(results[page])

    return run
