"""What the GPU-lab chapter says about a lab run: its tables and its sentences, read off the results document.

The chapter shows the run it measured just now (on a GPU) or the most recent
recorded one, and what it can say depends on the run: a CPU has no roofline
bound and no CUDA allocator, a run may lack vLLM or the fused kernel.  Each
function here takes a results document of :mod:`servebook.lab` and returns
the rows or the sentence the page prints, so the page defines no function.
"""

from __future__ import annotations

from typing import Any

from .. import lab, models
from ..units import GiB
from . import fmt

__all__ = ["results_table", "provenance_sentence", "byte_rows", "overhead_sentence", "largest_batch_rows",
           "time_sentence", "growth_sentence", "decode_slowdown", "vllm_sentence", "vllm_rows", "gpu_recorded",
           "recorded_gpu_note", "kernel_run", "kernel_sentence", "kernel_rows"]

_COLUMNS = ("model", "variant", "quantity", "B", "S", "predicted", "measured", "ratio")
_RIGHT = {"B", "S", "predicted", "measured", "ratio"}


# What each measured quantity is called on the page (the results document keeps its field names).
_QUANTITY_LABELS = {"weight_bytes": "weights", "kv_bytes": "KV cache", "allocated_bytes": "allocated",
                    "peak_bytes": "peak", "prefill_s": "prefill", "decode_s": "decode step",
                    "decode_graph_s": "decode, graph", "prefill_tokens_per_s": "prefill tok/s",
                    "decode_tokens_per_s": "decode tok/s", "perplexity": "perplexity"}


def _model_label(model: str) -> str:
    """A run's model by display name: ``llama-2-7b/8`` (its shape divided by 8) reads ``Llama-2-7B/8``."""
    name, _, reduced = model.partition("/")
    shown = models.display_name(name) if name in models.names() else name
    return f"{shown}/{reduced}" if reduced else shown


def results_table(rows: list[dict[str, Any]], quantities=None):
    """A page table of result rows: predicted, measured and their ratio in readable units (:func:`lab.table`)."""
    shown = lab.table({"rows": rows}, quantities)
    for row in shown:
        row["model"] = _model_label(row["model"])
        row["quantity"] = _QUANTITY_LABELS.get(row["quantity"], row["quantity"].replace("_", " "))
    return fmt.table(list(_COLUMNS), [[row[c] for c in _COLUMNS] for row in shown],
                     "".join("r" if c in _RIGHT else "l" for c in _COLUMNS))


def provenance_sentence(results: dict[str, Any], measured_now: bool) -> str:
    """Where and when the run was made, in bold; on a CPU, what its times cannot say."""
    where = "measured just now on" if measured_now else "recorded on"
    caveat = "" if results["device"]["kind"] == "cuda" else (
        "That is a CPU, at reduced size: byte counts are exact there too, but its times say nothing about a GPU, "
        "and `servebook.roofline` has no prediction for it. Run the chapter on a GPU to see the time bounds tested.")
    return f"**The results in this chapter were {where} {lab.provenance(results)}.** " + caveat


