"""Figures of the modern-caches chapter: the cache by layer kind, its growth in S, total vs active
parameters, and one GPU's users at 8k and 128k tokens."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import gpus, memory, models
from ...models import CHUNKED, GLOBAL, SLIDING
from ...units import GiB, KiB
from .. import scenarios
from . import _style

# A global layer's cache is the book's KV teal; the local kinds get colours of their own.
KIND_COLOURS = {GLOBAL: _style.KV, SLIDING: _style.ACCENT, CHUNKED: _style.SEQUENCE[3]}
KIND_LABELS = {GLOBAL: "global layers", SLIDING: "sliding-window layers", CHUNKED: "chunked layers"}
ACTIVE = "#f4c48f"  # a lighter weights orange: the part of the weights one token uses

GROWTH_MODELS = ("llama-3.1-8b", "llama-4-scout", "gemma-3-27b", "deepseek-v3", "mistral-7b")
PARAM_MODELS = ("deepseek-v3", "llama-4-scout", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite",
                "llama-3.1-70b", "qwen3-8b")


def _short_context(spec: models.ModelSpec, seq_len: int) -> bool:
    return spec.max_seq_len is not None and spec.max_seq_len < seq_len


def kv_by_layer_kind(seq_len: int = scenarios.COMPARE_CONTEXT, dtype: str = "fp16") -> Figure:
    """KV bytes per token of one request of ``seq_len`` tokens, every registry model, stacked by layer kind."""
    specs = sorted((models.get(n) for n in models.names()),
                   key=lambda s: memory.kv_cache_bytes(s, seq_len, dtype=dtype))
    shares = [scenarios.kv_per_token_by_kind(s, seq_len, dtype) for s in specs]
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


def kv_vs_context(names: tuple[str, ...] = GROWTH_MODELS, longest: int = 131072, dtype: str = "fp16") -> Figure:
    """One request's KV cache against its length: global layers grow, local ones stop at their window."""
    fig, ax = _style.new_figure(7.0, 3.8)
    with matplotlib.rc_context(_style.RC):
        for name, colour in zip(names, _style.SEQUENCE, strict=False):
            spec = models.get(name)
            end = min(longest, spec.max_seq_len or longest)  # drawn up to the model's context window
            kinks = [spec.local_span] if spec.local_span and spec.local_span < end else []  # where a line bends
            seq = np.union1d(np.linspace(1, end, 257).astype(int), kinks)
            gib = [memory.kv_cache_bytes(spec, int(s), dtype=dtype) / GiB for s in seq]
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


def total_vs_active(names: tuple[str, ...] = PARAM_MODELS) -> Figure:
    """Total parameters (what memory holds) against active ones (what a token uses), MoE and dense models."""
    specs = [models.get(n) for n in names]
    total = np.array([s.n_params for s in specs]) / 1e9
    active = np.array([s.count_active_params() for s in specs]) / 1e9
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


def capacity_by_context(case: scenarios.ContextCapacity = scenarios.CONTEXT_CAPACITY) -> Figure:
    """Users that fit one GPU at each context of ``case``, one panel per context, models in the same order."""
    order = sorted(case.models, key=lambda m: case.users(m, max(case.contexts)))
    fig, axes = _style.new_figure(7.4, 0.5 * len(order) + 1.5, ncols=len(case.contexts), sharey=True)
    with matplotlib.rc_context(_style.RC):
        for ax, seq_len in zip(axes, case.contexts, strict=True):
            users = [case.users(m, seq_len) for m in order]
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


FIGURES = {
    "modern-kv-by-layer-kind": kv_by_layer_kind,
    "modern-kv-vs-context": kv_vs_context,
    "modern-total-vs-active": total_vs_active,
    "modern-capacity-8k-128k": capacity_by_context,
}
