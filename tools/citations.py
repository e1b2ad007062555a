"""Short author-year citations from ``references.bib``, as the book's citation style writes them.

Quarto cites with the Chicago author-date style: one, two or three family names
("Shazeer", "Frantar and Alistarh", "Williams, Waterman, and Patterson"), "et al."
from four authors on, then the year; two works that would read the same get the
year suffixes a, b in the order of the bibliography (author, year, title).  The
notebooks and the preview write citations this way, linked to the references page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ENTRY_START = re.compile(r"@(\w+)\s*\{\s*([^,\s]+)\s*,")
FIELD_NAME = re.compile(r"\s*([\w-]+)\s*=\s*")


@dataclass(frozen=True)
class Reference:
    """One ``references.bib`` entry, as much of it as an in-text citation needs."""

    key: str
    authors: tuple[str, ...]   # family names, or an organisation's name
    year: str
    title: str


def _braced(text: str, start: int) -> tuple[str, int]:
    """The text inside the braces opening at ``text[start]``, and the index after the closing brace."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[start + 1:index], index + 1
    raise ValueError(f"unbalanced braces in references.bib near {text[start:start + 60]!r}")


def _fields(body: str) -> dict[str, str]:
    fields, index = {}, 0
    while (match := FIELD_NAME.match(body, index)):
        index = match.end()
        if body[index] == "{":
            value, index = _braced(body, index)
        elif body[index] == '"':
            end = body.index('"', index + 1)
            value, index = body[index + 1:end], end + 1
        else:
            value = re.match(r"[^,}\s]+", body[index:]).group(0)
            index += len(value)
        fields[match.group(1).lower()] = value
        index = body.find(",", index) + 1 or len(body)
    return fields


def _split_top_level(text: str, separator: str) -> list[str]:
    """``text`` split on ``separator`` where it stands outside braces."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0 and text.startswith(separator, index):
            parts.append(text[start:index])
            start = index + len(separator)
    return [*parts, text[start:]]


def family_name(author: str) -> str:
    """The family name of a BibTeX author.

    "Kwon, Woosuk" -> "Kwon"; "van Baalen, Mart" -> "van Baalen"; "{NVIDIA}" -> "NVIDIA"; "Ada Lovelace" -> "Lovelace".
    """
    author = author.strip()
    if author.startswith("{") and author.endswith("}"):
        return plain(author)
    if "," in author:
        return plain(author.split(",", 1)[0])
    return plain(author.split()[-1])


def plain(text: str) -> str:
    """BibTeX text without its protecting braces and with its whitespace collapsed."""
    return " ".join(text.replace("{", "").replace("}", "").split())


def read_bibliography(path: Path) -> dict[str, Reference]:
    """Every entry of a ``.bib`` file by key."""
    text = Path(path).read_text(encoding="utf-8")
    found = {}
    for match in ENTRY_START.finditer(text):
        body, _ = _braced(text, text.index("{", match.start()))
        fields = _fields(body[body.index(",") + 1:])
        authors = tuple(family_name(a) for a in _split_top_level(fields.get("author", ""), " and ") if a.strip())
        found[match.group(2)] = Reference(match.group(2), authors, fields.get("year", "n.d."),
                                          plain(fields.get("title", "")))
    return found


def names(authors: tuple[str, ...]) -> str:
    """The author part of a citation: up to three names, "et al." from four on."""
    if len(authors) >= 4:
        return f"{authors[0]} et al."
    if len(authors) == 3:
        return f"{authors[0]}, {authors[1]}, and {authors[2]}"
    return " and ".join(authors) or "Anonymous"


def short_citations(references: dict[str, Reference]) -> dict[str, tuple[str, str]]:
    """key -> (authors, year) as a citation prints them, with a, b, ... where two would read the same."""
    order = sorted(references.values(), key=lambda r: (names(r.authors).lower(), r.year, r.title.lower()))
    seen: dict[tuple[str, str], list[str]] = {}
    for ref in order:
        seen.setdefault((names(ref.authors), ref.year), []).append(ref.key)
    cited = {}
    for (authors, year), keys in seen.items():
        for index, key in enumerate(keys):
            cited[key] = (authors, year + (chr(ord("a") + index) if len(keys) > 1 else ""))
    return cited
