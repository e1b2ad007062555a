"""Figures of the continuous-batching chapter: KV memory and batch size over time, from the simulator.

Both figures take ``runs``, a dict ``(policy, allocator) -> SimulationResult``
(what :func:`servebook.batching.simulate` returns); by default they simulate
the chapter's workload: Llama-2-13B in FP16 on a 40 GiB A100 with 4 GiB set
aside, 1,000 requests with log-normal lengths, all queued at time 0.
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ... import batching, gpus
from .. import scenarios
from . import _style


def default_runs(n_requests: int = 1000, seed: int = 0):
    """The chapter's four runs (see :func:`servebook.book.scenarios.batching_runs`)."""
    return scenarios.batching_runs(n_requests, seed)


def _binned(result: batching.SimulationResult, values: np.ndarray, n_bins: int = 300, until: float | None = None):
    """Time-weighted means of a per-iteration series in ``n_bins`` equal time bins (keeps the SVG small)."""
    steps = result.steps
    start = steps["time_s"] - steps["dt"]
    edges = np.linspace(0, steps["time_s"][-1] if until is None else until, n_bins + 1)
    weight, _ = np.histogram(start, bins=edges, weights=steps["dt"])
    total, _ = np.histogram(start, bins=edges, weights=values * steps["dt"])
    centres = (edges[:-1] + edges[1:]) / 2
    keep = weight > 0
    return centres[keep], total[keep] / weight[keep]


def kv_memory_over_time(runs: dict | None = None, policy: str = "continuous") -> Figure:
    """Share of the KV pool holding tokens, reserved but empty, and free, over time: naive vs paged."""
    runs = runs if runs is not None else default_runs()
    fig, axes = _style.new_figure(7.2, 3.4, ncols=2, sharey=True)
    with matplotlib.rc_context(_style.RC):
        for ax, allocator in zip(axes, ("naive", "paged"), strict=True):
            result = runs[policy, allocator]
            total = result.slots_total
            t, stored = _binned(result, result.steps["tokens_stored"] / total)
            _, reserved = _binned(result, result.steps["slots_reserved"] / total)
            ax.stackplot(t, 100 * stored, 100 * (reserved - stored), 100 * (1 - reserved),
                         colors=[_style.KV, _style.WASTE, _style.FREE],
                         labels=["holds tokens", "reserved, empty", "free"])
            share = result.summary().kv_token_share
            # Two short lines: one long line per panel ran into its neighbour's title.
            ax.set_title(f"{allocator} allocator\n{100 * share:.1f} % of reserved memory holds tokens", fontsize=9)
            ax.set_xlabel("time (s, modelled)")
            ax.set_xlim(0, t[-1])
            ax.set_ylim(0, 100)
            ax.grid(False)
        axes[0].set_ylabel("share of the KV pool (%)")
        axes[1].legend(loc="lower left", fontsize=8, frameon=True)
        server = scenarios.BATCHING_SERVER
        fig.suptitle(f"KV memory under {policy} batching, {server.spec.display_name} on "
                     f"{gpus.get(server.gpu).display_name}", fontsize=10.5)
    return fig


def batch_size_over_time(runs: dict | None = None, window_s: float = 120.0) -> Figure:
    """Requests running during the first ``window_s`` seconds, static vs continuous, for each allocator."""
    runs = runs if runs is not None else default_runs()
    fig, axes = _style.new_figure(7.2, 3.4, ncols=2)
    colours = {"static": _style.MUTED, "continuous": _style.ACCENT}
    with matplotlib.rc_context(_style.RC):
        for ax, allocator in zip(axes, ("naive", "paged"), strict=True):
            peak = 1
            for policy in batching.POLICIES:
                result = runs[policy, allocator]
                peak = max(peak, int(result.steps["running"].max()))
                t, running = _binned(result, result.steps["running"].astype(float), n_bins=480, until=window_s)
                mean = result.summary().mean_running
                ax.plot(t, running, color=colours[policy], linewidth=1.1, drawstyle="steps-mid",
                        label=f"{policy} (mean {mean:.1f} over the run)")
            ax.set_title(f"{allocator} allocator", fontsize=10)
            ax.set_xlabel(f"time (s, modelled), first {window_s:g} s")
            ax.set_xlim(0, window_s)
            ax.set_ylim(0, 1.3 * peak)  # headroom for the legend
            ax.legend(fontsize=7.5, loc="upper right")
        axes[0].set_ylabel("requests running")
        fig.suptitle("Continuous batching refills the batch every iteration; a static batch drains to its slowest "
                     "request", fontsize=9.5)
    return fig


def throughput_latency(sweep: dict | None = None) -> Figure:
    """p99 time to first token against throughput, and goodput under the chapter's SLO, as the arrival rate grows.

    ``sweep`` maps ``(server label, arrival rate)`` to a run; by default the
    latency chapter's (:func:`servebook.book.scenarios.latency_sweep`).
    """
    sweep = sweep if sweep is not None else scenarios.latency_sweep()
    labels = list(dict.fromkeys(label for label, _ in sweep))
    rates = sorted({rate for _, rate in sweep})
    slo = scenarios.LATENCY_SLO
    fig, axes = _style.new_figure(7.2, 3.6, ncols=2)
    markers = ("s", "o", "^", "D")
    with matplotlib.rc_context(_style.RC):
        for i, label in enumerate(labels):
            runs = [sweep[label, rate] for rate in rates]
            done = [run.summary().requests_per_s for run in runs]
            ttft = [run.summary().ttft_p99_s for run in runs]
            good = [batching.goodput(run, slo) for run in runs]
            style = dict(color=_style.SEQUENCE[i], marker=markers[i % len(markers)], markersize=4, linewidth=1.3,
                         label=label)
            axes[0].plot(done, ttft, **style)
            axes[1].plot(rates, good, **style)
        axes[0].set_yscale("log")
        axes[0].axhline(slo.ttft_s, color=_style.MUTED, linewidth=0.8, linestyle="--")
        axes[0].set_xlabel("throughput (requests/s completed)")
        axes[0].set_ylabel("time to first token, p99 (s)")
        axes[0].set_title("Latency against throughput", fontsize=10)
        axes[1].plot(rates, rates, color=_style.FREE, linewidth=0.8, linestyle=":", label="every request on time")
        axes[1].set_xlabel("arrival rate (requests/s)")
        axes[1].set_ylabel("goodput (requests/s within the SLO)")
        axes[1].set_title(f"Goodput: TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s * 1e3:g} ms", fontsize=10)
        axes[1].legend(fontsize=7, loc="upper left")
        server = scenarios.BATCHING_SERVER
        fig.suptitle(f"{server.spec.display_name} on {gpus.get(server.gpu).display_name}: chat traffic with a "
                     "shared system prompt", fontsize=10)
    return fig


FIGURES = {
    "batching-kv-memory-over-time": kv_memory_over_time,
    "batching-batch-size-over-time": batch_size_over_time,
    "latency-throughput-goodput": throughput_latency,
}
