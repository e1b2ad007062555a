"""A whole decode step timed two ways: launched op by op from Python, and replayed from a CUDA graph.

At batch 1 a decode step of a 7B model reads its weights in a few milliseconds,
and launching several hundred kernels from Python takes about as long: the
plain step measures the launches as much as the GPU.  A CUDA graph records the
step's kernels once and replays them with one launch, so its time is the GPU's.
Both are timed on the same static KV cache (a graph replays fixed addresses),
so they differ only in how the kernels are launched.
"""

from __future__ import annotations

import inspect
import statistics
from dataclasses import dataclass

from ..checks import whole
from .device import Device, MeasurementSkipped, cuda_graph, cuda_seconds, require_torch
from .measure import _Steps, timed


@dataclass(frozen=True)
class GraphedDecode:
    """Seconds of one decode step over a static cache: each launched from Python, and each replayed from a graph."""

    batch: int
    prompt_len: int
    plain_s: list[float]
    graph_s: list[float]

    @property
    def plain_median(self) -> float:
        return statistics.median(self.plain_s)

    @property
    def graph_median(self) -> float:
        return statistics.median(self.graph_s)


def _static_cache(module, max_len: int):
    from transformers import StaticCache

    return StaticCache(config=module.config, max_cache_len=max_len)


def _decode_call(module, cache, token, position):
    """The decode step as a function of fixed tensors: the graph reads ``token`` and ``position`` in place."""
    steps = _Steps(module, token)
    older = "cache_position" in inspect.signature(module.forward).parameters   # transformers before 5.x's counter
    extra = {"cache_position": position[0]} if older else {}
    arguments = {steps.cache_argument: cache, "position_ids": position, "use_cache": True, **extra}
    return lambda: module(input_ids=token, **arguments).logits


def graphed_decode(module, device: Device, batch: int, prompt_len: int, repeats: int = 20,
                   seed: int = 0) -> GraphedDecode:
    """Prefill ``batch`` random prompts of ``prompt_len`` tokens into a static cache, then time a decode step
    ``repeats`` times as launched from Python and ``repeats`` times replayed from a CUDA graph.

    Raises :class:`MeasurementSkipped` where there is no CUDA device or the step cannot be captured (a layer
    that waits on the host, as dequantize-then-matmul does when it checks its codes, breaks a capture).
    """
    for name, value, minimum in (("batch", batch, 1), ("prompt_len", prompt_len, 1), ("repeats", repeats, 1),
                                 ("seed", seed, 0)):
        whole(name, value, minimum)
    if device.kind != "cuda":
        raise MeasurementSkipped("a CUDA graph needs a CUDA device")
    torch = require_torch()
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, module.config.vocab_size, (batch, prompt_len), generator=generator)
    # Each call may advance the cache by one slot (transformers 5 counts on the device), so leave room for all.
    cache = _static_cache(module, prompt_len + 4 * repeats + 16)
    token = torch.zeros((batch, 1), dtype=torch.long, device=device.torch_device)
    position = torch.full((batch, 1), prompt_len, dtype=torch.long, device=device.torch_device)
    try:
        with torch.inference_mode():
            steps = _Steps(module, prompts.to(device.torch_device))
            module(input_ids=steps.prompts, use_cache=True, **{steps.cache_argument: cache})
            decode = _decode_call(module, cache, token, position)
            decode()                                  # warm-up: kernels chosen, the cache's tensors in place
            plain = [timed(decode, device)[0] for _ in range(repeats)]
            graph = cuda_graph(decode, device)
            graph.replay()
            graph_s = [cuda_seconds(graph.replay, device) for _ in range(repeats)]
    except (RuntimeError, TypeError, ValueError) as error:   # capture refused (a host sync), out of memory, or
        # a transformers whose static cache takes other arguments: a measurement lost, not the run
        raise MeasurementSkipped(f"the decode step could not be captured in a CUDA graph: "
                                 f"{type(error).__name__}: {str(error).splitlines()[0][:200]}") from error
    return GraphedDecode(batch, prompt_len, plain, graph_s)
