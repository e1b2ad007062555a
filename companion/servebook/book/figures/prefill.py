"""Figures of the prefill-and-decode chapter: the roofline, and what W4A16 and W8A8 do to each phase."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import models, roofline
from .. import fmt, scenarios
from . import _style

PREFILL = _style.SEQUENCE[3]  # purple: prefill points
DECODE = _style.ACCENT        # blue: decode points
SPEED_TOP = 4.2               # the speed chart's y axis ends here


def _intensities() -> np.ndarray:
    """The roofline's x axis: arithmetic intensities from 10^-0.5 to 10^5 FLOP per byte."""
    return np.logspace(-0.5, 5, 200)


def roofline_prefill_decode(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> Figure:
    """The GPU's roofline with the model's decode steps (left of the ridge) and prefill steps (right)."""
    device = case.device
    ridge = roofline.ridge_point(device)
    x = _intensities()
    fig, ax = _style.new_figure(7.2, 4.2)
    with matplotlib.rc_context(_style.RC):
        ax.loglog(x, np.minimum(device.fp16_flops, x * device.bandwidth) / 1e12, color=_style.MUTED, linewidth=2,
                  label="FP16 tensor-core roof")
        ax.loglog(x, np.minimum(device.int8_ops, x * device.bandwidth) / 1e12, color=_style.MUTED, linewidth=1,
                  linestyle="--", label="INT8 tensor-core roof (W8A8)")
        ax.axvline(ridge, color=_style.MUTED, linestyle=":", linewidth=1)
        ax.annotate(f"ridge point\n{ridge:,.0f} FLOP/byte", (ridge, device.fp16_flops / 1e12 / 250), xytext=(6, 0),
                    textcoords="offset points", color=_style.MUTED, fontsize=9)
        ax.annotate(f"slope: {device.bandwidth / 1e12:,.3f} TB/s", (4, 4 * device.bandwidth / 1e12),
                    xytext=(-8, 6), textcoords="offset points", ha="right", color=_style.MUTED, fontsize=9)
        ax.annotate(f"{device.fp16_flops / 1e12:,.0f} TFLOP/s dense FP16", (2e3, device.fp16_flops / 1e12),
                    xytext=(0, 5), textcoords="offset points", color=_style.MUTED, fontsize=9)

        for i, (batch, b) in enumerate(zip(case.decode_batches, case.decode_bounds(), strict=True)):
            ax.plot(b.step.intensity, b.attainable_flops / 1e12, "o", color=DECODE, markersize=7,
                    label=f"decode, context {case.context_len}" if i == 0 else None)
            ax.annotate(f"B={batch}: {b.step.intensity:,.1f} FLOP/B, ≤ {b.tokens_per_s:,.0f} tok/s",
                        (b.step.intensity, b.attainable_flops / 1e12), xytext=(9, -4),
                        textcoords="offset points", ha="left", va="top", color=DECODE, fontsize=8.5)
        for i, ((batch, prompt), b) in enumerate(zip(case.prefills, case.prefill_bounds(), strict=True)):
            ax.plot(b.step.intensity, b.attainable_flops / 1e12, "s", color=PREFILL, markersize=7,
                    label="prefill" if i == 0 else None)
            ax.annotate(f"{batch}×{prompt}: {b.step.intensity:,.0f} FLOP/B",
                        (b.step.intensity, b.attainable_flops / 1e12), xytext=(0, -16 - 12 * i),
                        textcoords="offset points", ha="center", color=PREFILL, fontsize=8.5)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
        ax.set_ylabel("attainable TFLOP/s")
        ax.set_title(f"{models.display_name(case.model)} on {device.display_name}: "
                     "decode on the slope, prefill under the roof")
        ax.set_xlim(x[0], x[-1])
        ax.set_ylim(0.2, device.int8_ops / 1e12 * 2.5)
        ax.legend(loc="upper left", fontsize=9)
    return fig


def roofline_prefill_decode_alt(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> str:
    """The alt text of :func:`roofline_prefill_decode`: the roofs, the ridge, and where each step lies."""
    device, x = case.device, _intensities()
    ridge = roofline.ridge_point(device)
    decodes = [b.step.intensity for b in case.decode_bounds()]
    prefills = [b.step.intensity for b in case.prefill_bounds()]
    if max(decodes) >= ridge or min(prefills) <= ridge:  # the text puts decode on the slope, prefill on the roof
        raise RuntimeError(f"roofline_prefill_decode_alt describes decode below the ridge {ridge:.0f} and prefill "
                           f"above it; decode at {decodes}, prefill at {prefills}")
    decode_at, prefill_at = (fmt.listed([fmt.significant(i) for i in points]) for points in (decodes, prefills))
    return (f"Log-log roofline chart. X axis: arithmetic intensity in FLOP per byte from {x[0]:.1g} to "
            f"{x[-1]:,.0f}; Y axis: attainable TFLOP/s. A solid grey line rises with slope "
            f"{device.bandwidth / 1e12:,.3f} TB/s and flattens at {device.fp16_flops / 1e12:,.0f} TFLOP/s at the "
            f"ridge point, {ridge:,.0f} FLOP/byte, marked by a dotted vertical line; a dashed line flattens at "
            f"{device.int8_ops / 1e12:,.0f} for INT8. Blue circles for decode at batch "
            f"{fmt.listed(case.decode_batches)} lie on the rising slope at about {decode_at} FLOP/byte. Purple squares "
            f"for prefill of {fmt.listed([f'{batch} x {prompt}' for batch, prompt in case.prefills])} tokens lie on "
            f"the flat roof at about {prefill_at} FLOP/byte.")


def _speedups(case: scenarios.RooflineCase):
    """The step sizes 1, 2, 4, ... up to ``max_step_tokens``, and each weight scheme's speed over W16A16 at each."""
    tokens = 2 ** np.arange(0, int(np.log2(case.max_step_tokens)) + 1)
    return tokens, {weights: np.array([roofline.weight_scheme_speedup(case.spec, case.device, int(n), weights)
                                       for n in tokens]) for weights in ("W4A16", "W8A8")}


def quant_speedup(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> Figure:
    """Speed of W8A8 and W4A16 over W16A16 against the tokens a step processes: W4A16 wins small, loses big."""
    device = case.device
    tokens, speeds = _speedups(case)
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        ax.axhline(1, color=_style.MUTED, linewidth=1)
        ax.annotate("W16A16 (FP16 weights)", (tokens[-1], 1), xytext=(0, 4), textcoords="offset points",
                    ha="right", color=_style.MUTED, fontsize=9)
        for weights, colour in (("W4A16", _style.WEIGHTS), ("W8A8", _style.ACCENT)):
            speed = speeds[weights]
            ax.semilogx(tokens, speed, "o-", color=colour, base=2, label=weights, markersize=4)
            ax.annotate(f"×{speed[0]:.2f}", (tokens[0], speed[0]), xytext=(6, 4), textcoords="offset points",
                        color=colour, fontsize=9)
            ax.annotate(f"×{speed[-1]:.2f}", (tokens[-1], speed[-1]), xytext=(-4, -14 if speed[-1] < 1 else 4),
                        textcoords="offset points", ha="right", color=colour, fontsize=9)
        ridge = roofline.ridge_point(device)
        ax.axvline(ridge, color=_style.MUTED, linestyle=":", linewidth=1)
        ax.annotate(f"FP16 ridge: {ridge:,.0f} FLOP/B\n≈ {ridge:,.0f} tokens per step", (ridge, 3.3), xytext=(4, 0),
                    textcoords="offset points", color=_style.MUTED, fontsize=9)
        ticks = tokens[::2]
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.set_xlabel("tokens in the step (decode: batch size; prefill: batch × prompt)")
        ax.set_ylabel("speed vs W16A16 (roofline bound)")
        ax.set_title(f"{models.display_name(case.model)} on {device.display_name}: W4A16 wins small steps,\n"
                     "loses big ones if dequantization adds to the tensor-core time")
        ax.set_ylim(0, SPEED_TOP)
        ax.legend(loc="upper right")
    return fig


def quant_speedup_alt(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> str:
    """The alt text of :func:`quant_speedup`: W8A8's flat line, W4A16's plateau, fall, crossing and floor."""
    tokens, speeds = _speedups(case)
    w4, w8 = speeds["W4A16"], speeds["W8A8"]
    high = tokens[w4 >= 0.99 * w4[0]]    # the plateau: within 1% of the smallest step's speed
    low = tokens[w4 <= 1.01 * w4[-1]]    # the floor: within 1% of the largest step's
    slower = tokens[w4 < 1]
    if np.ptp(w8) > 0.05 or not (high[-1] < slower[0] <= low[0]) or len(high) + len(low) >= len(tokens):
        raise RuntimeError("quant_speedup_alt describes a flat W8A8 line and a W4A16 line that falls from a "
                           "plateau across 1.0 to a floor")
    falls_from = tokens[len(high)]
    return (f"Line chart, x axis tokens in the step from {tokens[0]:,} to {tokens[-1]:,} on a log scale, y axis "
            f"speed relative to FP16 from 0 to {int(SPEED_TOP)}. A flat blue W8A8 line at {w8[0]:.1f}. An orange "
            f"W4A16 line starts at {w4[0]:.2f} for {high[0]:,} to {high[-1]:,} tokens, falls steeply between "
            f"{falls_from:,} and {low[0]:,} tokens, crosses 1.0 near {slower[0]:,} tokens, and stays at "
            f"{w4[-1]:.2f} from {low[0]:,} tokens on. A grey horizontal line marks 1.0 and a dotted vertical line "
            f"the ridge point near {roofline.ridge_point(case.device):,.0f}.")


FIGURES = {
    "roofline-prefill-decode": roofline_prefill_decode,
    "quant-speedup": quant_speedup,
}

ALT_TEXTS = {
    "roofline-prefill-decode": roofline_prefill_decode_alt,
    "quant-speedup": quant_speedup_alt,
}
