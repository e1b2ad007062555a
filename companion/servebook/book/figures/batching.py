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
from .. import fmt, scenarios
from . import _style


def default_runs(n_requests: int = scenarios.BATCH_JOB.n_requests, seed: int = scenarios.BATCH_JOB.seed):
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


def _kv_shares(result: batching.SimulationResult):
    """Binned times, and the shares of the KV pool that hold tokens and that are reserved, at each."""
    total = result.slots_total
    t, stored = _binned(result, result.steps["tokens_stored"] / total)
    _, reserved = _binned(result, result.steps["slots_reserved"] / total)
    return t, stored, reserved


def kv_memory_over_time(runs: dict | None = None, policy: str = "continuous") -> Figure:
    """Share of the KV pool holding tokens, reserved but empty, and free, over time: naive vs paged."""
    runs = runs if runs is not None else default_runs()
    fig, axes = _style.new_figure(7.2, 3.4, ncols=2, sharey=True)
    with matplotlib.rc_context(_style.RC):
        for ax, allocator in zip(axes, ("naive", "paged"), strict=True):
            result = runs[policy, allocator]
            t, stored, reserved = _kv_shares(result)
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


def kv_memory_over_time_alt(runs: dict | None = None, policy: str = "continuous") -> str:
    """The alt text of :func:`kv_memory_over_time`: each allocator's shares of the pool and when its run ends."""
    runs = runs if runs is not None else default_runs()
    naive, paged = runs[policy, "naive"], runs[policy, "paged"]
    _, stored, reserved = _kv_shares(naive)
    t, full, _ = _kv_shares(paged)
    plateau = np.median(full)
    falls = t[full >= 0.9 * plateau][-1]  # the last moment the paged pool is near its usual fill
    return ("Two stacked area charts of the share of the KV pool, 0 to 100 percent, against modelled time. "
            f"Left, naive: a teal band holding tokens fluctuates between {fmt.nearest(100 * stored.min(), 5)} and "
            f"{fmt.nearest(100 * stored.max(), 5)} percent, a red band of reserved but empty memory fills the rest up "
            f"to about {fmt.nearest(100 * reserved.max(), 1)} percent, and a thin grey band of free memory sits on "
            f"top; the run ends after about {fmt.nearest(naive.steps['time_s'][-1], 10)} seconds. Right, paged: the "
            f"teal band fills about {fmt.nearest(100 * plateau, 5)} percent, with a thin red band above it, until "
            f"about {fmt.nearest(falls, 10)} seconds, when it falls away as the last requests finish; the run ends "
            f"after about {fmt.nearest(paged.steps['time_s'][-1], 10)} seconds.")


def _running(result: batching.SimulationResult, window_s: float):
    """Binned times and requests running in the first ``window_s`` seconds, as the batch-size chart draws them."""
    return _binned(result, result.steps["running"].astype(float), n_bins=480, until=window_s)


def _batch_sizes(result: batching.SimulationResult, window_s: float) -> np.ndarray:
    """Requests running at the first step and after every step that adds some, in the first ``window_s`` s."""
    steps = result.steps
    running = steps["running"][steps["time_s"] - steps["dt"] < window_s]
    return running[np.r_[0, np.flatnonzero(np.diff(running) > 0) + 1]]


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
                t, running = _running(result, window_s)
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


def batch_size_over_time_alt(runs: dict | None = None, window_s: float = 120.0) -> str:
    """The alt text of :func:`batch_size_over_time`: each allocator's batch sizes, static and continuous."""
    runs = runs if runs is not None else default_runs()
    _, naive = _running(runs["continuous", "naive"], window_s)
    _, paged = _running(runs["continuous", "paged"], window_s)
    naive_batches = _batch_sizes(runs["static", "naive"], window_s)
    paged_batches = _batch_sizes(runs["static", "paged"], window_s)
    _, naive_static = _running(runs["static", "naive"], window_s)
    _, paged_static = _running(runs["static", "paged"], window_s)
    flat = round(naive[0])
    if np.ptp(naive.round()) or set(naive_batches) != {flat} or np.ptp(paged_batches) == 0:
        raise RuntimeError("batch_size_over_time_alt describes a naive pool whose every batch is as full as the "
                           "continuous line, and paged batches of varying size")
    low, high = np.percentile(paged, [5, 95])  # where the paged continuous line spends 90% of the window
    return (f"Two line charts of requests running against modelled time from 0 to {window_s:g} seconds. Left, "
            f"naive allocator: the continuous line is flat at {flat}; the static line jumps to {flat} at each new "
            f"batch and steps down to {round(naive_static.min())}, then waits there before the next jump. Right, "
            f"paged allocator: the static line jumps to between {fmt.nearest(paged_batches.min(), 10)} and "
            f"{fmt.nearest(paged_batches.max(), 10)} at each batch and decays towards {round(paged_static.min())}; "
            f"the continuous line stays mostly between {fmt.nearest(low, 10)} and {fmt.nearest(high, 10)}, with "
            "saw-tooth drops.")


