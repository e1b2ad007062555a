"""Chapter 06's experiments on the book's small model: computed once, shipped with the package.

Quantizing the tiny Llama seventeen ways takes minutes, so the results the
chapter shows are kept as JSON files in ``servebook/data/experiments/`` and
ship in the wheel: a notebook in Colab reads the same numbers the book was
built with, without any repository file.

A result's key is explicit and stable: the experiment's name and
:data:`VERSIONS` entry, its settings, a hash of the shipped weights and texts,
and servebook's version.  Editing a comment in ``quant.py`` changes nothing;
changing what an experiment computes means bumping its version and running

    python -m servebook.book.experiments refresh

in a checkout, which recomputes every experiment and rewrites the files.  A
build never writes them: a missing result is computed in memory (and a
warning says which), so a clean checkout builds with the committed files and
leaves them as they are.

Perplexities are stored to 4 decimals but shown to 1 (:func:`shown_perplexity`):
a fresh run on another machine differs in the second decimal (103.94
against 103.90 for GPTQ g128), never in the first.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import torch

from .. import __version__, smallmodel

VERSIONS = {"perplexity-table": 1, "perplexity-low-bits": 1, "layer-errors": 1, "kv-cache-table": 5,
            "activation-table": 1}
"""Bump an experiment's version when what it computes changes, then refresh."""

DIRECTORY = Path(smallmodel.__file__).parent / "data" / "experiments"

PERPLEXITY_DIGITS = 1
"""Decimals a cached perplexity is shown with: what another machine reproduces."""

# (label, method, bits, group_size) of the chapter's table; "fp32" is the unquantized model.
TABLE_ROWS = (
    ("FP32", "fp32", 32, None),
    ("INT8 RTN per channel", "rtn", 8, "channel"),
    ("INT4 RTN per tensor", "rtn", 4, "tensor"),
    ("INT4 RTN per channel", "rtn", 4, "channel"),
    ("INT4 RTN g128", "rtn", 4, 128),
    ("INT4 GPTQ g128", "gptq", 4, 128),
    ("INT4 AWQ g128", "awq", 4, 128),
    ("INT4 RTN g32", "rtn", 4, 32),
    ("INT4 GPTQ g32", "gptq", 4, 32),
    ("INT4 AWQ g32", "awq", 4, 32),
)

# Fewer bits than the kernels pack, simulated (pack=False): where the methods pull apart on a small model.
LOW_BIT_ROWS = (
    ("FP32", "fp32", 32, None),
    ("INT3 RTN g128", "rtn", 3, 128),
    ("INT3 GPTQ g128", "gptq", 3, 128),
    ("INT3 AWQ g128", "awq", 3, 128),
    ("INT2 RTN g128", "rtn", 2, 128),
    ("INT2 GPTQ g128", "gptq", 2, 128),
    ("INT2 AWQ g128", "awq", 2, 128),
)

CALIBRATION = {"n_calibration": 64, "seq_len": 128, "seed": 0}
"""The calibration every experiment uses: 64 windows of 128 tokens, seed 0."""


def shown_perplexity(value: float) -> str:
    """A cached perplexity as the book prints it (see :data:`PERPLEXITY_DIGITS`)."""
    return f"{value:.{PERPLEXITY_DIGITS}f}"


def weights_hash() -> str:
    """sha256 of the shipped model, its config and the two texts every experiment reads."""
    digest = hashlib.sha256()
    for file in ("config.json", "model.safetensors", "heldout.txt", "calibration.txt"):
        digest.update((smallmodel.TINY_LLAMA / file).read_bytes())
    return digest.hexdigest()


def key(name: str, settings: dict) -> str:
    """The stable key of one result: experiment, version, settings, weights, library version."""
    if name not in VERSIONS:
        raise ValueError(f"unknown experiment {name!r}; experiments: {', '.join(VERSIONS)}")
    identity = {"experiment": name, "version": VERSIONS[name], "settings": settings,
                "weights": weights_hash(), "servebook": __version__}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def path(name: str, settings: dict) -> Path:
    return DIRECTORY / f"{name}-{key(name, settings)}.json"


_refreshing = False   # set only by refresh(): the one writer of the shipped files


def result(name: str, settings: dict, compute):
    """The shipped result of experiment ``name`` with ``settings``, or ``compute()``'s if none ships.

    Only :func:`refresh` writes files; anywhere else a missing result is
    computed, returned and not kept.
    """
    target = path(name, settings)
    if target.exists() and not _refreshing:
        return json.loads(target.read_text())
    if not _refreshing:
        warnings.warn(f"{target.name} is not in the shipped results: computing it now (minutes); "
                      "run `python -m servebook.book.experiments refresh` in a checkout to keep it",
                      stacklevel=3)
        return compute()
    value = compute()
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    for old in DIRECTORY.glob(f"{name}-*.json"):
        old.unlink()
    target.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    return value


