"""Argument checks shared by every module: each names the argument and what is allowed.

Bad input must fail at the door with a message a reader can act on, never as a
silent wrong number or a crash deep inside numpy.
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def whole(name: str, value, minimum: int = 1) -> int:
    """A whole number (tokens, requests, blocks, layers...) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a whole number (int), got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def positive(name: str, value, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def byte_count(name: str, value, allow_zero: bool = True) -> int:
    """A number of bytes: an int, or a real that is a whole number of bytes (``6.5 * GB``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of bytes, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} bytes, got {value}")
    if value != int(value):
        raise ValueError(f"{name} must be a whole number of bytes, got {value}")
    return int(value)


def lookup(kind: str, name, table: dict, key=str.lower):
    """``table[key(name)]``; an unknown name raises a ValueError listing the known ones.

    Registries (models, GPUs, quantization schemes) are looked up by a case-insensitive name.
    """
    if not isinstance(name, str):
        raise TypeError(f"{kind} name must be a string, got {type(name).__name__}")
    if key(name) not in table:
        raise ValueError(f"unknown {kind} {name!r}; known {kind}s: {', '.join(table)}")
    return table[key(name)]
