"""Figures of the prefill-and-decode chapter: the roofline, and what W4A16 and W8A8 do to each phase."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import models, roofline
from .. import scenarios
from . import _style

PREFILL = _style.SEQUENCE[3]  # purple: prefill points
DECODE = _style.ACCENT        # blue: decode points


def roofline_prefill_decode(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> Figure:
    """The GPU's roofline with the model's decode steps (left of the ridge) and prefill steps (right)."""
    device = case.device
    ridge = roofline.ridge_point(device)
    x = np.logspace(-0.5, 5, 200)
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


def quant_speedup(case: scenarios.RooflineCase = scenarios.PREFILL_DECODE) -> Figure:
    """Speed of W8A8 and W4A16 over W16A16 against the tokens a step processes: W4A16 wins small, loses big."""
    device = case.device
    tokens = 2 ** np.arange(0, int(np.log2(case.max_step_tokens)) + 1)
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        ax.axhline(1, color=_style.MUTED, linewidth=1)
        ax.annotate("W16A16 (FP16 weights)", (tokens[-1], 1), xytext=(0, 4), textcoords="offset points",
                    ha="right", color=_style.MUTED, fontsize=9)
        for weights, colour in (("W4A16", _style.WEIGHTS), ("W8A8", _style.ACCENT)):
            speed = np.array([roofline.weight_scheme_speedup(case.spec, device, int(n), weights) for n in tokens])
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
        ax.set_ylim(0, 4.2)
        ax.legend(loc="upper right")
    return fig


FIGURES = {
    "roofline-prefill-decode": roofline_prefill_decode,
    "quant-speedup": quant_speedup,
}
