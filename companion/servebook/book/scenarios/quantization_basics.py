"""Chapter 05's scenarios: the quantization examples, as decimal strings so that they compute exactly."""

from __future__ import annotations

EXAMPLE_RANGE = ("-0.6", "0.9")
"""The weights' range of the chapter's worked examples 1 and 2 and exercise 1: ``r_min``, ``r_max``."""

EXAMPLE_WEIGHT = "0.35"
"""C5's weight inside the range: on the INT4 grid, ``r / s`` is exactly a tie."""

EXAMPLE_OUTLIER = "1.4"
"""C6's outlier, beyond ``r_max``."""

BINARY_TIE = ("0.3125", "-0.75", "1.125")
"""A tie exact in binary, ``r``, ``r_min``, ``r_max`` (step 0.125, zero point 6): only the rounding rule decides."""

UNIT_RANGE = (-1, 1)
"""C8's and C10's range, for comparing bit widths."""

ERROR_SAMPLES = 20_000
"""Uniform samples on :data:`UNIT_RANGE` whose largest rounding error is measured against the bound."""
