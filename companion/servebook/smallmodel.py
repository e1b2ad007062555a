"""The book's small language model, and held-out perplexity: one code path for it and for a Hub model.

``load("tiny-llama")`` reads the 4-layer Llama that ``scripts/train_tiny_llama.py``
trained on CPython's documentation and that ships with this package (no network);
``load("Qwen/Qwen2.5-0.5B")`` reads a pretrained model from the Hugging Face Hub
with the same ``from_pretrained`` calls.  :func:`perplexity` scores either on text.

Perplexity is ``exp`` of the mean next-token cross-entropy over non-overlapping
windows of ``seq_len`` tokens (each window predicts its tokens 2..seq_len), the
way the GPTQ and AWQ papers evaluate WikiText-2.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
import time
from pathlib import Path

import torch

from .checks import whole

__all__ = ["TINY_LLAMA", "CACHE_DIR", "dtype_keyword", "load", "heldout_text", "calibration_text", "encode",
           "calibration_batch", "perplexity", "fingerprint", "cached", "perplexity_table", "TABLE_ROWS", "LOW_BIT_ROWS",
           "layer_statistics", "layer_errors"]

DATA = Path(__file__).parent / "data"
TINY_LLAMA = DATA / "tiny-llama"
CACHE_DIR = DATA / "cache"


def _path(name: str) -> str | Path:
    return TINY_LLAMA if name == "tiny-llama" else name


def dtype_keyword() -> str:
    """The keyword ``from_pretrained`` takes a torch dtype by: ``"dtype"`` (transformers >= 4.56) or ``"torch_dtype"``.

    4.56 renamed the argument, and a version before it ignores ``dtype`` (it
    loads FP32); Colab's version varies, so every loader asks here.
    """
    import transformers

    major, minor = (int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def load(name: str = "tiny-llama", *, dtype=torch.float32, device: str | torch.device = "cpu"):
    """``(model, tokenizer)`` in eval mode: the shipped ``"tiny-llama"``, a local directory, or a Hub id."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be 'tiny-llama', a directory or a Hugging Face Hub id, got {name!r}")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = _path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()   # a progress bar per load would clutter every executed page
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **{dtype_keyword(): dtype}).to(device)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    return model, tokenizer


def heldout_text() -> str:
    """The held-out help pages (whole topics never trained on), shipped beside the weights."""
    return (TINY_LLAMA / "heldout.txt").read_text()


def calibration_text() -> str:
    """A slice of the training text, shipped for GPTQ and AWQ calibration."""
    return (TINY_LLAMA / "calibration.txt").read_text()


def encode(tokenizer, text: str) -> torch.Tensor:
    """Token ids of ``text`` as one 1-D LongTensor (no special tokens added)."""
    if not isinstance(text, str) or not text:
        raise ValueError("text must be a non-empty str")
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def calibration_batch(ids: torch.Tensor, n_samples: int = 64, seq_len: int = 128, seed: int = 0) -> torch.Tensor:
    """``n_samples`` random windows of ``seq_len`` tokens from the 1-D token stream ``ids`` (seeded)."""
    n_samples, seq_len = whole("n_samples", n_samples), whole("seq_len", seq_len)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1:
        raise ValueError("ids must be a 1-D tensor of token ids")
    if len(ids) <= seq_len:
        raise ValueError(f"ids holds {len(ids)} tokens, fewer than one window of seq_len={seq_len}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - seq_len, (n_samples,), generator=generator)
    return torch.stack([ids[s:s + seq_len] for s in starts.tolist()])


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, seq_len: int = 128, batch_size: int = 16,
               max_windows: int | None = None) -> float:
    """``exp(mean cross-entropy)`` of ``model`` on the 1-D token stream ``ids``, in non-overlapping windows."""
    seq_len, batch_size = whole("seq_len", seq_len), whole("batch_size", batch_size)
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or ids.is_floating_point():
        raise ValueError("ids must be a 1-D integer tensor of token ids")
    n = len(ids) // seq_len
    if max_windows is not None:
        n = min(n, whole("max_windows", max_windows))
    if n == 0:
        raise ValueError(f"ids holds {len(ids)} tokens, fewer than one window of seq_len={seq_len}")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit is not None and seq_len > limit:
        raise ValueError(f"seq_len {seq_len} is longer than the model's {limit} positions")
    from .gptq import one_thread_on_cpu

    device = next(model.parameters()).device
    windows = ids[: n * seq_len].view(n, seq_len)
    total, count = 0.0, 0
    with one_thread_on_cpu(device):
        for batch in windows.split(batch_size):
            batch = batch.to(device)
            logits = model(input_ids=batch, use_cache=False).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten(),
                                                     reduction="sum")
            total += loss.item()
            count += batch[:, 1:].numel()
    return math.exp(total / count)


def fingerprint(*parts) -> str:
    """A short sha256 of the shipped weights, the code of the quantization modules, and ``parts``.

    Any change to the weights, to ``quant``/``gptq``/``awq``/``qmodel``/``smallmodel``, or to the
    settings in ``parts`` gives a new key, so a cached result is never stale.
    """
    from . import awq, gptq, qmodel, quant

    digest = hashlib.sha256()
    for file in ("config.json", "model.safetensors", "heldout.txt", "calibration.txt"):
        digest.update((TINY_LLAMA / file).read_bytes())
    for module in (quant, gptq, awq, qmodel, __import__(__name__, fromlist=["_"])):
        digest.update(inspect.getsource(module).encode())
    digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def cached(kind: str, key: str, compute):
    """``compute()``'s JSON-able result, kept in ``data/cache/<kind>-<key>.json``.

    Older files of the same kind are removed when a new one is written: the cache holds
    only results of the current code and weights.
    """
    path = CACHE_DIR / f"{kind}-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        for old in CACHE_DIR.glob(f"{kind}-*.json"):
            old.unlink()
        path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass   # a read-only install: the result is still right, only not kept
    return result


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


