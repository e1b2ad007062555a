"""Measuring: bytes of tensors and of the KV cache, synchronised step timings, held-out perplexity."""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..checks import whole
from .device import Device, MeasurementSkipped, free_device_memory, require_torch


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of ``tensors``, each storage counted once (tied embeddings share one matrix)."""
    seen: set[tuple[int, int, str]] = set()
    total = 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), str(t.dtype))
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def weight_bytes_of(module) -> int:
    """Bytes of a model's state dict: parameters and persistent buffers (quantized codes, scales), shared once.

    Non-persistent buffers (rotary-embedding frequencies) are left out: they
    are recomputed, not weights, and no formula counts them.
    """
    return tensor_bytes(module.state_dict(keep_vars=True).values())


def other_buffer_bytes(module) -> int:
    """Bytes of buffers outside the state dict (e.g. rotary frequencies): on the device, not weights."""
    stored = {id(t) for t in module.state_dict(keep_vars=True).values()}
    return tensor_bytes(b for b in module.buffers() if id(b) not in stored)


def cache_tensors(cache) -> list[Any]:
    """The key and value tensors of a transformers cache, across versions.

    transformers 5.x: ``cache.layers[i].keys`` / ``.values``; 4.x:
    ``cache.key_cache`` / ``cache.value_cache``; older: a tuple of
    ``(key, value)`` pairs per layer.
    """
    if cache is None:
        raise ValueError("the model returned no cache: was use_cache=False?")
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values) if t is not None]
    if hasattr(cache, "key_cache"):
        return [*cache.key_cache, *cache.value_cache]
    if isinstance(cache, (tuple, list)):
        return [t for pair in cache for t in pair[:2]]
    raise TypeError(f"do not know how to read the tensors of a {type(cache).__name__}")


def cache_bytes(cache) -> int:
    """KV-cache bytes held by ``cache``: the sum of its key and value tensors' sizes."""
    return sum(t.numel() * t.element_size() for t in cache_tensors(cache))


def _returned_cache(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def prefill_cache(module, input_ids):
    """Run one prefill of ``input_ids`` (batch x tokens) and return the KV cache the model filled."""
    torch = require_torch()
    with torch.inference_mode():
        return _returned_cache(module(input_ids=input_ids, use_cache=True))


def timed(function: Callable[[], Any],
          device: Device) -> tuple[float, Any]:
    """(seconds, result) of ``function()``, synchronised around it.

    Without the second synchronisation a CUDA timer measures only the
    kernel launches, which return at once.
    """
    device.synchronize()
    start = time.perf_counter()
    result = function()
    device.synchronize()
    return time.perf_counter() - start, result


@dataclass(frozen=True)
class Generation:
    """What one (batch, prompt length) measurement found."""

    batch: int
    prompt_len: int
    decode_steps: int
    prefill_s: list[float]
    decode_s: list[float]
    kv_bytes_after_prefill: int
    kv_bytes_after_decode: int
    # CUDA only: the allocator's peak during the timed steps above what was allocated before them
    # (weights and anything else resident): the KV cache plus transient activations and logits.
    peak_bytes: int | None

    @property
    def prefill_median(self) -> float:
        return statistics.median(self.prefill_s)

    @property
    def decode_median(self) -> float:
        return statistics.median(self.decode_s)


class _Steps:
    """The two steps of generation on fixed prompts, called as a serving engine calls them.

    The prefill asks for the last position's logits only (``logits_to_keep=1``,
    where this transformers has it); a decode step feeds one token per
    sequence and reads the whole cache.
    """

    def __init__(self, module, prompts):
        parameters = inspect.signature(module.forward).parameters
        self.module, self.prompts = module, prompts
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.keep = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}

    def prefill(self):
        return self.module(input_ids=self.prompts, use_cache=True, **self.keep)

    def decode(self, token, cache):
        return self.module(input_ids=token, use_cache=True, **{self.cache_argument: cache})


def _next_token(output):
    return output.logits[:, -1:].argmax(-1)