def byte_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The weights of every model and precision (and the allocator's count), and the largest KV cache of each."""
    rows = results["rows"]
    largest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["quantity"] == "kv_bytes":
            key = (r["model"], r["variant"])
            if key not in largest or r["batch"] * r["seq_len"] > largest[key]["batch"] * largest[key]["seq_len"]:
                largest[key] = r
    return [r for r in rows if r["quantity"] in ("weight_bytes", "allocated_bytes")] + list(largest.values())


def overhead_sentence(results: dict[str, Any]) -> str:
    """What the allocator and the peak memory add above the tensors (a GPU run), or why a CPU run cannot say."""
    rows = results["rows"]
    peaks = [r for r in rows if r["quantity"] == "peak_bytes"]
    allocated = [r for r in rows if r["quantity"] == "allocated_bytes"]
    if results["device"]["kind"] == "cuda" and peaks:
        worst = max(peaks, key=lambda r: r["ratio"])
        return (f"On the GPU, the allocator's count of the weights was {min(r['ratio'] for r in allocated):.4f} to "
                f"{max(r['ratio'] for r in allocated):.4f} times the state dict (rotary-frequency buffers, the "
                f"allocator's rounding of each block and whatever loading left allocated). The peak memory of a step "
                f"above the resident weights reached {worst['ratio']:.2f} times the KV cache ({worst['model']} "
                f"[{worst['variant']}], batch {worst['batch']}): that excess is activations and logits, the "
                f"overhead $O$ of @eq-capacity-plan.")
    return ("A CPU has no allocator statistics comparable to CUDA's, so this run reports only the tensors' own "
            "sizes. On a GPU the lab adds two rows per model: the allocator's growth while loading (expected a "
            "hair above the state dict) and the peak memory of each step above the resident weights, whose excess "
            "over the KV cache is the activations: the overhead $O$ of @eq-capacity-plan, measured.")


def largest_batch_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Step times and decode tokens per second at the largest (batch, prompt) measured per model and precision."""
    top: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in results["rows"]:
        if r["quantity"] in ("prefill_s", "decode_s", "decode_tokens_per_s"):
            key = (r["model"], r["variant"], r["quantity"])
            if key not in top or (r["batch"], r["seq_len"]) > (top[key]["batch"], top[key]["seq_len"]):
                top[key] = r
    return list(top.values())


def growth_sentence(results: dict[str, Any]) -> str:
    """How decode and prefill time grew with the batch, for the first model measured at every shape."""
    rows = results["rows"]
    for first in (r for r in rows if r["quantity"] == "decode_s"):
        times = {(r["quantity"], r["batch"], r["seq_len"]): r["measured"] for r in rows
                 if (r["model"], r["variant"]) == (first["model"], first["variant"])
                 and r["quantity"] in ("decode_s", "prefill_s")}
        batches = sorted({b for _, b, _ in times})
        lens = sorted({s for _, _, s in times})
        b_lo, b_hi, s_lo, s_hi = batches[0], batches[-1], lens[0], lens[-1]
        needed = [("decode_s", b_hi, s_hi), ("decode_s", b_lo, s_hi), ("prefill_s", b_hi, s_hi),
                  ("prefill_s", b_lo, s_lo)]
        if b_hi > b_lo and all(key in times for key in needed):
            decode = times[needed[0]] / times[needed[1]]
            prefill = times[needed[2]] / times[needed[3]]
            return (f"In this run, for {first['model']} [{first['variant']}], a decode step over {b_hi} sequences "
                    f"took {decode:.1f} times as long as over {b_lo}, for {b_hi // b_lo} times the tokens; a "
                    f"prefill of {b_hi * s_hi // (b_lo * s_lo)} times the tokens took {prefill:.1f} times as long.")
    return ""


def time_sentence(results: dict[str, Any]) -> str:
    """How far the steps sat above their roofline bounds, or why there are no bounds; then how time grew."""
    rows, name = results["rows"], results["device"]["name"]
    shape = growth_sentence(results)
    timed = [r for r in rows if r["quantity"] in ("prefill_s", "decode_s") and r["ratio"]]
    if timed:
        decode = [r["ratio"] for r in timed if r["quantity"] == "decode_s"]
        prefill = [r["ratio"] for r in timed if r["quantity"] == "prefill_s"]
        return (f"On {name} a decode step took {min(decode):.1f} to {max(decode):.1f} times its roofline bound, "
                f"and a prefill step {min(prefill):.1f} to {max(prefill):.1f} times its bound. The bound is a "
                "floor, not an estimate: the gap is the kernels' (launch latency, bandwidth and peak they do not "
                "reach), and for a small model a decode step is mostly kernel launches. " + shape)
    return (f"{name} is not in `servebook.roofline`'s GPU table, so the time rows carry no prediction: a CPU has "
            "neither tensor cores nor HBM, and its times say nothing about a GPU. " + shape + " A decode step "
            "reads every weight whatever the batch, so more sequences per step cost less than proportionally "
            "more time; how much less depends on the device.")


def decode_slowdown(results: dict[str, Any]) -> str:
    """Decode step time of W4A16 over its float model's, at the largest shape both measured."""
    decode = {(r["model"], r["variant"], r["batch"], r["seq_len"]): r["measured"] for r in results["rows"]
              if r["quantity"] == "decode_s"}
    pairs = sorted(((b * s, m, b, s, v) for (m, v, b, s) in decode if v == "w4a16"), reverse=True)
    for _, m, b, s, _ in pairs:
        base = next((v for v in lab.FLOAT_VARIANTS if (m, v, b, s) in decode), None)
        if base is not None:
            ratio = decode[(m, "w4a16", b, s)] / decode[(m, base, b, s)]
            return (f"In the run shown here ({results['device']['name']}), a W4A16 decode step of {m} took "
                    f"{ratio:.1f} times as long as the {base.upper()} one (batch {b}, prompts of {s} tokens).")
    return ""


def vllm_sentence(results: dict[str, Any]) -> str:
    """What the run says of vLLM: the version and KV memory its table comes from, or why there is none."""
    v = results["vllm"]
    if v["status"] != "measured":
        return f"*In this run: {v['reason']}.*"
    return (f"vLLM {results['versions']['vllm']} on {results['device']['name']}, from "
            f"{v['kv_memory_bytes'] / GiB:.2f} GiB of KV memory:")


def vllm_rows(results: dict[str, Any]) -> list[list[str]]:
    """vLLM's KV sizing beside servebook's, one row per quantity (none where vLLM did not run)."""
    v = results["vllm"]
    if v["status"] != "measured":
        return []
    return [[k, f"{c['vllm']:,}", f"{c['servebook']:,}", f"{c['ratio']:.4f}"] for k, c in v["comparison"].items()]


def gpu_recorded() -> bool:
    """Whether the book ships a lab run recorded on a GPU."""
    return any(run["device"]["kind"] == "cuda" for run in lab.recorded_runs())


def recorded_gpu_note(measured_now: bool) -> str:
    """Said plainly where the chapter shows no GPU: that none has been recorded (empty otherwise)."""
    if measured_now or gpu_recorded():
        return ""
    return ("No GPU run is recorded yet: every measurement in this chapter comes from the CPU run. The book's "
            "GPU run is prepared (@sec-lab-kernel says what it measures), and this chapter will show it once it is "
            "recorded.")


def kernel_run(results: dict[str, Any]) -> dict[str, Any] | None:
    """The run whose kernel section the chapter shows: this one, else the latest recorded GPU run (or None)."""
    if "kernel" in results:
        return results
    recorded = lab.latest_recorded("cuda")
    return recorded if "kernel" in recorded else None


def kernel_sentence(run: dict[str, Any] | None) -> str:
    """What the kernel table below shows, or, where no GPU run has timed the kernel, what will."""
    if run is None:
        return ("No recorded GPU run has timed the kernel yet, and this run does not: the chapter's run leaves "
                "the kernel benchmark off. The book's GPU run (`python benchmarks/gpu_run.py`, sized for a few "
                "minutes on an H100- or H200-class GPU; it has not been recorded) times it alone on every "
                "layer shape of Llama-2-7B, beside dequantize-then-matmul, FP16 `torch.matmul` and a "
                "device-to-device copy of the same run, and the whole model fused and unfused; when that run is "
                "recorded, its numbers appear here. On a GPU of your own, `python benchmarks/bench_w4a16.py` "
                "prints the same table.")
    section = run["kernel"]
    return (f"On {run['device']['name']} ({run['date'][:10]}), one token (batch 1) through each layer shape of "
            f"{section['model']}, groups of {section['group_size']}; the copy moved "
            f"{section['copy']['bytes_per_s'] / 1e9:,.0f} GB/s in the same run:")


def kernel_rows(run: dict[str, Any] | None, m: int = 1) -> list[list[str]]:
    """The fused kernel alone at ``m`` tokens, one row per layer shape: each path's time, the fused kernel's
    bandwidth and its fractions of the run's copy and of the datasheet (none without a kernel section)."""
    if run is None:
        return []
    section = run["kernel"]
    by_shape: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for r in section["rows"]:
        if r["m"] == m:
            by_shape.setdefault((r["n"], r["k"]), {})[r["path"]] = r
    return [[", ".join(p["fused"]["layers"]), f"{n:,} x {k:,}",
             *(f"{p[path]['seconds'] * 1e6:,.1f} us" for path in ("fused", "unfused", "fp16")),
             f"{p['fused']['bytes_per_s'] / 1e9:,.0f} GB/s", fmt.pct(p["fused"]["fraction_of_copy"], 0),
             "-" if p["fused"]["fraction_of_datasheet"] is None else fmt.pct(p["fused"]["fraction_of_datasheet"], 0)]
            for (n, k), p in by_shape.items()]
