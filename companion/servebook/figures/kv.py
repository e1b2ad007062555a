"""Figures of the KV-cache chapter."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .. import memory, models
from ..units import GiB
from . import _style


def kv_growth(model: str = "llama-2-13b", batches: tuple[int, ...] = (1, 4, 8, 16),
              max_seq_len: int = 4096, budget_gib: float = 40.0) -> Figure:
    """KV-cache GiB against sequence length, one line per batch size, with a budget line."""
    spec = models.get(model)
    seq = np.linspace(0, max_seq_len, 65)
    per_token = memory.kv_bytes_per_token(spec)
    fig, ax = _style.new_figure()
    with matplotlib.rc_context(_style.RC):
        for batch, colour in zip(batches, _style.SEQUENCE):
            ax.plot(seq, batch * seq * per_token / GiB, color=colour, label=f"batch {batch}")
        ax.axhline(budget_gib, color=_style.WASTE, linestyle="--", linewidth=1)
        ax.annotate(f"{budget_gib:g} GiB budget", (0, budget_gib), xytext=(4, 4),
                    textcoords="offset points", color=_style.WASTE)
        ax.set_xlabel("sequence length S (tokens)")
        ax.set_ylabel("KV cache (GiB)")
        ax.set_title(f"{spec.name}, FP16: KV cache grows linearly in S and in B")
        ax.set_xlim(0, max_seq_len)
        ax.set_ylim(0, None)
        ax.legend(loc="upper left")
    return fig


FIGURES = {"kv-growth": kv_growth}