def perplexity_table(rows=TABLE_ROWS, *, name: str = "table", n_calibration: int = 64, seq_len: int = 128,
                     seed: int = 0, use_cache: bool = True) -> list[dict]:
    """Held-out perplexity of the tiny Llama under each quantization in ``rows``, with bytes and time.

    One dict per row: ``label, method, bits, group_size, perplexity, n_params, bytes, bits_per_weight,
    seconds`` (seconds to quantize), ``packed`` (False: simulated, for widths the kernels do not pack).
    Cached as ``perplexity-<name>`` by :func:`fingerprint` of code, weights and settings.
    """
    rows = [tuple(row) for row in rows]
    settings = {"rows": rows, "n_calibration": n_calibration, "seq_len": seq_len, "seed": seed}

    def compute():
        from .qmodel import PACKABLE_BITS, linear_layers, quantize_model

        torch.manual_seed(seed)
        model, tokenizer = load("tiny-llama")
        held = encode(tokenizer, heldout_text())
        calibration = calibration_batch(encode(tokenizer, calibration_text()), n_calibration, seq_len, seed)
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
                          "perplexity": round(perplexity(quantized, held, seq_len), 4), "n_params": n_params,
                          "bytes": n_bytes, "bits_per_weight": round(8 * n_bytes / n_params, 4),
                          "seconds": round(seconds, 2), "seconds_total": round(time.perf_counter() - tick, 2),
                          "packed": packed})
        return table

    if not use_cache:
        return compute()
    return cached(f"perplexity-{name}", fingerprint(settings), compute)


@torch.no_grad()
def layer_statistics(model, calibration: torch.Tensor, batch_size: int = 16) -> dict:
    """Activation statistics (:class:`~servebook.gptq.HessianAccumulator`) of every quantizable linear layer.

    One pass of the *float* model over ``calibration`` (n_samples x seq_len token ids): every layer
    sees unquantized inputs, so layers can be compared one by one, method against method.
    """
    from .gptq import HessianAccumulator, one_thread_on_cpu
    from .qmodel import linear_layers

    layers = linear_layers(model)
    stats = {name: HessianAccumulator(layer.in_features, device=layer.weight.device) for name, layer in layers.items()}
    handles = [layer.register_forward_hook(lambda m, args, out, name=name: stats[name].add(args[0]))
               for name, layer in layers.items()]
    device = next(model.parameters()).device
    try:
        with one_thread_on_cpu(device):
            for batch in calibration.split(batch_size):
                model(input_ids=batch.to(device), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return stats


def layer_errors(bits: int = 4, group_size: int = 128, *, n_calibration: int = 64, seq_len: int = 128,
                 seed: int = 0, use_cache: bool = True) -> list[dict]:
    """Relative output error ``||X (W - W_hat)^T|| / ||X W^T||`` of each linear layer of the tiny Llama,
    for RTN, GPTQ and AWQ at the same bits and group size.

    GPTQ and AWQ are fitted on the float model's calibration activations; the error is measured on
    activations of the held-out text (``X``), which neither method saw.
    """
    settings = {"bits": bits, "group_size": group_size, "n_calibration": n_calibration, "seq_len": seq_len,
                "seed": seed, "what": "layer_errors"}

    def compute():
        from .awq import awq_quantize, output_error
        from .gptq import gptq_quantize
        from .qmodel import linear_layers, rtn_quantize
        from .quant import dequantize

        model, tokenizer = load("tiny-llama")
        calibration = calibration_batch(encode(tokenizer, calibration_text()), n_calibration, seq_len, seed)
        stats = layer_statistics(model, calibration)
        held = encode(tokenizer, heldout_text())
        held_stats = layer_statistics(model, held[: len(held) // seq_len * seq_len].view(-1, seq_len))
        rows = []
        for name, layer in linear_layers(model).items():
            W = layer.weight.detach().float()
            gram = held_stats[name].H / 2
            reference = output_error(W, torch.zeros_like(W), gram)
            codes, qparams = rtn_quantize(W, bits, group_size)
            candidates = {
                "rtn": dequantize(codes, qparams, dtype=torch.float32),
                "gptq": gptq_quantize(W, stats[name].H, bits, group_size).dequantize(),
                "awq": awq_quantize(W, None, bits, group_size, mean_abs=stats[name].mean_abs,
                                    gram=stats[name].H / 2).effective_weight(),
            }
            row = {"layer": name}
            for method, W_hat in candidates.items():
                row[method] = round(math.sqrt(output_error(W, W_hat, gram) / reference), 6)
            rows.append(row)
        return rows

    if not use_cache:
        return compute()
    return cached("layer-errors", fingerprint(settings), compute)


if __name__ == "__main__":
    # Refresh the cached chapter results: python -m servebook.smallmodel
    for row in perplexity_table():
        print(row)
    for row in perplexity_table(LOW_BIT_ROWS, name="low-bits"):
        print(row)
    for row in layer_errors():
        print(row)