def _warm_up(steps: _Steps) -> None:
    """One untimed prefill and decode step: the first call picks kernels and fills caches."""
    warm = steps.prefill()
    steps.decode(_next_token(warm), _returned_cache(warm))


def _timed_prefills(steps: _Steps, device: Device, repeats: int) -> tuple[list[float], Any]:
    """Seconds of ``repeats`` prefills, and the last one's output (its cache is what decoding extends)."""
    seconds, output = [], None
    for _ in range(repeats):
        output = None  # the previous prefill's cache must not sit in memory (and in the peak) during this one
        elapsed, output = timed(steps.prefill, device)
        seconds.append(elapsed)
    return seconds, output


def _timed_decodes(steps: _Steps, device: Device, token, cache, count: int) -> list[float]:
    """Seconds of ``count`` decode steps, each feeding the token the previous one chose."""
    seconds = []
    for _ in range(count):
        elapsed, output = timed(lambda token=token: steps.decode(token, cache), device)
        seconds.append(elapsed)
        token = _next_token(output)
    return seconds


def _is_out_of_memory(error: BaseException) -> bool:
    torch = require_torch()
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(error, (oom, MemoryError)) or "out of memory" in str(error).lower()


def measure_generation(module, device: Device, batch: int, prompt_len: int, decode_steps: int = 8,
                       repeats: int = 3, seed: int = 0) -> Generation:
    """Prefill ``batch`` random prompts of ``prompt_len`` tokens, then decode ``decode_steps`` tokens.

    The first prefill and decode step are a warm-up (kernel selection, caches)
    and are not timed; then ``repeats`` prefills and ``decode_steps`` decode
    steps are, each synchronised.  A decode step feeds one token per sequence
    and reads the whole cache, as a serving engine's step does.  Raises
    :class:`MeasurementSkipped` if the device runs out of memory.
    """
    for name, value, minimum in (("batch", batch, 1), ("prompt_len", prompt_len, 1),
                                 ("decode_steps", decode_steps, 1), ("repeats", repeats, 1), ("seed", seed, 0)):
        whole(name, value, minimum)
    torch = require_torch()
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, module.config.vocab_size, (batch, prompt_len), generator=generator)
    steps = _Steps(module, prompts.to(device.torch_device))
    on_cuda = device.kind == "cuda"
    try:
        with torch.inference_mode():
            _warm_up(steps)
            free_device_memory(device)
            if on_cuda:
                torch.cuda.reset_peak_memory_stats(device.index)
                resident = torch.cuda.memory_allocated(device.index)
            prefill_s, output = _timed_prefills(steps, device, repeats)
            cache, token = _returned_cache(output), _next_token(output)
            del output
            after_prefill = cache_bytes(cache)
            decode_s = _timed_decodes(steps, device, token, cache, decode_steps)
            after_decode = cache_bytes(cache)
            peak = int(torch.cuda.max_memory_allocated(device.index) - resident) if on_cuda else None
            del cache, token
    except (RuntimeError, MemoryError) as error:
        if not _is_out_of_memory(error):
            raise
        free_device_memory(device)
        raise MeasurementSkipped(f"batch {batch} x {prompt_len} tokens ran out of memory on the device: "
                                 f"{str(error).splitlines()[0][:200]}") from error
    free_device_memory(device)
    return Generation(batch, prompt_len, decode_steps, prefill_s, decode_s, after_prefill, after_decode, peak)


def perplexity(module, tokenizer, text: str, window: int = 128, max_tokens: int = 8192) -> float:
    """Held-out perplexity by :func:`servebook.smallmodel.perplexity`, over the first ``max_tokens`` tokens.

    Non-overlapping windows of ``window`` tokens; the same text, window and
    cut-off give the same number on any device, up to rounding.
    """
    from .. import smallmodel

    whole("window", window, 2)
    whole("max_tokens", max_tokens, window)
    ids = smallmodel.encode(tokenizer, text)
    return float(smallmodel.perplexity(module, ids, seq_len=window, max_windows=max_tokens // window))
