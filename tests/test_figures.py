"""Committed figures are exactly what the build writes, and the build writes the same bytes every time.

What is compared, and what is not: an SVG byte for byte (``figures.save`` strips the date and the
matplotlib version, so nothing in it belongs to the release that wrote it); a PNG pixel for pixel,
decoded, so that only the PNG encoder (Pillow's zlib settings, its chunk order) is left out.  The
plotting stack that draws both is pinned in the ``book`` extra (``matplotlib==``), so the build on
a reader's machine or in the publish workflow is the one these files were written with; and numpy's
AVX-512 loops, which round some log10 and power results differently in the last bit, are turned off
where the book is built (the Makefile, the publish workflow), so the same data reach the renderer.

Each figure is drawn once: drawing is most of the cost, and one draw answers both questions.
"""

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from servebook.book import figures

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "figures"
REGISTRY = figures.registry()
REBUILD = "python -m tools.build figures rewrites it; commit what it writes"


def test_every_committed_figure_has_a_function_and_every_function_a_file():
    stems = {p.stem for p in COMMITTED.glob("*.svg")} | {p.stem for p in COMMITTED.glob("*.png")}
    assert stems == set(REGISTRY), (
        f"stale files: {sorted(stems - set(REGISTRY))}; "
        f"not written yet (run python -m tools.build figures): {sorted(set(REGISTRY) - stems)}"
    )


def test_numpy_runs_no_avx512_loop():
    """The committed PNGs are drawn by the numpy loops every x86-64 machine runs: AVX-512's log10 and power
    round a few results differently in the last bit, which moves antialiased pixels.  ``make test`` and
    ``make book`` turn those loops off (``NPY_DISABLE_CPU_FEATURES``, in the Makefile)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    # The targets numpy's loops are compiled for, not the CPU's features: numpy >= 2.4 groups AVX-512 into
    # targets (X86_V4, AVX512_ICL, ...) and turning those off leaves the features themselves reported.
    wide = [t for t in __cpu_dispatch__ if t.startswith("AVX512") or t == "X86_V4"]
    active = sorted(t for t in wide if __cpu_features__.get(t))
    assert not active, (f"numpy dispatches {active}: run the tests with make test, or with "
                        "NPY_DISABLE_CPU_FEATURES set as the Makefile sets it")


@pytest.mark.parametrize("stem", sorted(REGISTRY))
def test_committed_figure_is_what_the_build_writes(stem, tmp_path):
    figure = REGISTRY[stem]()
    assert isinstance(figure, Figure)
    svg = figures.save(figure, tmp_path / f"{stem}.svg")
    png = figures.save(figure, tmp_path / f"{stem}.png")
    again = figures.save(figure, tmp_path / "again.png")
    text = svg.read_text(encoding="utf-8")
    assert "<dc:date>" not in text and "Matplotlib v" not in text, "figure metadata must carry no date or version"
    # Saving draws a copy, so what was written before (the SVG) cannot change the next file.
    assert png.read_bytes() == again.read_bytes(), f"{stem}.png depends on what was saved before it"
    assert svg.read_bytes() == (COMMITTED / f"{stem}.svg").read_bytes(), f"figures/{stem}.svg is stale: {REBUILD}"
    committed, fresh = imread(COMMITTED / f"{stem}.png"), imread(png)
    assert committed.shape == fresh.shape and np.array_equal(committed, fresh), (
        f"figures/{stem}.png is stale: {REBUILD}")


def test_figure_functions_are_reachable_by_name():
    for function in REGISTRY.values():
        assert getattr(figures, function.__name__) is function
    with pytest.raises(AttributeError, match="no figure function"):
        figures.no_such_figure  # noqa: B018
