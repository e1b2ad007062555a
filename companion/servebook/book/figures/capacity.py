"""Figures of capacity planning and of choosing the lever: the two buckets, users that fit, lever gains."""

from __future__ import annotations

from dataclasses import replace

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import gpus, models
from ...units import GB, GiB
from .. import fmt
from .. import scenarios as scenarios_
from . import _style

PRECISIONS = ("fp16", "int8", "int4")
LABEL_NUDGE = {"fp16": 0, "int8": -3, "int4": 7}  # points: keeps the three end labels apart
PRECISION_COLOURS = {"fp16": _style.SEQUENCE[0], "int8": _style.SEQUENCE[3], "int4": _style.WEIGHTS}
COLOUR_NAMES = {"fp16": "blue", "int8": "purple", "int4": "orange"}  # what the alt text calls them
TIGHT = 4 * GB  # free memory under this is labelled in red: too little to run on


def _buckets(budget: scenarios_.DecimalBudget) -> list[tuple[str, int, int]]:
    """Per weight precision: its weights and the memory left free beside them and the budget's KV cache."""
    return [(dtype, budget.weights(dtype), budget.gpu_memory - budget.weights(dtype) - budget.kv)
            for dtype in PRECISIONS]


def memory_buckets(budget: scenarios_.DecimalBudget = scenarios_.DECIMAL_BUDGET) -> Figure:
    """Weights (orange) and KV cache (teal) stacked on the budget's GPU, for FP16, INT8 and INT4 weights."""
    kv, gpu = budget.kv, budget.gpu_memory
    fig, ax = _style.new_figure(7.2, 3.4)
    with matplotlib.rc_context(_style.RC):
        for row, (_, weights, free) in enumerate(_buckets(budget)):
            y = len(PRECISIONS) - 1 - row
            ax.barh(y, weights / GB, color=_style.WEIGHTS, height=0.6, label="weights" if row == 0 else None)
            ax.barh(y, kv / GB, left=weights / GB, color=_style.KV, height=0.6, label="KV cache" if row == 0 else None)
            if free > 0:
                ax.barh(y, free / GB, left=(weights + kv) / GB, color=_style.FREE, height=0.6,
                        label="free" if row == 0 else None)
            ax.annotate(f"{weights / GB:g}", (weights / GB / 2, y), ha="center", va="center", color="white",
                        fontweight="bold", fontsize=9)
            ax.annotate(f"{kv / GB:.2f}", ((weights + kv / 2) / GB, y), ha="center", va="center", color="white",
                        fontweight="bold", fontsize=9)
            ax.annotate(f"{(weights + kv) / GB:.2f} GB used\n{free / GB:.2f} GB free", (gpu / GB, y), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=9,
                        color=_style.WASTE if free < TIGHT else _style.MUTED)
        ax.axvline(gpu / GB, color=_style.MUTED, linestyle="--", linewidth=1)
        ax.set_yticks(range(len(PRECISIONS)), [f"{d.upper()} weights" for d in reversed(PRECISIONS)])
        ax.set_xlim(0, gpu / GB * 1.27)
        ax.set_xlabel("GB (10⁹ bytes)")
        ax.set_title(f"{budget.n_params / 1e9:g}B parameters + {budget.batch} requests × {budget.seq_len:,} tokens "
                     f"of FP16 KV on one {gpu / GB:g} GB GPU")
        fig.legend(loc="outside lower center", ncols=3)
        ax.grid(axis="y", visible=False)
    return fig


def memory_buckets_alt(budget: scenarios_.DecimalBudget = scenarios_.DECIMAL_BUDGET) -> str:
    """The alt text of :func:`memory_buckets`: each precision's weights, the KV cache, and what is left free."""
    (first, weights, free), *rest = _buckets(budget)
    kv, gpu, used = budget.kv / GB, budget.gpu_memory / GB, (weights + budget.kv) / GB
    if not 0 < free < TIGHT or any(f < TIGHT for *_, f in rest):  # the first bar alone ends just short, in red
        raise RuntimeError("memory_buckets_alt describes the first precision's bar alone ending just short of the line")
    others = [f"{dtype.upper()}: {w / GB:g} GB orange plus {'the same ' if row == 0 else ''}{kv:.2f} GB teal, "
              f"{f / GB:.2f} GB free." for row, (dtype, w, f) in enumerate(rest)]
    return (f"{fmt.spelled(len(PRECISIONS)).capitalize()} horizontal stacked bars, one per weight precision, "
            f"against a dashed line at {gpu:g} GB. {first.upper()}: an orange weights segment of {weights / GB:g} GB "
            f"and a teal KV segment of {kv:.2f} GB, ending just short of the line, labelled {used:.2f} GB used, "
            f"{free / GB:.2f} GB free in red. {' '.join(others)}")


def _users_by_length(case: scenarios_.CapacityCase) -> tuple[np.ndarray, dict[str, tuple[int, list[int]]]]:
    """Sequence lengths from 256 to the case's, and per weight precision its weights and the users that fit."""
    seq = np.arange(256, case.seq_len + 1, 32)
    lines = {}
    for dtype in PRECISIONS:
        weights = case.weights(dtype)
        lines[dtype] = weights, [replace(case, seq_len=int(s)).plan(weights).requests for s in seq]
    return seq, lines


