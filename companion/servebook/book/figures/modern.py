"""Figures of the modern-caches chapter: the cache by layer kind, its growth in S, total vs active
parameters, and one GPU's users at 8k and 128k tokens."""

from __future__ import annotations

from fractions import Fraction
from itertools import groupby

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import gpus, memory, models
from ...models import CHUNKED, GLOBAL, SLIDING
from ...units import GiB, KiB
from .. import fmt, scenarios
from . import _style

# A global layer's cache is the book's KV teal; the local kinds get colours of their own.
KIND_COLOURS = {GLOBAL: _style.KV, SLIDING: _style.ACCENT, CHUNKED: _style.SEQUENCE[3]}
COLOUR_NAMES = {GLOBAL: "teal", SLIDING: "blue", CHUNKED: "purple"}  # what the alt texts call them
KIND_LABELS = {GLOBAL: "global layers", SLIDING: "sliding-window layers", CHUNKED: "chunked layers"}
ACTIVE = "#f4c48f"  # a lighter weights orange: the part of the weights one token uses

GROWTH_MODELS = ("llama-3.1-8b", "llama-4-scout", "gemma-3-27b", "deepseek-v3", "mistral-7b")
PARAM_MODELS = ("deepseek-v3", "llama-4-scout", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite",
                "llama-3.1-70b", "qwen3-8b")


def _short_context(spec: models.ModelSpec, seq_len: int) -> bool:
    return spec.max_seq_len is not None and spec.max_seq_len < seq_len


def _by_kind(seq_len: int, dtype: str) -> tuple[list[models.ModelSpec], list[dict[str, Fraction]]]:
    """Every registry model, smallest cache first (the bottom bar), and its bytes per token in each layer kind."""
    specs = sorted((models.get(n) for n in models.names()),
                   key=lambda s: memory.kv_cache_bytes(s, seq_len, dtype=dtype))
    return specs, [scenarios.kv_per_token_by_kind(s, seq_len, dtype) for s in specs]


def kv_by_layer_kind(seq_len: int = scenarios.COMPARE_CONTEXT, dtype: str = "fp16") -> Figure:
    """KV bytes per token of one request of ``seq_len`` tokens, every registry model, stacked by layer kind."""
    specs, shares = _by_kind(seq_len, dtype)
    fig, ax = _style.new_figure(7.2, 0.27 * len(specs) + 1.6)
    with matplotlib.rc_context(_style.RC):
        y = np.arange(len(specs))
        left = np.zeros(len(specs))
        for kind, colour in KIND_COLOURS.items():
            width = np.array([float(share.get(kind, 0)) / KiB for share in shares])
            ax.barh(y, width, left=left, color=colour, height=0.72, label=KIND_LABELS[kind])
            left += width
        for row, (spec, total) in enumerate(zip(specs, left, strict=True)):
            ax.annotate(f"{total:,.1f} KiB  {spec.attention}", (total, row), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=8)
        ax.set_yticks(y, [s.display_name + (" †" if _short_context(s, seq_len) else "") for s in specs],
                      fontsize=8)
        ax.set_xlabel(f"KV cache per token of a {seq_len:,}-token request, {dtype.upper()} (KiB)")
        ax.set_xlim(0, left.max() * 1.32)
        ax.set_title(f"One request of {seq_len:,} tokens: the cache per token, by layer kind")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", fontsize=8, title=f"† context window under {seq_len:,}",
                  title_fontsize=8)
    return fig


def _context_curve(spec: models.ModelSpec, longest: int, dtype: str) -> tuple[int, np.ndarray, list[float]]:
    """Where one request's line ends (its context window, at most ``longest``), its lengths, and its GiB."""
    end = min(longest, spec.max_seq_len or longest)  # drawn up to the model's context window
    kinks = [spec.local_span] if spec.local_span and spec.local_span < end else []  # where a line bends
    seq = np.union1d(np.linspace(1, end, 257).astype(int), kinks)
    return end, seq, [memory.kv_cache_bytes(spec, int(s), dtype=dtype) / GiB for s in seq]


def _about(gib: float) -> str:
    """``gib`` to two significant digits, with 'about ' where the rounding changed it."""
    said = fmt.significant(gib)
    return said if float(said) == gib else f"about {said}"


