"""The API reference appendix, written from the public modules' docstrings.

quartodoc is the Quarto ecosystem's generator, but its cross-links break in a
``type: book`` project (quartodoc#346).  This is a small generator of our own: it
imports every public module of ``servebook`` (not ``servebook.book``, which only the
book uses), and writes one page with a section per module and an entry per public
function and class, each with its signature and docstring.  Docstring roles
(``:func:``, ``:class:``, ``:meth:``, ...) become links to the entry they name, or
code where the name is not documented here; ````literal```` becomes code.  The page is
committed, so Quarto renders it like any other, and a test fails when it differs from
what the docstrings give: ``python -m tools.build reference`` rewrites it.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PAGE = Path("appendices") / "api-reference.qmd"
PACKAGE = "servebook"
SKIPPED = ("servebook.book", "servebook.__main__")
WIDTH = 75
ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`")
LITERAL = re.compile(r"``(.+?)``", re.S)
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


@dataclass(frozen=True)
class Entry:
    """A documented object: where it is documented and under which anchor."""

    module: str        # "servebook.memory"
    name: str          # "capacity_plan", "CapacityPlan", "CapacityPlan.describe"
    obj: object

    @property
    def anchor(self) -> str:
        return "api-" + f"{self.module.removeprefix(PACKAGE + '.')}-{self.name}".replace(".", "-").lower()


def public_modules() -> list[ModuleType]:
    """Every module and subpackage directly under ``servebook``, but the book's own layer, by name."""
    package = importlib.import_module(PACKAGE)
    names = [f"{PACKAGE}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
             if not info.name.startswith("_")]
    return [importlib.import_module(name) for name in sorted(names) if not name.startswith(SKIPPED)]


def members(module: ModuleType) -> list[tuple[str, object]]:
    """The public functions and classes a module defines (a package: those its ``__init__`` exports).

    ``__all__``, where a module has one, says which.
    """
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = []
    for name in names:
        obj = getattr(module, name)
        home = getattr(obj, "__module__", "") or ""
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and (
                home == module.__name__ or home.startswith(module.__name__ + ".") and hasattr(module, "__path__")):
            found.append((name, obj))
    return found  # in the order the module defines (or its __init__ imports, or __all__ lists) them


def class_members(cls: type) -> list[tuple[str, object]]:
    """Public methods and properties a class defines itself (inherited ones are documented where defined)."""
    found = []
    for name, value in vars(cls).items():
        if name.startswith("_") or isinstance(value, enum.Enum):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            found.append((name, value))
    return found


def index(modules: list[ModuleType]) -> dict[str, str]:
    """Every way a docstring may name a documented module or object -> the anchor of its entry."""
    anchors: dict[str, str] = {}
    for module in modules:
        short = module.__name__.removeprefix(PACKAGE + ".")
        anchors[module.__name__] = anchors[short] = f"sec-api-{short}"
        for name, obj in members(module):
            found = [Entry(module.__name__, name, obj)]
            if inspect.isclass(obj):
                found += [Entry(module.__name__, f"{name}.{m}", value) for m, value in class_members(obj)]
            for entry in found:
                for alias in (entry.name, f"{short}.{entry.name}", f"{module.__name__}.{entry.name}"):
                    anchors.setdefault(alias, entry.anchor)
    return anchors


def _annotation(value) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def signature(name: str, obj) -> str:
    """``name(params) -> result`` as a code block's text, one parameter a line when it is too wide."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params, previous = [], None
    for p in sig.parameters.values():
        if p.name in ("self", "cls") and previous is None:
            previous = p.kind
            continue
        if p.kind is p.KEYWORD_ONLY and previous not in (p.KEYWORD_ONLY, p.VAR_POSITIONAL):
            params.append("*")
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += (" = " if p.annotation is not p.empty else "=") + ADDRESS.sub("", repr(p.default))
        params.append(text)
        previous = p.kind
    returns = sig.return_annotation is not sig.empty and not inspect.isclass(obj)
    result = f" -> {_annotation(sig.return_annotation)}" if returns else ""
    one_line = f"{name}({', '.join(params)}){result}"
    if len(one_line) <= WIDTH or not params:
        return one_line
    return f"{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){result}"


def docstring(obj, anchors: dict[str, str], module: str) -> str:
    """A docstring as Markdown: roles linked, literals as code, reST's ``::`` as a plain colon."""
    text = inspect.getdoc(obj) or ""
    if not text:
        return ""

    def role(match: re.Match) -> str:
        name = match.group(1).strip()
        shown = name.split(".")[-1] if match.group(0).count("~") else name
        anchor = anchors.get(name) or anchors.get(f"{module}.{name}")
        return f"[`{shown}`](#{anchor})" if anchor else f"`{shown}`"

    text = ROLE.sub(role, text)
    text = LITERAL.sub(lambda m: "`" + m.group(1).replace("\n", " ") + "`", text)
    text = re.sub(r"::$", ":", text, flags=re.M)
    pieces = re.split(r"(`[^`]*`|^(?: {4}).*$)", text, flags=re.M)
    # Outside code, @ would start a citation and $ a formula for Quarto.
    return "".join(p if i % 2 else p.replace("@", r"\@").replace("$", r"\$") for i, p in enumerate(pieces))


def entry_text(module: str, name: str, obj, anchors: dict[str, str], level: int = 3) -> list[str]:
    anchor = Entry(module, name, obj).anchor
    kind = "class" if inspect.isclass(obj) else "property" if isinstance(obj, property) else "function"
    lines = [f"{'#' * level} `{name}` {{#{anchor} .unnumbered}}", ""]
    if kind == "property":
        returns = _annotation(inspect.signature(obj.fget).return_annotation) if obj.fget else ""
        lines += [f"*property* → `{returns}`" if returns else "*property*", ""]
    else:
        lines += ["```python", signature(name.split(".")[-1], obj), "```", ""]
    doc = docstring(obj.fget if kind == "property" else obj, anchors, module)
    if doc:
        lines += [doc, ""]
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        lines += ["Members: " + ", ".join(f"`{m.name}` (`{m.value!r}`)" for m in obj), ""]
    return lines


def module_text(module: ModuleType, anchors: dict[str, str]) -> list[str]:
    short = module.__name__.removeprefix(PACKAGE + ".")
    lines = [f"## `{module.__name__}` {{#sec-api-{short}}}", ""]
    doc = docstring(module, anchors, module.__name__)
    lines += [doc, ""] if doc else []
    for name, obj in members(module):
        lines += entry_text(module.__name__, name, obj, anchors)
        if inspect.isclass(obj):
            for method, value in class_members(obj):
                lines += entry_text(module.__name__, f"{name}.{method}", value, anchors, level=4)
    return lines


def page_text() -> str:
    """The whole API reference page."""
    modules = public_modules()
    anchors = index(modules)
    head = textwrap.dedent("""\
        ---
        toc-depth: 2
        ---

        <!-- Written by `python -m tools.build reference` from the docstrings: edit those, not this page. -->

        # API reference {#sec-api-reference}

        Every public module of `servebook`, with the signature and the docstring of each function and
        class it offers, generated from the code on every build. `servebook.book` holds what only this
        book uses (its scenarios, figures and widgets) and is left out.
        """)
    body = [line for module in modules for line in module_text(module, anchors)]
    return head + "\n" + "\n".join(body).rstrip() + "\n"


def write(root: Path) -> list[Path]:
    """Rewrite the API reference page under ``root``; return the pages written."""
    target = root / PAGE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page_text(), encoding="utf-8")
    return [target]
