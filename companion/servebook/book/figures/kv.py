"""Figures of the KV-cache chapter: growth in S and B, the batch wall, real models, and GiB vs GB."""

from __future__ import annotations

from itertools import groupby

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ... import memory, models
from ...units import GB, UNITS, GiB, KiB
from .. import fmt, scenarios
from . import _style

# One colour per attention variant; MHA keeps the book's KV teal.
ATTENTION_COLOURS = {"MHA": _style.KV, "GQA": _style.ACCENT, "MQA": _style.SEQUENCE[3]}
COLOUR_NAMES = {"MHA": "teal", "GQA": "blue", "MQA": "purple"}  # what the alt text calls them

REAL_MODELS = ("llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
               "mistral-7b", "llama-3.2-1b", "qwen2.5-0.5b", "falcon-7b")


def kv_growth(case: scenarios.KVBudget = scenarios.KV_BUDGET) -> Figure:
    """KV-cache GiB against sequence length, one line per batch, and where each line meets the budget."""
    per_token, budget_gib, max_seq_len = case.per_token, case.budget_gib, case.seq_len
    seq = np.linspace(0, max_seq_len, 65)
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        for batch, colour in zip(case.growth_batches, _style.SEQUENCE, strict=False):
            ax.plot(seq, batch * seq * per_token / GiB, color=colour, linewidth=2)
            end = batch * max_seq_len * per_token / GiB
            ax.annotate(f"B = {batch}", (max_seq_len, min(end, budget_gib * 1.3)), xytext=(4, 0),
                        textcoords="offset points", va="center", color=colour)
            longest = case.longest(batch)  # tokens per request that fit
            if longest < max_seq_len:
                ax.plot([longest], [batch * longest * per_token / GiB], "o", color=colour)
                ax.annotate(f"B = {batch} fills the budget\nat S = {longest:,}", (longest, budget_gib),
                            xytext=(-8, 10), textcoords="offset points", ha="right", color=colour)
        ax.axhline(budget_gib, color=_style.WASTE, linestyle="--", linewidth=1)
        ax.annotate(f"{budget_gib} GiB for the KV cache", (0, budget_gib), xytext=(4, -12),
                    textcoords="offset points", color=_style.WASTE)
        ax.set_xlabel("sequence length S (tokens per request)")
        ax.set_ylabel("KV cache (GiB)")
        ax.set_title(f"{case.spec.display_name}, FP16: KV bytes grow linearly in S and in B")
        ax.set_xlim(0, max_seq_len)
        ax.set_ylim(0, budget_gib * 1.3)
        ax.set_xticks(np.arange(0, max_seq_len + 1, 1024))
    return fig


def kv_growth_alt(case: scenarios.KVBudget = scenarios.KV_BUDGET) -> str:
    """The alt text of :func:`kv_growth`: its lengths, batches, budget, and the one line that crosses it."""
    crossing = [batch for batch in case.growth_batches if case.longest(batch) < case.seq_len]
    if len(crossing) != 1:  # the text describes exactly one line meeting the budget
        raise RuntimeError(f"kv_growth_alt describes one line crossing the budget; {crossing} do")
    batch = crossing[0]
    end_gib = batch * case.seq_len * case.per_token / GiB
    return (f"Line chart of KV-cache size in GiB against sequence length from 0 to {case.seq_len:,} tokens, "
            f"one straight line from the origin for each batch size {fmt.listed(case.growth_batches)}. "
            f"A dashed horizontal line marks a {case.budget_gib} GiB budget; only the batch-{batch} line "
            f"crosses it, at a marked point near {case.longest(batch):,} tokens, and ends at {end_gib:g} GiB.")