def _kind_split(share: dict[str, Fraction]) -> tuple[str, str]:
    """The words for one bar's colours ('all blue', 'two-thirds teal and one third blue', 'mostly purple'),
    and its local kind (GLOBAL where it has none)."""
    total = sum(share.values())
    parts = sorted(((share.get(kind, 0) / total, kind) for kind in KIND_COLOURS), reverse=True)
    (_, kind), (minor, other), (third, _) = parts
    if third:
        raise RuntimeError(f"kv_by_layer_kind_alt describes bars of at most two layer kinds, not {share}")
    local = other if kind == GLOBAL else kind
    if minor == 0:
        return f"all {COLOUR_NAMES[kind]}", local
    if minor.denominator == 3:  # an exact third: half the layers local, holding half the request's tokens
        return f"two-thirds {COLOUR_NAMES[kind]} and one third {COLOUR_NAMES[other]}", local
    part = f" with a {COLOUR_NAMES[other]} part" if minor > Fraction(1, 3) else ""  # under a third: 'mostly'
    return f"mostly {COLOUR_NAMES[kind]}{part}", local


def kv_by_layer_kind_alt(seq_len: int = scenarios.COMPARE_CONTEXT, dtype: str = "fp16") -> str:
    """The alt text of :func:`kv_by_layer_kind`: its range, and the bars that are not all global layers."""
    specs, shares = _by_kind(seq_len, dtype)
    kib = [float(sum(share.values())) / KiB for share in shares]
    ends = [[spec.display_name for spec, k in zip(specs, kib, strict=True) if k == end] for end in (kib[0], kib[-1])]
    groups: dict[tuple[str, str], list[str]] = {}  # bars with local layers, by their words, in the order met
    global_share: dict[tuple[str, str], Fraction] = {}
    for spec, share in zip(specs, shares, strict=True):
        if set(share) != {GLOBAL}:
            split = _kind_split(share)
            groups.setdefault(split, []).append(spec.display_name)
            global_share[split] = share.get(GLOBAL, 0) / sum(share.values())
    mla = [spec.display_name for spec in specs if spec.attention == "MLA"]
    short = all(k < sorted(kib)[len(kib) // 2] for spec, k in zip(specs, kib, strict=True) if spec.attention == "MLA")
    if 2 * (len(specs) - sum(map(len, groups.values())) - len(mla)) <= len(specs) or len(mla) < 2 or not short:
        raise RuntimeError("kv_by_layer_kind_alt describes most bars as all global, and two or more short MLA bars")
    local_kinds = [kind for kind in KIND_COLOURS if kind != GLOBAL]
    # sliding before chunked, and within a kind from the most global layers to the fewest
    order = sorted(groups, key=lambda split: (local_kinds.index(split[1]), -global_share[split]))
    said, sentences = set(), []
    for words, kind in order:
        label = "" if kind in said else f" ({kind} layers)"
        said.add(kind)
        names = groups[(words, kind)]
        sentences.append(f"{fmt.listed(names)} {'are' if len(names) > 1 else 'is'} {words}{label}")
    return (f"Horizontal stacked bars of KV cache per token in KiB for {len(specs)} models at {seq_len:,} tokens, "
            f"sorted from {fmt.listed(ends[0])} at {kib[0]:g} KiB to {fmt.listed(ends[1])} at {kib[-1]:g} KiB. "
            f"Most bars are all {COLOUR_NAMES[GLOBAL]} ({GLOBAL} layers). {'; '.join(sentences)}. "
            f"{fmt.listed(mla)}, marked MLA, are short {COLOUR_NAMES[GLOBAL]} bars.")


def kv_vs_context(names: tuple[str, ...] = GROWTH_MODELS, longest: int = 131072, dtype: str = "fp16") -> Figure:
    """One request's KV cache against its length: global layers grow, local ones stop at their window."""
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        for name, colour in zip(names, _style.SEQUENCE, strict=False):
            spec = models.get(name)
            end, seq, gib = _context_curve(spec, longest, dtype)
            label = spec.display_name + ("" if spec.local_kind is None else
                                         f": {spec.layers_of(spec.local_kind)} of {spec.n_layers} layers "
                                         f"{spec.local_kind}, {spec.local_span:,} tokens")
            ax.plot(seq, gib, color=colour, linewidth=2, label=label)
            if end < longest:
                ax.plot([end], [gib[-1]], "o", color=colour)
        ax.legend(loc="upper left", fontsize=8)
        ax.set_xlabel("tokens in the request S")
        ax.set_ylabel(f"KV cache of one request, {dtype.upper()} (GiB)")
        ax.set_xlim(0, longest)
        ax.set_ylim(0, None)
        ticks = np.arange(0, longest + 1, 16384)
        ax.set_xticks(ticks, [f"{t // 1024}k" for t in ticks])
        ax.set_title("Global layers grow with every token; a window caps only its own layers")
    return fig


def _context_clause(spec: models.ModelSpec, end: int, gib: list[float], longest: int) -> str:
    """What one line of :func:`kv_vs_context` does, for a line that does not bend: straight or flat."""
    dot = f" and ends with a dot at its {end // 1024}k context" if end < longest else ""
    if spec.local_kind is None:
        return f"{spec.display_name} rises straight to {_about(gib[-1])} GiB{dot}"
    if spec.layers_of(spec.local_kind) == spec.n_layers and spec.local_span < end:
        return f"{spec.display_name} is flat at {_about(gib[-1])} GiB from {spec.local_span:,} tokens{dot}"
    raise RuntimeError(f"kv_vs_context_alt describes a line as straight, flat or bending; {spec.display_name} is none")


def kv_vs_context_alt(names: tuple[str, ...] = GROWTH_MODELS, longest: int = 131072, dtype: str = "fp16") -> str:
    """The alt text of :func:`kv_vs_context`: where each line ends, and where the lines with local layers bend."""
    sentences = []
    specs = [models.get(name) for name in names]
    for bends, run in groupby(specs, key=lambda spec: _bends(spec, longest)):  # runs of lines that bend or not
        lines = [(spec, *_context_curve(spec, longest, dtype)) for spec in run]
        if not bends:
            sentences += [_context_clause(spec, end, gib, longest) for spec, end, _, gib in lines]
            continue
        lines.sort(key=lambda line: line[0].local_span)
        if len(lines) < 2 or any(end < longest for _, end, _, _ in lines):  # the sentence is plural, with no dot
            raise RuntimeError(f"kv_vs_context_alt describes bending lines in pairs or more; {lines} are not")
        sentences.append(f"{fmt.listed([spec.display_name for spec, *_ in lines])} rise steeply at first, bend "
                         f"where their local layers fill ({fmt.listed([f'{spec.local_span:,}' for spec, *_ in lines])}"
                         f" tokens), then rise more slowly to about {fmt.listed([round(gib[-1]) for *_, gib in lines])}"
                         f" GiB")
    return (f"Line chart of one request's {dtype.upper()} KV cache in GiB against its length from 0 to "
            f"{longest // 1024}k tokens, {fmt.spelled(len(names))} lines. {'. '.join(sentences)}.")


def _bends(spec: models.ModelSpec, longest: int) -> bool:
    """Whether the line of ``spec`` bends: local layers that fill before its end, next to global ones."""
    end = min(longest, spec.max_seq_len or longest)
    return spec.local_kind is not None and spec.local_span < end and spec.layers_of(spec.local_kind) < spec.n_layers


def _parameters(names: tuple[str, ...]) -> tuple[list[models.ModelSpec], np.ndarray, np.ndarray]:
    """The models, and their total and active parameters in billions."""
    specs = [models.get(n) for n in names]
    total = np.array([s.n_params for s in specs]) / 1e9
    return specs, total, np.array([s.count_active_params() for s in specs]) / 1e9


def total_vs_active(names: tuple[str, ...] = PARAM_MODELS) -> Figure:
    """Total parameters (what memory holds) against active ones (what a token uses), MoE and dense models."""
    specs, total, active = _parameters(names)
    fig, ax = _style.new_figure(7.2, 0.55 * len(specs) + 1.4)
    with matplotlib.rc_context(_style.RC):
        y = np.arange(len(specs))[::-1]
        ax.barh(y + 0.18, total, height=0.36, color=_style.WEIGHTS, label="total: held in memory")
        ax.barh(y - 0.18, active, height=0.36, color=ACTIVE, label="active: used by one token")
        for row, spec, t, a in zip(y, specs, total, active, strict=True):
            note = "dense: all active" if spec.moe is None else f"{a / t:.0%} active"
            ax.annotate(f"{t:,.1f} B", (t, row + 0.18), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8)
            ax.annotate(f"{a:,.1f} B, {note}", (a, row - 0.18), xytext=(4, 0), textcoords="offset points",
                        va="center", fontsize=8, color=_style.MUTED)
        ax.set_xscale("log")
        ax.set_xlim(1, total.max() * 12)
        ax.set_yticks(y, [s.display_name for s in specs])
        ax.set_xlabel("parameters (billions, log scale)")
        ax.set_title("A mixture of experts holds every expert, and a token uses a few")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", fontsize=8)
    return fig


def total_vs_active_alt(names: tuple[str, ...] = PARAM_MODELS) -> str:
    """The alt text of :func:`total_vs_active`: each pair of bars from the top, the dense models last."""
    specs, total, active = _parameters(names)
    bars = list(zip(specs, total, active, strict=True))
    experts = [(spec.display_name, t, a) for spec, t, a in bars if spec.moe is not None]
    dense = [(spec.display_name, t) for spec, t, _ in bars if spec.moe is None]
    if not experts or len(dense) < 2 or any(spec.moe is not None for spec in specs[len(experts):]):
        raise RuntimeError("total_vs_active_alt describes mixtures of experts first, then two or more dense models")
    experts = [f"{name} {t:,.1f}{' total' if row == 0 else ''} and {a:,.1f}{' active' if row == 0 else ''}"
               for row, (name, t, a) in enumerate(experts)]  # the first pair says which bar is which
    return (f"Paired horizontal bars on a log scale of parameters in billions, dark orange for total and light "
            f"orange for active. {'; '.join(experts)}; the dense {fmt.listed([name for name, _ in dense])} have "
            f"equal bars, {fmt.listed([f'{t:,.1f}' for _, t in dense])}.")


def _users(case: scenarios.ContextCapacity) -> tuple[list[str], dict[int, list[int]]]:
    """The models from the bottom bar up (fewest users at the longest context first), and their users per context."""
    order = sorted(case.models, key=lambda m: case.users(m, max(case.contexts)))
    return order, {seq_len: [case.users(m, seq_len) for m in order] for seq_len in case.contexts}


def capacity_by_context(case: scenarios.ContextCapacity = scenarios.CONTEXT_CAPACITY) -> Figure:
    """Users that fit one GPU at each context of ``case``, one panel per context, models in the same order."""
    order, users_at = _users(case)
    fig, axes = _style.new_figure(7.4, 0.5 * len(order) + 1.5, ncols=len(case.contexts), sharey=True)
    with matplotlib.rc_context(_style.RC):
        for ax, seq_len in zip(axes, case.contexts, strict=True):
            users = users_at[seq_len]
            ax.barh(range(len(order)), users, color=_style.KV, height=0.65)
            for row, n in enumerate(users):
                ax.annotate(f"{n:,}", (n, row), xytext=(4, 0), textcoords="offset points", va="center")
            ax.set_xlim(0, max(users) * 1.25)
            ax.set_title(f"requests of {seq_len:,} tokens", fontsize=10)
            ax.set_xlabel("users that fit (floor)")
            ax.grid(axis="y", visible=False)
        axes[0].set_yticks(range(len(order)), [models.display_name(m) for m in order])
        fig.suptitle(f"One {gpus.display_name(case.gpu)}, {case.weights.upper()} weights, "
                     f"{case.overhead / GiB:g} GiB overhead, {case.kv_dtype.upper()} KV", fontsize=11)
    return fig


def capacity_by_context_alt(case: scenarios.ContextCapacity = scenarios.CONTEXT_CAPACITY) -> str:
    """The alt text of :func:`capacity_by_context`: the users of each model from the top bar down, per context."""
    order, users_at = _users(case)
    names = [models.display_name(m) for m in order][::-1]
    first, *rest = [(seq_len, users[::-1]) for seq_len, users in users_at.items()]
    panels = [f"At {first[0]:,} tokens: {', '.join(f'{name} {n:,}' for name, n in zip(names, first[1], strict=True))}."]
    panels += [f"At {seq_len:,} tokens: {fmt.listed([f'{n:,}' for n in users])}." for seq_len, users in rest]
    return (f"{fmt.spelled(len(case.contexts)).capitalize()} panels of horizontal bars, users that fit one "
            f"{gpus.display_name(case.gpu)}. {' '.join(panels)}")


FIGURES = {
    "modern-kv-by-layer-kind": kv_by_layer_kind,
    "modern-kv-vs-context": kv_vs_context,
    "modern-total-vs-active": total_vs_active,
    "modern-capacity-8k-128k": capacity_by_context,
}

ALT_TEXTS = {
    "modern-kv-by-layer-kind": kv_by_layer_kind_alt,
    "modern-kv-vs-context": kv_vs_context_alt,
    "modern-total-vs-active": total_vs_active_alt,
    "modern-capacity-8k-128k": capacity_by_context_alt,
}
