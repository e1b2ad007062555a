"""Figures are deterministic, committed, and match what the code draws today."""

from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.testing.compare import compare_images

from servebook.book import figures

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "figures"
REGISTRY = figures.registry()


def test_every_committed_figure_has_a_function_and_every_function_a_file():
    stems = {p.stem for p in COMMITTED.glob("*.svg")} | {p.stem for p in COMMITTED.glob("*.png")}
    assert stems == set(REGISTRY), (
        f"stale files: {sorted(stems - set(REGISTRY))}; "
        f"not written yet (run python -m tools.build figures): {sorted(set(REGISTRY) - stems)}"
    )


@pytest.mark.parametrize("stem", sorted(REGISTRY))
def test_figure_is_byte_for_byte_deterministic(stem, tmp_path):
    first, second = REGISTRY[stem](), REGISTRY[stem]()
    assert isinstance(first, Figure)
    for fmt in ("svg", "png"):
        a = figures.save(first, tmp_path / f"a.{fmt}").read_bytes()
        b = figures.save(second, tmp_path / f"b.{fmt}").read_bytes()
        assert a == b, f"{stem}.{fmt} differs between two draws"
    svg = (tmp_path / "a.svg").read_text()
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg, "figure metadata must carry no date or version"


@pytest.mark.parametrize("stem", sorted(REGISTRY))
def test_figure_matches_committed_file(stem, tmp_path):
    committed = COMMITTED / f"{stem}.png"
    assert committed.exists(), f"run python -m tools.build figures and commit {committed.name}"
    fresh = figures.save(REGISTRY[stem](), tmp_path / f"{stem}.png")
    # A pixel tolerance, as pytest-mpl compares: another matplotlib or FreeType release may move
    # anti-aliasing by a shade without changing what the figure shows.
    difference = compare_images(str(committed), str(fresh), tol=5)
    assert difference is None, difference


def test_figure_functions_are_reachable_by_name():
    for function in REGISTRY.values():
        assert getattr(figures, function.__name__) is function
    with pytest.raises(AttributeError, match="no figure function"):
        figures.no_such_figure  # noqa: B018
