"""A quantization explorer: a range, a bit width, a value and a rounding rule; see its code and its error.

:func:`quant_explorer_rows` computes everything the explorer shows, exactly (the
inputs are decimal strings, so 0.35 means 7/20), with :mod:`servebook.quant`;
:func:`quant_explorer_text` lays it out; the widget from :func:`quant_explorer`
only collects inputs and displays that text, so what a test checks is what a
reader sees.  A last row says what the float64 path computes, and warns when it
disagrees with the exact answer.
"""

from __future__ import annotations

from fractions import Fraction

from ... import checks, quant
from ...quant import Mapping, Rounding
from .. import scenarios, ties

R_MIN, R_MAX = scenarios.EXAMPLE_RANGE  # the explorer opens on worked example 1


def fmt_exact(value: Fraction | int, digits: int = 10) -> str:
    """A Fraction as a decimal when it terminates (``0.1``), else ``1/255 ≈ 0.003921568627``."""
    value = Fraction(value)
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator == 1:
        places = 0
        while (value * 10**places).denominator != 1:
            places += 1
        return f"{float(value):.{places}f}" if places <= 20 else str(value)
    return f"{value.numerator}/{value.denominator} ≈ {float(value):.{digits}g}"


def quant_explorer_rows(r_min: str = R_MIN, r_max: str = R_MAX, bits: int = 4, r: str = scenarios.EXAMPLE_WEIGHT,
                        rounding: Rounding | str = Rounding.HALF_UP,
                        mapping: Mapping | str = Mapping.ASYMMETRIC) -> list[tuple[str, str]]:
    """Everything the explorer shows, as (label, value) rows, computed exactly from decimal strings."""
    rnd = quant.rounding_function(rounding)
    mapping = checks.member("mapping", mapping, Mapping)
    scale, zero_point = quant.choose_qparams_affine(r_min, r_max, bits, mapping, rounding=rounding)
    qmin, qmax = quant.qrange(bits, mapping)
    value = quant.to_fraction(r)
    wanted = rnd(value / scale) + zero_point
    q = quant.quantize_affine(value, scale, zero_point, qmin, qmax, rounding)
    r_hat = quant.dequantize_affine(q, scale, zero_point)
    error = abs(value - r_hat)
    bound = quant.error_bound(scale)
    low, high = quant.dequantize_affine(qmin, scale, zero_point), quant.dequantize_affine(qmax, scale, zero_point)
    formula = ("s = (r_max - r_min) / (2^b - 1)" if mapping is Mapping.ASYMMETRIC
               else "s = max(|r_min|, |r_max|) / (2^(b-1) - 1)")
    rows = [
        ("grid", f"{qmax - qmin + 1:,} codes {qmin}..{qmax} ({bits} bits, {mapping.value}), "
                 f"{qmax - qmin:,} gaps"),
        ("scale", f"{formula} = {fmt_exact(scale)}"),
        ("zero point", f"z = {zero_point}" + ("" if mapping is Mapping.SYMMETRIC else
                                               f" (real 0 sits on code {zero_point})")),
        ("covers", f"[{fmt_exact(low)}, {fmt_exact(high)}]"),
        ("r / s", fmt_exact(value / scale) + ("  <- a tie: the rounding rule decides"
                                              if (value / scale).denominator == 2 else "")),
        ("code", f"q = {q}" + (f" (wanted {wanted}: saturated, never wrapped)" if wanted != q else "")),
        ("r_hat", f"s (q - z) = {fmt_exact(r_hat)}"),
        ("error", f"|r - r_hat| = {fmt_exact(error)}; bound s/2 = {fmt_exact(bound)}"
                  + (f"; {fmt_exact(error / bound)} x the bound" if error > bound else "")),
    ]
    q64, naive = ties.float64_codes(value, r_min, r_max, bits, rounding, mapping)
    agree = q64 == q and naive == q
    rows.append(("float64", f"q = {q64} via r * (1/s), q = {naive} via r / s"
                            + ("" if agree else f"  <- misses the exact {q}")))
    return rows


def quant_explorer_text(r_min: str = R_MIN, r_max: str = R_MAX, bits: int = 4, r: str = scenarios.EXAMPLE_WEIGHT,
                        rounding: Rounding | str = Rounding.HALF_UP,
                        mapping: Mapping | str = Mapping.ASYMMETRIC) -> str:
    """The explorer's text: the rows of :func:`quant_explorer_rows`, one per line, labels aligned."""
    rows = quant_explorer_rows(r_min, r_max, bits, r, rounding, mapping)
    return "\n".join(f"{label:<11} {value}" for label, value in rows)


def quant_explorer(r_min: str = R_MIN, r_max: str = R_MAX, bits: int = 4, r: str = scenarios.EXAMPLE_WEIGHT,
                   rounding: str = "half_up", mapping: str = "asymmetric"):
    """The interactive explorer (ipywidgets): type a range and a value, pick bits and rounding.

    Numbers are typed as decimals and computed exactly; bad input shows its error message instead.
    A :class:`~.layout.Panel` whose ``controls`` are named after :func:`quant_explorer_text`'s arguments.
    """
    import ipywidgets as w

    from .layout import Panel

    panel = Panel({
        "r_min": ("r_min", w.Text(value=r_min)),
        "r_max": ("r_max", w.Text(value=r_max)),
        "r": ("value r", w.Text(value=r)),
        "bits": ("bits b", w.IntSlider(value=bits, min=1, max=16)),
        "rounding": ("rounding", w.ToggleButtons(options=[m.value for m in Rounding], value=Rounding(rounding).value)),
        "mapping": ("mapping", w.ToggleButtons(options=[m.value for m in Mapping], value=Mapping(mapping).value)),
    })
    panel.follow(lambda *_: panel.show(lambda: quant_explorer_text(
        **{name: box.value for name, box in panel.controls.items()})))
    return panel
