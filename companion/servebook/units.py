"""Byte units and bytes per element.

Every size in servebook is an ``int`` number of bytes.  Units exist only for
display, and a displayed size always names its unit: ``GiB`` (1024**3) and
``GB`` (10**9) differ by 7.4 %, which is enough to turn "fits" into "OOM".
"""

from __future__ import annotations

from fractions import Fraction

# Binary (IEC) units: what nvidia-smi and torch.cuda report.
KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

# Decimal (SI) units: what datasheets and disk vendors print.
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4

UNITS: dict[str, int] = {
    "B": 1,
    "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
    "KB": KB, "MB": MB, "GB": GB, "TB": TB,
}

# Bytes per element.  int4 is half a byte: two codes share one byte, so it is
# kept exact as a Fraction and totals are rounded up to whole bytes.
DTYPE_BYTES: dict[str, Fraction] = {
    "fp32": Fraction(4),
    "fp16": Fraction(2),
    "bf16": Fraction(2),
    "fp8": Fraction(1),
    "int8": Fraction(1),
    "int4": Fraction(1, 2),
}

_ALIASES = {
    "float32": "fp32", "float": "fp32",
    "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}


def canonical_dtype(dtype: str) -> str:
    """Return the canonical name of ``dtype`` (``"float16"`` -> ``"fp16"``)."""
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a string such as 'fp16', got {type(dtype).__name__}")
    name = dtype.lower().removeprefix("torch.")
    name = _ALIASES.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPE_BYTES)}")
    return name


def bytes_per_element(dtype: str) -> Fraction:
    """Bytes one element of ``dtype`` occupies (``Fraction(1, 2)`` for int4)."""
    return DTYPE_BYTES[canonical_dtype(dtype)]


def bits_per_element(dtype: str) -> int:
    return int(bytes_per_element(dtype) * 8)


def ceil_div(items: int, per_container: int) -> int:
    """Whole containers of ``per_container`` that hold ``items``: blocks for tokens, tiles for rows.

    The one ceiling division of the library (integers only, so no float rounding at large counts).
    """
    return -(-items // per_container)


def to_unit(n_bytes: int, unit: str) -> float:
    """Convert a byte count to ``unit`` (for display only)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; known units: {', '.join(UNITS)}")
    return n_bytes / UNITS[unit]


def fmt_bytes(n_bytes: int, unit: str = "GiB", digits: int = 3) -> str:
    """Format a byte count in one named unit, e.g. ``'3.125 GiB'``."""
    value = to_unit(n_bytes, unit)
    return f"{value:,.{digits}f} {unit}"


def fmt_both(n_bytes: int, digits: int = 3, binary: str = "GiB", decimal: str = "GB") -> str:
    """Both readings of one size, e.g. ``'3.125 GiB = 3.355 GB'``."""
    return f"{fmt_bytes(n_bytes, binary, digits)} = {fmt_bytes(n_bytes, decimal, digits)}"