def _batch_totals(case: scenarios.KVBudget, max_requests: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch sizes 1 to ``max_requests`` and their KV cache in GiB."""
    batches = np.arange(1, max_requests + 1)
    return batches, batches * case.per_request / GiB


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def kv_batch_limit(case: scenarios.KVBudget = scenarios.KV_BUDGET, max_requests: int = 14) -> Figure:
    """KV cache of B requests for B = 1, 2, ...: bars that fit the budget in teal, the rest in red."""
    per_request, budget_gib, fits = case.per_request, case.budget_gib, case.fits
    batches, totals = _batch_totals(case, max_requests)
    fig, ax = _style.new_figure(7.0, 3.6)
    with matplotlib.rc_context(_style.RC):
        colours = [_style.KV if b <= fits else _style.WASTE for b in batches]
        ax.bar(batches, totals, color=colours, width=0.75)
        ax.axhline(budget_gib, color=_style.MUTED, linestyle="--", linewidth=1)
        ax.annotate(f"budget {budget_gib} GiB", (0.5, budget_gib), xytext=(0, 4), textcoords="offset points",
                    color=_style.MUTED)
        left = (case.budget - fits * per_request) / GiB
        ax.annotate(f"{fits} requests: {fits * per_request / GiB:g} GiB\n({left:g} GiB left idle)",
                    (fits, fits * per_request / GiB), xytext=(fits - 4, budget_gib * 1.12), ha="right",
                    color=_style.KV, arrowprops={"arrowstyle": "->", "color": _style.KV})
        over = (fits + 1) * per_request / GiB
        ax.annotate(f"{fits + 1} requests:\n{over:g} GiB", (fits + 1, over),
                    xytext=(fits + 1.5, totals.max() + 0.12 * budget_gib), ha="center", color=_style.WASTE,
                    arrowprops={"arrowstyle": "->", "color": _style.WASTE})
        ax.set_xticks(batches)
        ax.set_xlabel(f"batch B (requests of S = {case.seq_len:,} tokens)")
        ax.set_ylabel("KV cache (GiB)")
        ax.set_title(f"{case.spec.display_name}, FP16: {per_request / GiB:g} GiB per request, "
                     f"so {fits} fit in {budget_gib} GiB")
        ax.set_ylim(0, max(totals.max(), budget_gib) * 1.3)
        ax.grid(axis="x", visible=False)
    return fig


def kv_batch_limit_alt(case: scenarios.KVBudget = scenarios.KV_BUDGET, max_requests: int = 14) -> str:
    """The alt text of :func:`kv_batch_limit`: its steps, budget, the last bar that fits and the ones that do not."""
    batches, totals = _batch_totals(case, max_requests)
    fits, last = case.fits, int(batches[-1])
    if not 1 <= fits < last - 1:  # the text describes teal bars followed by two or more red ones
        raise RuntimeError(f"kv_batch_limit_alt describes two or more bars over the budget; {fits} of {last} fit")
    red = f"{fits + 1} and {last}" if last == fits + 2 else f"{fits + 1} to {last}"
    return (f"Bar chart of total KV cache in GiB for batch sizes 1 to {last}, rising in equal steps of "
            f"{totals[0]:g} GiB. A dashed line marks the {case.budget_gib} GiB budget. Bars 1 to {fits} are teal "
            f"and stay under the line, the {_ordinal(fits)} at {totals[fits - 1]:g} GiB; bars {red} are red "
            f"and cross it.")


def _per_token_kib(names: tuple[str, ...], dtype: str) -> tuple[list[models.ModelSpec], list[float]]:
    """The models sorted by KV bytes per token, smallest first (the bottom bar), and those bytes in KiB."""
    specs = sorted((models.get(name) for name in names), key=lambda s: memory.kv_bytes_per_token(s, dtype))
    return specs, [memory.kv_bytes_per_token(s, dtype) / KiB for s in specs]


def kv_per_token(names: tuple[str, ...] = REAL_MODELS, dtype: str = "fp16") -> Figure:
    """KV bytes per token across real models, coloured by attention variant (MHA, GQA, MQA)."""
    specs, per_token = _per_token_kib(names, dtype)
    fig, ax = _style.new_figure(7.0, 0.42 * len(specs) + 1.2)
    with matplotlib.rc_context(_style.RC):
        y = np.arange(len(specs))
        ax.barh(y, per_token, color=[ATTENTION_COLOURS[s.attention] for s in specs], height=0.7)
        for row, (spec, kib) in enumerate(zip(specs, per_token, strict=True)):
            ax.annotate(f"{kib:g} KiB   {spec.attention}: {spec.n_kv_heads} of {spec.n_heads} heads × {spec.head_dim}",
                        (kib, row), xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
        ax.set_yticks(y, [s.display_name for s in specs])
        ax.set_xlabel(f"KV cache per token, all layers, {dtype.upper()} (KiB)")
        ax.set_xlim(0, max(per_token) * 1.75)
        ax.set_title("KV bytes per token follow the KV heads, not the parameter count")
        ax.grid(axis="y", visible=False)
        handles = [Rectangle((0, 0), 1, 1, color=c) for c in ATTENTION_COLOURS.values()]
        ax.legend(handles, list(ATTENTION_COLOURS), loc="lower right", title="attention")
    return fig


def _listed_sizes(bars) -> str:
    """Bars of (spec, KiB) as prose, equal sizes named together: 'A and B 320 KiB, C 32 KiB and D 12 KiB'."""
    same_size = groupby(bars, key=lambda bar: bar[1])
    return fmt.listed([f"{fmt.listed([spec.display_name for spec, _ in same])} {kib:g} KiB" for kib, same in same_size])


def kv_per_token_alt(names: tuple[str, ...] = REAL_MODELS, dtype: str = "fp16") -> str:
    """The alt text of :func:`kv_per_token`: every bar from the top, its KiB, grouped by attention variant."""
    specs, per_token = _per_token_kib(names, dtype)
    rows = list(zip(specs, per_token, strict=True))[::-1]  # from the top bar down
    variants = [(variant, list(bars)) for variant, bars in groupby(rows, key=lambda row: row[0].attention)]
    if len({variant for variant, _ in variants}) < len(variants):  # the text names each variant's colour once
        raise RuntimeError(f"kv_per_token_alt describes each variant's bars together; {variants} are not")
    parts = [f"{_listed_sizes(bars)} in {COLOUR_NAMES[variant]} ({variant})" for variant, bars in variants]
    return (f"Horizontal bar chart of {dtype.upper()} KV-cache bytes per token for {fmt.spelled(len(specs))} "
            f"models, sorted: {'; '.join(parts)}. Each bar is labelled with its KV heads out of query heads "
            f"and its head width.")


PREFIXES = [("K", "KiB", "KB"), ("M", "MiB", "MB"), ("G", "GiB", "GB"), ("T", "TiB", "TB")]


def _unit_gaps(case: scenarios.KVBudget) -> tuple[list[tuple[str, str, str]], list[float], dict[str, tuple[int, int]]]:
    """Each prefix, the percentage its binary unit exceeds the decimal one, and the budget read both ways
    (label -> bytes, requests that fit)."""
    gaps = [100 * (UNITS[binary] / UNITS[decimal] - 1) for _, binary, decimal in PREFIXES]
    budget = case.budget_gib
    sizes = {f"{budget} GiB": budget * GiB, f"{budget} GB": budget * GB}
    return PREFIXES, gaps, {label: (size, memory.max_batch(size, case.per_request)) for label, size in sizes.items()}


def kv_gib_vs_gb(case: scenarios.KVBudget = scenarios.KV_BUDGET) -> Figure:
    """The binary-decimal gap per prefix, and what it does to one budget read both ways."""
    prefixes, gaps, budgets = _unit_gaps(case)
    per_request, budget = case.per_request, case.budget_gib
    fig, (left, right) = _style.new_figure(7.6, 3.6, ncols=2, width_ratios=[1, 1.15])
    with matplotlib.rc_context(_style.RC):
        left.bar(range(len(prefixes)), gaps, color=_style.ACCENT, width=0.6)
        for x, gap in enumerate(gaps):
            left.annotate(f"{gap:.1f} %", (x, gap), xytext=(0, 3), textcoords="offset points", ha="center")
        left.set_xticks(range(len(prefixes)), [f"{b}\nvs {d}" for _, b, d in prefixes])
        left.set_ylabel("binary unit is larger by (%)")
        left.set_title("The gap grows with each prefix")
        left.grid(axis="x", visible=False)

        for x, (size, fits) in enumerate(budgets.values()):
            for k in range(fits):
                right.add_patch(Rectangle((x - 0.3, k * per_request / GiB), 0.6, per_request / GiB,
                                          facecolor=_style.KV, edgecolor="white", linewidth=1))
            right.add_patch(Rectangle((x - 0.3, fits * per_request / GiB), 0.6, (size - fits * per_request) / GiB,
                                      facecolor=_style.FREE, edgecolor="white", linewidth=1))
            right.annotate(f"{fits} requests", (x, size / GiB), xytext=(0, 4), textcoords="offset points",
                           ha="center", color=_style.KV, fontweight="bold")
        right.set_xticks(range(len(budgets)), [f"budget\n{label}" for label in budgets])
        right.set_xlim(-0.6, len(budgets) - 0.4)
        right.set_ylim(0, budget * 1.12)
        right.set_ylabel("GiB (1024³ bytes)")
        right.set_title(f"Requests of {per_request / GiB:g} GiB in a budget of {budget}")
        right.grid(axis="x", visible=False)
    return fig


def kv_gib_vs_gb_alt(case: scenarios.KVBudget = scenarios.KV_BUDGET) -> str:
    """The alt text of :func:`kv_gib_vs_gb`: the gap per prefix, and the requests each reading of the budget holds."""
    prefixes, gaps, budgets = _unit_gaps(case)
    (binary_label, (_, fits_binary)), (decimal_label, (decimal, fits_decimal)) = budgets.items()
    return (f"Two panels. Left: bars of the percentage by which each binary unit exceeds its decimal namesake, "
            f"{fmt.listed([f'{gap:.1f}' for gap in gaps])} percent for "
            f"{fmt.listed([unit for _, unit, _ in prefixes])}. Right: two stacked columns in GiB, a {binary_label} "
            f"budget holding {fmt.spelled(fits_binary)} teal blocks of {case.per_request / GiB:g} GiB with a grey "
            f"remainder, and a {decimal_label} budget, about {decimal / GiB:.1f} GiB tall, holding "
            f"{fmt.spelled(fits_decimal)}.")


FIGURES = {
    "kv-growth": kv_growth,
    "kv-batch-limit": kv_batch_limit,
    "kv-per-token": kv_per_token,
    "kv-gib-vs-gb": kv_gib_vs_gb,
}

ALT_TEXTS = {
    "kv-growth": kv_growth_alt,
    "kv-batch-limit": kv_batch_limit_alt,
    "kv-per-token": kv_per_token_alt,
    "kv-gib-vs-gb": kv_gib_vs_gb_alt,
}