def users_that_fit(case: scenarios_.CapacityCase = scenarios_.CAPACITY) -> Figure:
    """Concurrent users whose KV cache fits, against sequence length up to the case's, one line per weight precision."""
    spec, device = case.spec, gpus.get(case.gpu)
    seq, lines = _users_by_length(case)
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        for dtype, (weights, users) in lines.items():
            colour = PRECISION_COLOURS[dtype]
            ax.step(seq, users, where="post", color=colour, linewidth=2,
                    label=f"{dtype.upper()} weights ({weights / GiB:.1f} GiB)")
            at = case.users(dtype)
            ax.plot([case.seq_len], [at], "o", color=colour)
            ax.annotate(f"{at}", (case.seq_len, at), xytext=(6, LABEL_NUDGE[dtype]), textcoords="offset points",
                        va="center", color=colour, fontweight="bold")
        ax.set_yscale("log")
        ticks = [8, 16, 32, 64, 128, 256]
        ax.set_yticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("sequence length S per user (tokens)")
        ax.set_ylabel("users that fit (floor)")
        ax.set_title(f"{spec.display_name} on {device.display_name} ({device.memory / GiB:g} GiB), "
                     f"{case.overhead / GiB:g} GiB "
                     f"overhead, {case.kv_dtype.upper()} KV")
        ax.set_xlim(seq[0], case.seq_len * 1.06)
        ax.legend(loc="upper right")
    return fig


def users_that_fit_alt(case: scenarios_.CapacityCase = scenarios_.CAPACITY) -> str:
    """The alt text of :func:`users_that_fit`: where the lines start and end, and which precision fits most."""
    seq, lines = _users_by_length(case)
    order = sorted(PRECISIONS, key=lambda dtype: lines[dtype][1][-1])  # fewest users at the longest first
    ranked = all(a <= b for low, high in zip(order, order[1:], strict=False)
                 for a, b in zip(lines[low][1], lines[high][1], strict=True))  # the lines never cross
    ends = [case.users(dtype) for dtype in order]
    if len(order) != 3 or not ranked or not 13 <= ends[0] <= 19:  # lowest, middle, highest; it ends in the teens
        raise RuntimeError(f"users_that_fit_alt describes three lines that never cross, the lowest ending in the "
                           f"teens; they end at {ends}")
    start = round(sum(users[0] for _, users in lines.values()) / len(lines), -2)
    places = fmt.listed([f"the {COLOUR_NAMES[dtype]} {dtype.upper()} line {place}"
                         for dtype, place in zip(order, ("is lowest", "in the middle", "highest"), strict=True)])
    return (f"Step chart on a log scale of users that fit, from about {start:.0f} at {seq[0]:,} tokens down to the "
            f"teens at {case.seq_len:,} tokens, for {fmt.spelled(len(order))} weight precisions. "
            f"{places[0].upper()}{places[1:]}; at {case.seq_len:,} tokens they end at marked points labelled "
            f"{fmt.listed(ends)}.")


def _advised(scenarios: tuple[str, ...]) -> tuple[list, list]:
    chosen = [scenarios_.LEVER_SCENARIOS[key] for key in scenarios]
    return chosen, [scenario.advise() for scenario in chosen]


def lever_gains(scenarios: tuple[str, ...] = ("A", "B")) -> Figure:
    """What each lever buys in the two scenarios of choosing the lever: gain over the baseline server."""
    chosen, advices = _advised(scenarios)
    fig, axes = _style.new_figure(7.4, 1.4 + 1.1 * len(chosen), nrows=len(chosen), sharex=True)
    axes = np.atleast_1d(axes)
    with matplotlib.rc_context(_style.RC):
        for ax, scenario, advice in zip(axes, chosen, advices, strict=True):
            goal = scenario.workload.goal
            results = list(reversed(advice.ranking))
            gains = [r.gain(goal) for r in results]
            colours = [_style.KV if r is advice.best else _style.FREE for r in results]
            ax.barh(range(len(results)), gains, color=colours, height=0.65)
            for y, (r, gain) in enumerate(zip(results, gains, strict=True)):
                ax.annotate(f"×{gain:.2f}  ({r.served.fits:,} fit in memory)", (gain, y),
                            xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
            ax.axvline(1, color=_style.MUTED, linewidth=1)
            ax.set_yticks(range(len(results)), [r.lever for r in results])
            ax.set_title(f"{scenario.name} ({models.display_name(scenario.model)} on "
                         f"{gpus.display_name(scenario.gpu)}), goal: {goal}", loc="left",
                         fontsize=10)
            ax.grid(axis="y", visible=False)
        axes[-1].set_xlabel("gain on the goal metric, × the baseline server (roofline bounds)")
        axes[-1].set_xlim(0, max(r.gain(s.workload.goal) for s, a in zip(chosen, advices, strict=True)
                                 for r in a.ranking) * 1.45)
    return fig


def lever_gains_alt(scenarios: tuple[str, ...] = ("A", "B")) -> str:
    """The alt text of :func:`lever_gains`: each scenario's levers, best first, with their gains as drawn."""
    chosen, advices = _advised(scenarios)
    panels = []
    for scenario, advice in zip(chosen, advices, strict=True):
        goal = scenario.workload.goal
        key, story = scenario.name.split(": ", 1)
        best, *rest = advice.ranking
        others = "; ".join(f"{r.lever} {r.gain(goal):.2f}x" for r in rest)
        panels.append(f"Scenario {key}, {story}, {models.display_name(scenario.model)} on one "
                      f"{gpus.display_name(scenario.gpu)}: {best.lever} highlighted at {best.gain(goal):.2f}x, "
                      f"with {best.served.fits:,} requests fitting in memory; {others}.")
    return (f"{fmt.spelled(len(chosen)).capitalize()} panels of horizontal bars, one bar per lever, with a "
            f"vertical line at 1x. " + " ".join(panels))


FIGURES = {
    "memory-buckets": memory_buckets,
    "capacity-users": users_that_fit,
    "lever-gains": lever_gains,
}

ALT_TEXTS = {
    "memory-buckets": memory_buckets_alt,
    "capacity-users": users_that_fit_alt,
    "lever-gains": lever_gains_alt,
}
