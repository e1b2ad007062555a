"""Predictions beside the measurements: KV bytes from servebook.memory, step times from servebook.roofline."""

from __future__ import annotations

import sys
from typing import Any

from .. import checks, kernels, memory, roofline
from .device import Device
from .load import QUANT_BITS, QUANT_VARIANTS, UNFUSED_VARIANT, LabModel
from .measure import Generation
from .results import measurement_row


def qmodel_scheme(variant: str, group_size: int) -> roofline.Scheme:
    """The roofline scheme of servebook.qmodel's weight-only ``variant`` (``"w8a16"``, ``"w4a16"``).

    qmodel dequantizes each weight once per forward pass, whatever the number
    of tokens (``dequant_tile_tokens`` larger than any step): a fused kernel's
    per-tile dequantization (roofline's W4A16) would charge more work than
    qmodel does, and the bound would no longer be a lower bound.
    """
    checks.choice("variant", variant, QUANT_VARIANTS)
    return roofline.Scheme(variant.upper(), f"int{QUANT_BITS[variant]}", "fp16",
                           group_size=checks.group_size(group_size, allow_none=False),
                           dequant_flops_per_weight=2, dequant_tile_tokens=sys.maxsize)


def fused_scheme(group_size: int) -> roofline.Scheme:
    """The roofline scheme of servebook.kernels' fused W4A16 kernel: a weight is dequantized once per output
    tile, so once per ``block_m`` tokens of a prefill tile (a decode step's tokens fit in one tile)."""
    tile = kernels.choose_tiles(4096, 4096, 4096, checks.group_size(group_size, allow_none=False)).block_m
    return roofline.Scheme("W4A16", "int4", "fp16", group_size=group_size, dequant_flops_per_weight=2,
                           dequant_tile_tokens=tile)


def _roofline_scheme(model: LabModel) -> roofline.Scheme:
    """The roofline scheme of a variant: 16-bit weights, the fused W4A16 kernel, or servebook.qmodel's
    dequantize-then-matmul."""
    if model.variant in ("fp16", "bf16"):
        return roofline.scheme("W16A16")
    if model.kernel == "fused":
        return fused_scheme(model.group_size)
    return qmodel_scheme("w4a16" if model.variant == UNFUSED_VARIANT else model.variant, model.group_size)


def time_predictions(model: LabModel, device: Device, batch: int, prompt_len: int, last_logits_only: bool = False
                     ) -> tuple[roofline.Bound | None, roofline.Bound | None, str]:
    """Roofline lower bounds of the prefill step and of a decode step, or ``None`` with the reason.

    ``last_logits_only``: the prefill computes logits for the last token of
    each sequence only (what :func:`~servebook.lab.measure_generation` asks
    for, with ``logits_to_keep=1``), so its bound leaves out the LM head for
    the other tokens: counting that work, which never runs (over a quarter of
    a Qwen2.5-0.5B prefill), could lift the bound above the measured time.
    """
    logits = "last" if checks.flag("last_logits_only", last_logits_only) else "all"
    if device.roofline_gpu is None:
        return None, None, f"no prediction: {device.name} is not in servebook.roofline's GPU table"
    if model.variant == "fp32":
        return None, None, "no prediction: servebook.roofline models 16-bit and quantized weights, not FP32"
    if model.spec.n_params is None:
        return None, None, "no prediction: the model's parameter count is unknown"
    recipe = _roofline_scheme(model)
    prefill = roofline.bound(roofline.prefill_step(model.spec, batch, prompt_len, recipe, model.dtype,
                                                   logits=logits), device.roofline_gpu)
    decode = roofline.bound(roofline.decode_step(model.spec, batch, prompt_len, recipe, model.dtype),
                            device.roofline_gpu)
    return prefill, decode, f"servebook.roofline lower bound on {device.roofline_gpu}"


def generation_rows(model: LabModel, device: Device, g: Generation) -> list[dict[str, Any]]:
    """Rows of one measurement: KV bytes, times and tokens/s, each beside its prediction."""
    spec, dtype, b, s, n = model.spec, model.dtype, g.batch, g.prompt_len, g.decode_steps
    kv_basis = f"servebook.memory.kv_cache_bytes(S, B={b}, {dtype})"
    kv_prefill = memory.kv_cache_bytes(spec, s, b, dtype)
    kv_decode = memory.kv_cache_bytes(spec, s + n, b, dtype)
    rows = [measurement_row(model, "kv_bytes", g.kv_bytes_after_prefill, kv_prefill, kv_basis, b, s),
            measurement_row(model, "kv_bytes", g.kv_bytes_after_decode, kv_decode, kv_basis, b, s + n)]
    prefill, decode, time_basis = time_predictions(model, device, b, s, last_logits_only=True)
    rate_basis = time_basis.replace("lower", "upper")
    rows += [
        measurement_row(model, "prefill_s", g.prefill_median, prefill and prefill.time, time_basis, b, s),
        measurement_row(model, "decode_s", g.decode_median, decode and decode.time, time_basis, b, s),
        measurement_row(model, "prefill_tokens_per_s", b * s / g.prefill_median, prefill and prefill.tokens_per_s,
                        rate_basis, b, s),
        measurement_row(model, "decode_tokens_per_s", b / g.decode_median, decode and decode.tokens_per_s,
                        rate_basis, b, s),
    ]
    if g.peak_bytes is not None:
        rows.append(measurement_row(model, "peak_bytes", g.peak_bytes, kv_decode,
                                    "peak allocated above the resident weights vs the predicted KV cache "
                                    "(the excess is activations and logits)", b, s + n))
    return rows
