"""Every figure of the book: one function per figure, named after what it shows.

Figures live in topic modules (``kv``, ``quant``, ``paging``, ...).  Each module
lists its figures in ``FIGURES``, a dict from the stable file stem written under
``figures/`` to the function that draws it.  Functions return a
:class:`matplotlib.figure.Figure` and take only keyword arguments with defaults,
so ``figures.kv_growth()`` in a chapter draws exactly the file that
``save_all()`` writes.

A figure's alt text (the ``fig-alt`` a screen reader speaks) quotes the numbers
the figure draws, so it is written from them too: a module's ``ALT_TEXTS`` maps
a stem to a function of no arguments that returns the text for the figure
drawn with its defaults, and :func:`alt` gives it by the figure function's name.
The build writes it into the page (``tools/alts.py``); the tests hold the page to it.

Modules are imported on first use, so ``import servebook.book.figures`` stays cheap
and a chapter pays only for the figures it shows.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

from ...checks import choice
from ._style import save

TOPICS = ("kv", "modern", "prefill", "paging", "batching", "quant", "groupwise", "fp8", "capacity", "parallel",
          "lab")

__all__ = ["TOPICS", "alt", "alt_texts", "registry", "save", "save_all"]


def _topic_modules():
    for topic in TOPICS:
        try:
            yield importlib.import_module(f"{__name__}.{topic}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{topic}":
                raise


def registry() -> dict[str, Callable[[], Figure]]:
    """Stable file stem -> figure function, over every topic module."""
    found: dict[str, Callable[[], Figure]] = {}
    for module in _topic_modules():
        for stem, function in module.FIGURES.items():
            if stem in found:
                raise RuntimeError(f"figure name {stem!r} is defined twice")
            found[stem] = function
    return found


def alt_texts() -> dict[str, Callable[[], str]]:
    """Figure function name (as a page calls it) -> the function that writes its alt text."""
    found: dict[str, Callable[[], str]] = {}
    for module in _topic_modules():
        for stem, describe in getattr(module, "ALT_TEXTS", {}).items():
            if stem not in module.FIGURES:
                raise RuntimeError(f"{module.__name__}.ALT_TEXTS names {stem!r}, which is not one of its FIGURES")
            found[module.FIGURES[stem].__name__] = describe
    return found


def alt(name: str) -> str:
    """The alt text of the figure ``figures.<name>()`` draws, with the numbers it draws.

    One line of plain text, without double quotes or backslashes, so that it
    stands as a quoted ``#| fig-alt:`` cell option as it is.
    """
    describers = alt_texts()
    text = describers[choice("name", name, sorted(describers))]()
    if not isinstance(text, str) or not text.endswith(".") or any(c in text for c in '"\\\n'):
        raise RuntimeError(f"the alt text of {name} must be one line ending in '.', "
                           f"without double quotes or backslashes: {text!r}")
    return text


def save_all(directory: str | Path = "figures", formats: tuple[str, ...] = ("svg", "png")) -> list[Path]:
    """Draw every figure and write it to ``directory/<stem>.<format>``; return the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, function in sorted(registry().items()):
        fig = function()
        for fmt in formats:
            written.append(save(fig, directory / f"{stem}.{fmt}"))
    return written


def __getattr__(name: str) -> Callable[..., Figure]:
    for module in _topic_modules():
        if any(function.__name__ == name for function in module.FIGURES.values()):
            return getattr(module, name)
    raise AttributeError(f"servebook.book.figures has no figure function {name!r}")