def perplexity_table(rows=TABLE_ROWS, *, name: str = "perplexity-table") -> list[dict]:
    """Held-out perplexity of the tiny Llama under each quantization in ``rows``, with bytes and time.

    One dict per row: ``label, method, bits, group_size, perplexity, n_params, bytes, bits_per_weight,
    seconds`` (seconds to quantize, on the machine that refreshed the results), ``packed`` (False:
    simulated, for widths the kernels do not pack).
    """
    rows = [tuple(row) for row in rows]
    return result(name, _table_settings(rows), lambda: _perplexities(rows))


def _table_settings(rows) -> dict:
    return {"rows": [list(row) for row in rows], **CALIBRATION}


def _perplexities(rows) -> list[dict]:
    from ..qmodel import PACKABLE_BITS, linear_layers, quantize_model

    seq_len = CALIBRATION["seq_len"]
    torch.manual_seed(CALIBRATION["seed"])
    model, tokenizer = smallmodel.load("tiny-llama")
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               CALIBRATION["n_calibration"], seq_len, CALIBRATION["seed"])
    n_params = sum(layer.weight.numel() for layer in linear_layers(model).values())
    table = []
    for label, method, bits, group_size in rows:
        tick = time.perf_counter()
        packed = bits in PACKABLE_BITS
        if method == "fp32":
            quantized, n_bytes, seconds, packed = model, 4 * n_params, 0.0, False
        else:
            report = quantize_model(model, method, bits=bits, group_size=group_size, pack=packed,
                                    calibration=None if method == "rtn" else calibration)
            quantized, n_bytes, seconds = report.model, report.bytes_after, report.seconds
        table.append({"label": label, "method": method, "bits": bits, "group_size": group_size,
                      "perplexity": round(smallmodel.perplexity(quantized, held, seq_len), 4), "n_params": n_params,
                      "bytes": n_bytes, "bits_per_weight": round(8 * n_bytes / n_params, 4),
                      "seconds": round(seconds, 2), "seconds_total": round(time.perf_counter() - tick, 2),
                      "packed": packed})
    return table


def layer_errors(bits: int = 4, group_size: int = 128) -> list[dict]:
    """Relative output error ``||X (W - W_hat)^T|| / ||X W^T||`` of each linear layer of the tiny Llama,
    for RTN, GPTQ and AWQ at the same bits and group size.

    GPTQ and AWQ are fitted on the float model's calibration activations; the error is measured on
    activations of the held-out text (``X``), which neither method saw.
    """
    return result("layer-errors", _error_settings(bits, group_size), lambda: _layer_errors(bits, group_size))


def _error_settings(bits: int, group_size: int) -> dict:
    return {"bits": bits, "group_size": group_size, **CALIBRATION}


