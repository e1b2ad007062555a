"""Calibration block by block: what each decoder block of a model receives, and what its linear layers see.

GPTQ and AWQ quantize a model one decoder block at a time, each block calibrated on what the
blocks before it, already quantized, hand it (as in both papers).  Only the first block's inputs
come from running the model on the calibration tokens; once a block is quantized, its outputs
are the next block's inputs.  Inside a block, one pass of those inputs gives every linear layer's
activation statistics (:class:`~servebook.gptq.HessianAccumulator`).
"""

from __future__ import annotations

import torch
from torch import nn

from .gptq import HessianAccumulator

__all__ = ["decoder_blocks", "block_inputs", "run_block", "input_statistics", "for_each_block"]


def decoder_blocks(model: nn.Module) -> nn.ModuleList:
    """The model's stack of transformer blocks: the longest ModuleList whose entries hold linear layers."""
    candidates = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m)
                  and all(any(isinstance(x, nn.Linear) for x in block.modules()) for block in m)]
    if not candidates:
        raise ValueError("gptq and awq work block by block, and the model has no nn.ModuleList of blocks "
                         "holding linear layers")
    return max(candidates, key=len)


def _name_of(model: nn.Module, module: nn.Module) -> str:
    return next(name for name, m in model.named_modules() if m is module)


class _StopForward(Exception):
    pass


def block_inputs(model, first_block, calibration, batch_size):
    """The hidden states (and keyword arguments) the first block receives, one entry per calibration batch."""
    captured = []

    def grab(module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        captured.append((hidden.detach(), dict(kwargs)))
        raise _StopForward

    device = next(model.parameters()).device
    handle = first_block.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for chunk in calibration.split(batch_size):
            try:
                model(input_ids=chunk.to(device), use_cache=False)
            except _StopForward:
                pass
    finally:
        handle.remove()
    return captured


def run_block(block, hidden, kwargs):
    out = block(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def input_statistics(block, inside, inputs):
    """One pass of the calibration batches through ``block``: activation statistics per layer, and which
    layers read the same input tensor (q, k and v do)."""
    stats = {name: HessianAccumulator(lin.in_features, device=lin.weight.device) for name, lin in inside.items()}
    first_inputs: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(module, args, output):
            stats[name].add(args[0])
            first_inputs.setdefault(name, args[0])
        return record

    handles = [lin.register_forward_hook(hook(name)) for name, lin in inside.items()]
    try:
        for hidden, kwargs in inputs:
            run_block(block, hidden, kwargs)
    finally:
        for handle in handles:
            handle.remove()
    groups: list[list[str]] = []
    for name in inside:
        for group in groups:
            if first_inputs[group[0]] is first_inputs[name]:
                group.append(name)
                break
        else:
            groups.append([name])
    return stats, groups


def for_each_block(model: nn.Module, layers: dict[str, nn.Linear], calibration: torch.Tensor, batch_size: int,
                   quantize_block) -> None:
    """Call ``quantize_block(block, prefix, inside, inputs)`` on each decoder block in turn.

    ``inside``: the block's layers among ``layers``, by their names inside the block (``"mlp.up_proj"``);
    ``prefix``: the block's name in ``model``; ``inputs``: what the block receives, computed by the
    blocks before it as ``quantize_block`` left them (quantized), as GPTQ's reference code does. AWQ's
    reference code (``run_awq`` in llm-awq) instead computes each block's output before it scales or
    quantizes the block; :func:`servebook.qmodel.quantize_model` uses this one loop for both.
    """
    blocks = decoder_blocks(model)
    inputs = block_inputs(model, blocks[0], calibration, batch_size)
    for block in blocks:
        prefix = _name_of(model, block)
        inside = {name[len(prefix) + 1:]: lin for name, lin in layers.items() if name.startswith(prefix + ".")}
        quantize_block(block, prefix, inside, inputs)
        inputs = [(run_block(block, hidden, kwargs), kwargs) for hidden, kwargs in inputs]
