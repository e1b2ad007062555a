"""Figures of the parallelism chapter: memory per GPU as the model is split, and the link's share of a step."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import gpus, models, parallel, roofline
from ...units import GiB
from .. import fmt
from .. import scenarios as scenarios_
from . import _style

MEMORY_SIZES = (1, 2, 4, 8, 16)
LINK_SIZES = (2, 4, 8)
LINK_BATCHES = (16, 256)


def _splits(gpu_names: tuple[str, ...], sizes: tuple[int, ...], job: scenarios_.SplitJob) -> dict[str, list]:
    """GPU name -> the fullest GPU's share of a TP-t replica of ``job``'s model, for each t in ``sizes``."""
    spec, seq_len = models.get(job.model), job.workload.max_len
    return {name: [parallel.plan(spec, name, parallel.Layout(t), seq_len).fullest for t in sizes]
            for name in gpu_names}


def _family(name: str) -> str:
    """A GPU's or link's name without its variant, as prose shortens it: 'H100 SXM' -> 'H100'."""
    return name.split()[0]


def memory_per_gpu(gpu_names: tuple[str, ...] = ("h100-sxm", "h200"), sizes: tuple[int, ...] = MEMORY_SIZES,
                   job: scenarios_.SplitJob = scenarios_.SPLIT_JOBS["h200"]) -> Figure:
    """One GPU's memory under TP = t, stacked: vLLM's reserve (grey), the weights (orange), the KV pool (teal)."""
    spec, seq_len = models.get(job.model), job.workload.max_len
    splits = _splits(gpu_names, sizes, job)
    fig, axes = _style.new_figure(7.4, 3.6, ncols=len(gpu_names), sharey=True)
    axes = np.atleast_1d(axes)
    with matplotlib.rc_context(_style.RC):
        for ax, name in zip(axes, gpu_names, strict=True):
            device = gpus.get(name)
            for x, s in enumerate(splits[name]):
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


def memory_per_gpu_alt(gpu_names: tuple[str, ...] = ("h100-sxm", "h200"), sizes: tuple[int, ...] = MEMORY_SIZES,
                       job: scenarios_.SplitJob = scenarios_.SPLIT_JOBS["h200"]) -> str:
    """The alt text of :func:`memory_per_gpu`: the reserve and weights per GPU, where it does not fit, the requests."""
    splits = _splits(gpu_names, sizes, job)
    devices = [gpus.get(name) for name in gpu_names]
    reserves = [{round(s.reserve / GiB) for s in splits[name]} for name in gpu_names]
    weights = {tuple(round(s.weights / GiB) for s in shares) for shares in splits.values()}
    requests = [[s.requests for s in shares[1:]] for shares in splits.values()]
    panels = list(zip(splits.values(), devices, strict=True))
    over_first = all(shares[0].reserve + shares[0].weights > d.memory and shares[0].kv_pool <= 0
                     and all(s.kv_pool > 0 for s in shares[1:]) for shares, d in panels)
    if len(devices) != 2 or any(len(r) != 1 for r in reserves) or len(weights) != 1 or not over_first:
        raise RuntimeError("memory_per_gpu_alt describes two GPUs, each with one reserve, the same weights on "
                           "both, and only the first size over the line")
    if any(r != sorted(set(r)) or r[-1] > 1.25 * r[-2] for r in requests):  # 'only a little': under a quarter
        raise RuntimeError(f"memory_per_gpu_alt describes requests that grow, a little at the last size: {requests}")
    ((first, *rest),) = weights
    reserve = " and ".join(f"{r.pop()} GiB on the {_family(d.display_name)}"
                           for r, d in zip(reserves, devices, strict=True))
    return (f"{fmt.spelled(len(devices)).capitalize()} panels of stacked bars, "
            f"{fmt.listed([d.display_name for d in devices])}, one bar per tensor-parallel size {fmt.listed(sizes)}. "
            f"Each bar stacks a grey reserve of about {reserve}, orange weights of about {first} GiB at "
            f"t = {sizes[0]} falling to {fmt.listed(rest)}, and a teal KV pool filling the rest up to the dashed line "
            f"of the GPU's memory. At t = {sizes[0]} the orange bar rises above the dashed line on both GPUs, "
            f"labelled does not fit; above the other bars the number of requests that fit grows, but from "
            f"t = {sizes[-2]} to t = {sizes[-1]} only a little.")


def _link_shares(spec: models.ModelSpec, device, context_len: int, sizes: tuple[int, ...],
                 batches: tuple[int, ...]) -> list[tuple[int, object, str, list[float]]]:
    """Per batch and link (NVLink solid, PCIe dashed): the all-reduces' share of a decode step at each t, in %."""
    lines = []
    for batch in batches:
        for link, style in ((device.nvlink, "-"), (device.pcie, "--")):
            shares = []
            for t in sizes:
                shape = parallel.step_shape(spec, parallel.Layout(t), device, link=link)
                b = roofline.bound(roofline.decode_step(spec, batch, context_len, shape=shape), device)
                shares.append(100 * b.communication_time / b.time)
            lines.append((batch, link, style, shares))
    return lines


