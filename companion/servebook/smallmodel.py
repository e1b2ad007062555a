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

import math
import re
from pathlib import Path

import torch

from .checks import whole

__all__ = ["TINY_LLAMA", "dtype_keyword", "load", "config", "heldout_text", "calibration_text", "evaluation_text",
           "encode", "calibration_batch", "perplexity", "layer_statistics", "cache_keyword"]

DATA = Path(__file__).parent / "data"
TINY_LLAMA = DATA / "tiny-llama"


def _path(name: str) -> str | Path:
    """Where ``from_pretrained`` reads ``name``: the shipped model's folder, or ``name`` itself."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be 'tiny-llama', a directory or a Hugging Face Hub id, got {name!r}")
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
    path = _path(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

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


def config(name: str = "tiny-llama"):
    """The Hugging Face config of a model :func:`load` reads (its widths, layers, heads), without its weights."""
    path = _path(name)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path)


def cache_keyword(model) -> str:
    """The keyword a model's forward takes its KV cache by: ``"cache"`` (transformers 5.24 renamed it)
    or ``"past_key_values"``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def heldout_text() -> str:
    """The held-out help pages (whole topics never trained on), shipped beside the weights."""
    return (TINY_LLAMA / "heldout.txt").read_text()


def calibration_text() -> str:
    """A slice of the training text, shipped for GPTQ and AWQ calibration."""
    return (TINY_LLAMA / "calibration.txt").read_text()


def evaluation_text() -> tuple[str, str]:
    """(name, text) to score a pretrained model on: WikiText-2's test split, as the GPTQ and AWQ papers
    use, when the ``datasets`` package can fetch it; else the tiny model's held-out text, which ships here."""
    try:
        from datasets import load_dataset

        test = load_dataset("wikitext", "wikitext-2-raw-v1", split="test")
        return "WikiText-2 test", "\n\n".join(test["text"])
    except Exception as err:   # no `datasets`, or no access: any failure means "use the shipped text"
        return f"the tiny model's held-out text ({type(err).__name__})", heldout_text()


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
               max_windows: int | None = None, cache=None) -> float:
    """``exp(mean cross-entropy)`` of ``model`` on the 1-D token stream ``ids``, in non-overlapping windows.

    ``cache``: a function returning a fresh Hugging Face cache for each batch (a quantized KV cache,
    :func:`servebook.kvquant.quantized_cache`); attention then reads its keys and values from it.
    """
    if cache is not None and not callable(cache):
        raise TypeError(f"cache must be a function that returns a fresh cache, got {type(cache).__name__}")
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
            if cache is None:
                logits = model(input_ids=batch, use_cache=False).logits.float()
            else:
                logits = model(input_ids=batch, use_cache=True, **{cache_keyword(model): cache()}).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten(),
                                                     reduction="sum")
            total += loss.item()
            count += batch[:, 1:].numel()
    return math.exp(total / count)


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