SERVER_PHRASES = {  # how the alt text names each server of the sweep
    "static batching": "static batching",
    "continuous, whole prompts": "continuous with whole prompts",
    "continuous, chunked prefill": "continuous with chunked prefill",
    "continuous, chunked + prefix cache": "continuous with chunked prefill and a prefix cache",
}


def _sweep_lines(sweep: dict):
    """The servers and rates of a latency sweep, and per server its throughputs, p99 TTFTs and goodputs."""
    labels = list(dict.fromkeys(label for label, _ in sweep))
    rates = sorted({rate for _, rate in sweep})
    lines = {}
    for label in labels:
        runs = [sweep[label, rate] for rate in rates]
        lines[label] = (np.array([run.summary().requests_per_s for run in runs]),
                        np.array([run.summary().ttft_p99_s for run in runs]),
                        np.array([batching.goodput(run, scenarios.LATENCY_SLO) for run in runs]))
    return labels, rates, lines


def throughput_latency(sweep: dict | None = None) -> Figure:
    """p99 time to first token against throughput, and goodput under the chapter's SLO, as the arrival rate grows.

    ``sweep`` maps ``(server label, arrival rate)`` to a run; by default the
    latency chapter's (:func:`servebook.book.scenarios.latency_sweep`).
    """
    sweep = sweep if sweep is not None else scenarios.latency_sweep()
    labels, rates, lines = _sweep_lines(sweep)
    slo = scenarios.LATENCY_SLO
    fig, axes = _style.new_figure(7.2, 3.6, ncols=2)
    markers = ("s", "o", "^", "D")
    with matplotlib.rc_context(_style.RC):
        for i, label in enumerate(labels):
            done, ttft, good = (list(series) for series in lines[label])
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


def throughput_latency_alt(sweep: dict | None = None) -> str:
    """The alt text of :func:`throughput_latency`: where each kind of server meets the SLO, and its goodput."""
    sweep = sweep if sweep is not None else scenarios.latency_sweep()
    labels, rates, lines = _sweep_lines(sweep)
    slo = scenarios.LATENCY_SLO
    static, *plain, cached = labels
    done, ttft, _ = lines[plain[0]]
    late = int(np.argmax(ttft > slo.ttft_s))  # the first rate whose p99 TTFT misses the SLO
    peak = int(np.argmax(lines[plain[0]][2]))
    cached_done, cached_ttft, cached_good = lines[cached]
    if (ttft[0] > slo.ttft_s or not late or any(np.any(lines[p][1][:late] > slo.ttft_s) for p in plain)
            or lines[static][1].min() <= slo.ttft_s or np.any(np.diff(cached_good) <= 0)
            or not 0 < peak < len(rates) - 1 or lines[static][2].max() >= 0.5 or cached_ttft.max() > slo.ttft_s):
        raise RuntimeError("throughput_latency_alt describes a static server always late, continuous servers that "
                           "meet the SLO until one rate and peak before the last, and a cached one always on time")
    servers = [SERVER_PHRASES[label] for label in labels]
    decade = 10 ** np.floor(np.log10(lines[static][1].min()))  # the static line's TTFT stays above this
    return ("Two line charts with one line per server: "
            f"{', '.join(servers[:-1])}, and {servers[-1]}. Left: p99 time to first token on a log scale against "
            f"requests completed per second; the static line sits above {decade:g} seconds, the "
            f"{fmt.spelled(len(plain))} continuous lines without a cache stay near {ttft[:late].min():.1g} to "
            f"{ttft[:late].max():.1g} seconds and then shoot past the {slo.ttft_s:g}-second dashed line near "
            f"{done[late]:.0f} requests per second, the cached line stays near {np.median(cached_ttft):.1g} seconds "
            f"up to about {cached_done[-1]:.0f}. Right: goodput against arrival rate; the continuous lines follow "
            f"the diagonal, peak near {lines[plain[0]][2][peak]:.0f} at {rates[peak]:g} requests per second and "
            f"drop at {rates[peak + 1]:g}; the cached line keeps rising to about {cached_good[-1]:.0f}; static "
            "batching stays near zero.")


FIGURES = {
    "batching-kv-memory-over-time": kv_memory_over_time,
    "batching-batch-size-over-time": batch_size_over_time,
    "latency-throughput-goodput": throughput_latency,
}

ALT_TEXTS = {
    "batching-kv-memory-over-time": kv_memory_over_time_alt,
    "batching-batch-size-over-time": batch_size_over_time_alt,
    "latency-throughput-goodput": throughput_latency_alt,
}