def _layer_errors(bits: int, group_size: int) -> list[dict]:
    from ..awq import awq_quantize, relative_output_error
    from ..gptq import gptq_quantize
    from ..qmodel import linear_layers, rtn_quantize
    from ..quant import dequantize

    seq_len = CALIBRATION["seq_len"]
    model, tokenizer = smallmodel.load("tiny-llama")
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               CALIBRATION["n_calibration"], seq_len, CALIBRATION["seed"])
    stats = smallmodel.layer_statistics(model, calibration)
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    held_stats = smallmodel.layer_statistics(model, held[: len(held) // seq_len * seq_len].view(-1, seq_len))
    rows = []
    for name, layer in linear_layers(model).items():
        W = layer.weight.detach().float()
        gram = held_stats[name].H / 2
        codes, qparams = rtn_quantize(W, bits, group_size)
        candidates = {
            "rtn": dequantize(codes, qparams, dtype=torch.float32),
            "gptq": gptq_quantize(W, stats[name].H, bits, group_size).dequantize(),
            "awq": awq_quantize(W, None, bits, group_size, mean_abs=stats[name].mean_abs,
                                gram=stats[name].H / 2).effective_weight(),
        }
        rows.append({"layer": name, **{method: round(relative_output_error(W, W_hat, gram), 6)
                                       for method, W_hat in candidates.items()}})
    return rows


PRETRAINED = "Qwen/Qwen2.5-0.5B"
"""The Hub model chapter 06 quantizes where a GPU and the Hub are at hand (Colab with a GPU runtime)."""


def quantize_pretrained(name: str = PRETRAINED, methods: tuple[str, ...] = ("rtn", "gptq", "awq"),
                        bits: int = 4, group_size: int = 128) -> list[str]:
    """Quantize a pretrained Hub model on the GPU with each method; return its report lines.

    Perplexity is on WikiText-2 where the ``datasets`` package is installed, else on the book's
    held-out text; nothing is cached, since the result depends on the GPU and the Hub's files.
    """
    from .. import qmodel
    from .fmt import wrap

    model, tokenizer = smallmodel.load(name, dtype=torch.float16, device="cuda")
    text_name, text = smallmodel.evaluation_text()
    held = smallmodel.encode(tokenizer, text)
    calibration = smallmodel.calibration_batch(
        smallmodel.encode(tokenizer, smallmodel.calibration_text()), n_samples=64, seq_len=512)

    def perplexity(m) -> float:
        return smallmodel.perplexity(m, held, seq_len=512, batch_size=4, max_windows=40)

    lines = [f"{name} FP16 on {text_name}: perplexity {perplexity(model):.3f}"]
    for method in methods:
        report = qmodel.quantize_model(model, method, bits=bits, group_size=group_size,
                                       calibration=None if method == "rtn" else calibration)
        lines += [wrap(line, indent="    ") for line in report.describe().splitlines()]
        lines.append(f"    perplexity {perplexity(report.model):.3f}")
        del report
    return lines


# The KV-cache schemes of the activations chapter; "fp8" twice: vLLM's default scales (1.0), then calibrated.
KV_ROWS = ("auto", "fp8", "fp8_calibrated", "fp8_e5m2", "fp8_per_token_head", "int8_per_token_head",
           "int4_per_token_head", "kivi4", "kivi2")
ACTIVATION_ROWS = ("w8a16", "w8a8_tensor", "w8a8_token", "llm_int8", "smoothquant", "fp8")
PLANTED = {"channels": [7, 100, 201], "factor": 40.0}
"""The activation outliers planted in the tiny model: three hidden channels, 40 times larger."""


def kv_cache_table() -> list[dict]:
    """Held-out perplexity of the tiny Llama with each KV-cache scheme of :data:`KV_ROWS`, and the
    relative error of every layer's attention output (the input of ``o_proj``) against the 16-bit cache.

    Under ``fp8`` attention is FlashAttention-3's, as vLLM runs it on an H100 for a checkpoint without
    ``q_scale`` (:func:`servebook.kvquant.fa3_fp8`): queries cast to E4M3 with ``q_scale`` 1.0, and
    probabilities rounded to E4M3 before they multiply V; the ``fp8`` rows also give the attention
    error of their keys and values alone (``attention_error_kv``) and with the queries cast
    (``attention_error_queries``).  The other schemes quantize keys and values only.
    ``fp8_calibrated``'s per-layer scales are absmax / 448 of the keys and values of the
    :data:`CALIBRATION` windows of the calibration text, not of the held-out text."""
    return result("kv-cache-table", _kv_settings(), _kv_cache_rows)


def _kv_settings() -> dict:
    return {"rows": list(KV_ROWS), **CALIBRATION}


def _attention_outputs(model, windows, cache) -> list[torch.Tensor]:
    from functools import partial

    layers = model.model.layers
    found = [[] for _ in layers]
    handles = [layer.self_attn.o_proj.register_forward_hook(partial(lambda i, m, args, out: found[i].append(
        args[0].detach()), i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            for batch in windows.split(16):
                model(input_ids=batch, use_cache=True, **{smallmodel.cache_keyword(model): cache()})
    finally:
        for handle in handles:
            handle.remove()
    return [torch.cat(parts) for parts in found]


def _kv_cache_rows() -> list[dict]:
    from contextlib import nullcontext
    from functools import partial

    from ..kvquant import calibrated_scales, fa3_fp8, quantized_cache

    seq_len = CALIBRATION["seq_len"]
    model, tokenizer = smallmodel.load("tiny-llama")
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    windows = held[: 16 * seq_len].view(16, seq_len)
    # The scales come from the calibration text, as a calibrated checkpoint's would: never from the
    # held-out windows they are then judged on.
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               CALIBRATION["n_calibration"], seq_len, CALIBRATION["seed"])
    scales = [calibrated_scales(k, v) for k, v in _recorded_kv(model, calibration)]
    reference = _attention_outputs(model, windows, partial(quantized_cache, "auto"))

    def error(outputs) -> float:   # the layers' relative errors, averaged
        errors = [float((a - b).norm() / b.norm()) for a, b in zip(outputs, reference, strict=True)]
        return round(sum(errors) / len(errors), 6)

    rows = []
    for row in KV_ROWS:
        name = "fp8" if row == "fp8_calibrated" else row
        k_scales = [s[0] for s in scales] if row == "fp8_calibrated" else None
        v_scales = [s[1] for s in scales] if row == "fp8_calibrated" else None
        cache = partial(quantized_cache, name, k_scales, v_scales)
        # Under "fp8" vLLM's FlashAttention-3 (an H100) casts the queries (q_scale 1.0 when the
        # checkpoint has none, calibrated K/V scales or not) and the probabilities too; its other
        # caches leave both alone.
        with fa3_fp8(model) if name == "fp8" else nullcontext():
            outputs = _attention_outputs(model, windows, cache)
            ppl = smallmodel.perplexity(model, held, seq_len, cache=cache)
        entry = {"scheme": row, "perplexity": round(ppl, 4), "attention_error": error(outputs),
                 "k_scales": k_scales, "v_scales": v_scales, "fa3_fp8": name == "fp8"}
        if name == "fp8":   # where the error comes from: the cache, then the queries, then the probabilities
            entry["attention_error_kv"] = error(_attention_outputs(model, windows, cache))
            with fa3_fp8(model, round_probabilities=False):
                entry["attention_error_queries"] = error(_attention_outputs(model, windows, cache))
        rows.append(entry)
    return rows


def _recorded_kv(model, windows) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's keys and values (after RoPE) on ``windows``, from a plain cache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=windows, use_cache=True, **{smallmodel.cache_keyword(model): cache})
    return [(layer.keys, layer.values) for layer in cache.layers] if hasattr(cache, "layers") else \
        list(zip(cache.key_cache, cache.value_cache, strict=True))


def activation_table() -> list[dict]:
    """Held-out perplexity and mean relative layer-output error of the tiny Llama under each activation
    scheme of :data:`ACTIVATION_ROWS`, on the trained model and on the model with planted outliers."""
    return result("activation-table", _activation_settings(), _activation_rows)


def _activation_settings() -> dict:
    return {"rows": list(ACTIVATION_ROWS), "planted": PLANTED, **CALIBRATION}


def _layer_output_error(model, quantized, windows) -> float:
    """Mean over the linear layers of ``||Q(x) W_hat - x W|| / ||x W||`` on the float model's inputs ``x``."""
    from ..qmodel import linear_layers

    errors = []
    originals = linear_layers(model)
    hooks = [layer.register_forward_hook(lambda m, args, out, name=name: errors.append(float(
        (quantized.get_submodule(name)(args[0]) - out).norm() / out.norm()))) for name, layer in originals.items()]
    try:
        with torch.no_grad():
            model(input_ids=windows, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return sum(errors) / len(errors)


def _activation_rows() -> list[dict]:
    from ..actquant import input_absmax, outlier_ratio, plant_activation_outliers, quantize_activations

    seq_len = CALIBRATION["seq_len"]
    trained, tokenizer = smallmodel.load("tiny-llama")
    held = smallmodel.encode(tokenizer, smallmodel.heldout_text())
    calibration = smallmodel.calibration_batch(smallmodel.encode(tokenizer, smallmodel.calibration_text()),
                                               CALIBRATION["n_calibration"], seq_len, CALIBRATION["seed"])
    windows = held[: 8 * seq_len].view(8, seq_len)
    rows = []
    for label, model in (("trained", trained), ("planted", plant_activation_outliers(trained, **PLANTED))):
        absmax = input_absmax(model, calibration)
        for scheme in ACTIVATION_ROWS:
            quantized = quantize_activations(model, scheme,
                                             calibration=calibration if scheme == "smoothquant" else None)
            rows.append({"model": label, "scheme": scheme,
                         "perplexity": round(smallmodel.perplexity(quantized, held, seq_len), 4),
                         "layer_error": round(_layer_output_error(model, quantized, windows), 6),
                         "outlier_ratio_q_proj": round(outlier_ratio(absmax["model.layers.0.self_attn.q_proj"]), 3),
                         "outlier_columns": {n: m.outlier_columns for n, m in quantized.named_modules()
                                             if hasattr(m, "outlier_columns") and ".layers.0." in n}})
    return rows


def refresh() -> list[Path]:
    """Recompute every experiment the book shows and rewrite its file (the only writer)."""
    global _refreshing
    _refreshing = True
    try:
        perplexity_table()
        perplexity_table(LOW_BIT_ROWS, name="perplexity-low-bits")
        layer_errors()
        kv_cache_table()
        activation_table()
    finally:
        _refreshing = False
    return sorted(DIRECTORY.glob("*.json"))


def shipped() -> dict[str, bool]:
    """Whether the result of every experiment the book shows ships with the package."""
    return {name: path(name, settings).exists() for name, settings in _book_settings().items()}


def _book_settings() -> dict[str, dict]:
    """The settings of every result the book shows, by experiment."""
    return {"perplexity-table": _table_settings(TABLE_ROWS), "perplexity-low-bits": _table_settings(LOW_BIT_ROWS),
            "layer-errors": _error_settings(4, 128),
            "kv-cache-table": _kv_settings(), "activation-table": _activation_settings()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["refresh"]:
        print("usage: python -m servebook.book.experiments refresh", file=sys.stderr)
        return 2
    start = time.perf_counter()
    for written in refresh():
        print(written)
    print(f"refreshed in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