def communication_share(gpu_name: str = "h100-sxm", model: str = "llama-3-70b", context_len: int = 6000,
                        sizes: tuple[int, ...] = LINK_SIZES, batches: tuple[int, ...] = LINK_BATCHES) -> Figure:
    """The share of a decode step spent on the all-reduces, against t, over NVLink and over PCIe."""
    spec, device = models.get(model), gpus.get(gpu_name)
    fig, ax = _style.new_figure(7.0, 3.6)
    with matplotlib.rc_context(_style.RC):
        colours = dict(zip(batches, _style.SEQUENCE, strict=False))
        for batch, link, style, shares in _link_shares(spec, device, context_len, sizes, batches):
            if batch not in colours:  # one colour per batch, as many batches as there are colours
                continue
            colour = colours[batch]
            ax.plot(sizes, shares, style, marker="o", color=colour, linewidth=2, label=f"batch {batch}, {link.name}")
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


def communication_share_alt(gpu_name: str = "h100-sxm", model: str = "llama-3-70b", context_len: int = 6000,
                            sizes: tuple[int, ...] = LINK_SIZES, batches: tuple[int, ...] = LINK_BATCHES) -> str:
    """The alt text of :func:`communication_share`: its axes and lines, and where the lines end, per link."""
    spec, device = models.get(model), gpus.get(gpu_name)
    lines = _link_shares(spec, device, context_len, sizes, batches)
    if any(shares != sorted(shares) for *_, shares in lines):
        raise RuntimeError("communication_share_alt describes lines that all rise with t")
    ends = {family: fmt.listed([f"{shares[-1]:.0f}" for _, link, _, shares in lines if _family(link.name) == family])
            for family in (_family(device.nvlink.name), _family(device.pcie.name))}
    (nvlink, nvlink_ends), (pcie, pcie_ends) = ends.items()
    return (f"Line chart of the link's share of a decode step in percent against tensor-parallel size "
            f"{fmt.listed(sizes)}, for {spec.display_name} on {device.display_name} GPUs at {context_len:,} cached "
            f"tokens. {fmt.spelled(len(lines)).capitalize()} lines: {fmt.listed([f'batch {b}' for b in batches])}, "
            f"each over {nvlink} (solid) and over {pcie} (dashed). All rise with t. At t = {sizes[-1]} the {nvlink} "
            f"lines end near {nvlink_ends} percent, the {pcie} lines near {pcie_ends} percent.")


FIGURES = {
    "parallel-memory-per-gpu": memory_per_gpu,
    "parallel-communication-share": communication_share,
}

ALT_TEXTS = {
    "parallel-memory-per-gpu": memory_per_gpu_alt,
    "parallel-communication-share": communication_share_alt,
}
