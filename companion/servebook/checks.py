"""Argument checks shared by every module: each names the argument and what is allowed.

Bad input must fail at the door with a message a reader can act on, never as a
silent wrong number or a crash deep inside numpy.  Every module checks its
arguments with these functions; none writes its own ``isinstance`` test.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from numbers import Integral, Real


def whole(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number (tokens, requests, blocks, layers...) in ``minimum..maximum``."""
    if type(value) is int and value >= minimum and (maximum is None or value <= maximum):
        return value  # the common case, without the abstract-class check (simulators ask millions of times)
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a whole number (int), got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def number(name: str, value) -> float:
    """A finite real number (any sign)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def positive(name: str, value, allow_zero: bool = False) -> float:
    """A finite real number > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def interval(name: str, value, low: float, high: float, *, include_low: bool = True,
             include_high: bool = True) -> float:
    """A real number between ``low`` and ``high`` (a share, a damping factor, an exponent)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    above = value >= low if include_low else value > low
    below = value <= high if include_high else value < high
    if not (math.isfinite(value) and above and below):
        span = f"{'[' if include_low else '('}{low:g}, {high:g}{']' if include_high else ')'}"
        raise ValueError(f"{name} must be in {span}, got {value}")
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


def flag(name: str, value) -> bool:
    """A bool that really is a bool: ``"no"``, ``0`` and ``None`` are refused, not read as False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def choice(name: str, value, allowed: Iterable):
    """One of ``allowed`` (strings compare exactly); anything else names the allowed values."""
    allowed = tuple(allowed)
    if isinstance(value, bool) or value not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def member(name: str, value, enum_type: type[enum.Enum]):
    """A member of ``enum_type``, given as itself or by its name or value (case-insensitive)."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        for m in enum_type:
            if value.lower() in (str(m.value).lower(), m.name.lower()):
                return m
    allowed = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
    if isinstance(value, str):
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    raise TypeError(f"{name} must be one of {allowed}, got {type(value).__name__}")


def names(name: str, values, known: Iterable[str]) -> list[str]:
    """A list of names, each one of ``known``: a lone string is refused (it is not a list of names)."""
    known = list(known)
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of names, got {values!r}")
    values = list(values)
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{name} must hold names (strings), got {value!r}")
    unknown = [v for v in values if v not in known]
    if unknown:
        shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
        raise ValueError(f"{name}: unknown name(s) {', '.join(map(repr, unknown))}; known: {shown}")
    return values


def group_size(value, length: int | None = None, *, allow_none: bool = True, name: str = "group_size") -> int | None:
    """A quantization group size: a positive int that divides ``length`` (when given), or ``None``.

    ``None`` means no groups (one scale per row or per tensor).  A ragged last
    group is not supported anywhere in the library, so the size must divide.
    """
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be a positive int, got None")
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be a positive int{' or None' if allow_none else ''}, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if length is not None and length % value:
        raise ValueError(f"{name} {value} must divide the length {length} it groups "
                         "(pad the tensor or pick a divisor; a ragged last group is not supported)")
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
