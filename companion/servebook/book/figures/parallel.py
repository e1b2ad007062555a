"""Figures of the parallelism chapter: memory per GPU as the model is split, and the link's share of a step."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import gpus, models, parallel, roofline
from ...units import GiB
from .. import scenarios as scenarios_
from . import _style

MEMORY_SIZES = (1, 2, 4, 8, 16)
LINK_SIZES = (2, 4, 8)
LINK_BATCHES = (16, 256)


def memory_per_gpu(gpu_names: tuple[str, ...] = ("h100-sxm", "h200"), sizes: tuple[int, ...] = MEMORY_SIZES,
                   job: scenarios_.SplitJob = scenarios_.SPLIT_JOBS["h200"]) -> Figure:
    """One GPU's memory under TP = t, stacked: vLLM's reserve (grey), the weights (orange), the KV pool (teal)."""
    spec, seq_len = models.get(job.model), job.workload.max_len
    fig, axes = _style.new_figure(7.4, 3.6, ncols=len(gpu_names), sharey=True)
    axes = np.atleast_1d(axes)
    with matplotlib.rc_context(_style.RC):
        for ax, name in zip(axes, gpu_names, strict=True):
            device = gpus.get(name)
            for x, t in enumerate(sizes):
                s = parallel.plan(spec, name, parallel.Layout(t), seq_len).fullest
                pool = max(s.kv_pool, 0)
                parts = [(s.reserve, _style.OVERHEAD, "vLLM's reserve"), (s.weights, _style.WEIGHTS, "weights"),
                         (pool, _style.KV, "KV pool")]
                bottom = 0
                for size, colour, label in parts:
                    ax.bar(x, size / GiB, bottom=bottom / GiB, color=colour, width=0.7,
                           label=label if x == 0 and ax is axes[0] else None)
                    bottom += size
                text = f"{s.requests}" if s.kv_pool > 0 else "does not\nfit"
                ax.annotate(text, (x, max(bottom, device.memory) / GiB), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8, color=_style.MUTED if s.kv_pool > 0 else _style.WASTE)
            ax.axhline(device.memory / GiB, color=_style.MUTED, linestyle="--", linewidth=1)
            ax.set_xticks(range(len(sizes)), [str(t) for t in sizes])
            ax.set_xlabel("tensor-parallel size t (16: two nodes)")
            ax.set_title(f"{device.display_name} ({device.memory / GiB:.1f} GiB)", fontsize=10)
            ax.grid(axis="x", visible=False)
        axes[0].set_ylabel("GiB on one GPU")
        axes[0].set_ylim(0, max(gpus.get(n).memory for n in gpu_names) / GiB * 1.25)
        fig.suptitle(f"{spec.display_name} in BF16, one GPU of a TP-t replica; requests of {seq_len:,} tokens "
                     "that fit above each bar", fontsize=10)
        fig.legend(loc="outside lower center", ncols=3)
    return fig


def communication_share(gpu_name: str = "h100-sxm", model: str = "llama-3-70b", context_len: int = 6000,
                        sizes: tuple[int, ...] = LINK_SIZES, batches: tuple[int, ...] = LINK_BATCHES) -> Figure:
    """The share of a decode step spent on the all-reduces, against t, over NVLink and over PCIe."""
    spec, device = models.get(model), gpus.get(gpu_name)
    fig, ax = _style.new_figure(7.0, 3.6)
    with matplotlib.rc_context(_style.RC):
        for colour, batch in zip(_style.SEQUENCE, batches, strict=False):
            for link, style in ((device.nvlink, "-"), (device.pcie, "--")):
                shares = []
                for t in sizes:
                    shape = parallel.step_shape(spec, parallel.Layout(t), device, link=link)
                    b = roofline.bound(roofline.decode_step(spec, batch, context_len, shape=shape), device)
                    shares.append(100 * b.communication_time / b.time)
                ax.plot(sizes, shares, style, marker="o", color=colour, linewidth=2,
                        label=f"batch {batch}, {link.name}")
                ax.annotate(f"{shares[-1]:.0f}%", (sizes[-1], shares[-1]), xytext=(6, 0), textcoords="offset points",
                            va="center", color=colour, fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(t) for t in sizes])
        ax.set_xlim(sizes[0] / 1.2, sizes[-1] * 1.35)
        ax.set_ylim(0, None)
        ax.set_xlabel("tensor-parallel size t")
        ax.set_ylabel("link's share of the decode step (%)")
        ax.set_title(f"{spec.display_name} decode at {context_len:,} tokens cached, {device.display_name}: "
                     "two all-reduces per layer", fontsize=10)
        ax.legend(loc="upper left", fontsize=9)
    return fig


FIGURES = {
    "parallel-memory-per-gpu": memory_per_gpu,
    "parallel-communication-share": communication_share,
}
