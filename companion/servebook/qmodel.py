"""Quantizing a torch model: its ``nn.Linear`` layers become W4A16 / W8A16 :class:`QuantizedLinear` layers.

A :class:`QuantizedLinear` stores what a weight-only checkpoint stores: integer
codes (two INT4 codes per byte, or one INT8 code), and per group an FP16 scale
and, for the affine mapping, a zero point as narrow as the codes.  Its forward
dequantizes the weight and multiplies in the activations' precision
(``W4A16``: 4-bit weights, 16-bit activations), so it saves memory, not
arithmetic.

:func:`quantize_model` chooses the codes with one of three methods:

- ``"rtn"``: round to nearest, with one grid per tensor, per output channel, or per
  group of ``group_size`` input features (:mod:`servebook.quant`);
- ``"gptq"``: :mod:`servebook.gptq`, block by block, each block seeing the output of
  the already quantized blocks before it, as in the paper;
- ``"awq"``: :mod:`servebook.awq`, block by block likewise, with ``1/s`` folded into
  the RMSNorm or linear layer that feeds each group of layers (Llama-style blocks);
  where there is no such place (the output projection of a grouped-query attention
  block), the layer is rounded to nearest unscaled, as the AWQ reference code does.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial

import torch
from torch import nn

from . import kernels, memory, quant
from .awq import search_scale
from .calibration import for_each_block, input_statistics
from .checks import choice, flag, member, names, whole
from .checks import group_size as check_group_size
from .gptq import gptq_quantize, one_thread_on_cpu
from .quant import Mapping, QParams, Rounding
from .units import DTYPE_BYTES, ceil_div

__all__ = ["METHODS", "PACKABLE_BITS", "QuantizedLinear", "QuantizationReport", "rtn_quantize",
           "quantize_model", "linear_layers", "formula_bytes", "bits_per_weight", "SIMULATED_BITS"]

METHODS = ("rtn", "gptq", "awq")
PACKABLE_BITS = (4, 8)
SIMULATED_BITS = range(2, 9)   # pack=False: any width the methods handle, weights kept as dequantized floats

# Where 1/s goes for each group of Llama-family layers that read one input (names inside a decoder block).
LLAMA_FOLDS = {
    ("self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj"): "input_layernorm",
    ("mlp.gate_proj", "mlp.up_proj"): "post_attention_layernorm",
    ("mlp.down_proj",): "mlp.up_proj",
    ("self_attn.o_proj",): "self_attn.v_proj",
}


def _packable_bits(bits) -> int:
    """A width :class:`QuantizedLinear` packs (4 or 8 bits)."""
    return choice("bits", whole("bits", bits), PACKABLE_BITS)


def rtn_quantize(weight: torch.Tensor, bits: int = 4, group_size: int | str = 128, *,
                 mapping: Mapping | str = Mapping.ASYMMETRIC,
                 rounding: Rounding | str = Rounding.HALF_UP) -> tuple[torch.Tensor, QParams]:
    """Round-to-nearest codes and grid of a (out x in) weight: per ``"tensor"``, per ``"channel"`` or per group.

    The grid is :func:`servebook.quant.weight_qparams`, the one GPTQ and AWQ use (its range contains 0).
    """
    kind, g = quant.weight_granularity(group_size, allow_none=False)
    qparams = quant.weight_qparams(weight, bits, g or kind, mapping, rounding)
    return quant.quantize(weight, qparams, rounding), qparams


class QuantizedLinear(nn.Module):
    """A linear layer with packed integer weights and FP16 scales: dequantize, then multiply.

    Buffers: ``qweight`` (uint8: two 4-bit codes per byte, low nibble first; or one 8-bit code),
    ``scales`` (FP16: shape ``()`` per tensor, ``(out,)`` per channel, ``(out, in // g)`` per group)
    and, for the affine mapping, ``qzeros`` (zero points packed like the codes, flattened).
    Scales are kept in FP16, as GPTQ and AWQ checkpoints keep them.  A scale in FP16's normal
    range (2^-14 up to 65504) is stored within 2^-11 of its value, and so is every dequantized
    weight; a smaller scale is an FP16 subnormal, stored within 2^-25 in absolute terms (a
    relative error that grows as the scale shrinks); a scale above 65504 does not fit and is
    refused when the layer is built (:func:`check_fp16_scales`).
    """

    def __init__(self, in_features: int, out_features: int, bits: int, mapping: Mapping, granularity: str,
                 group_size: int | None = None, bias: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bits, self.mapping = _packable_bits(bits), mapping
        self.granularity, self.group_size = granularity, group_size
        self.register_buffer("qweight", torch.empty(0, dtype=torch.uint8))
        self.register_buffer("scales", torch.empty(0, dtype=torch.float16))
        self.register_buffer("qzeros", None)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_codes(cls, linear: nn.Linear, codes: torch.Tensor, qparams: QParams, *,
                   name: str | None = None) -> QuantizedLinear:
        """Pack ``codes`` (out x in) on the grid ``qparams`` (quant's format) into a layer replacing ``linear``.

        ``name``, the layer's name in its model, is what a refused scale's message names."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        if not isinstance(qparams, QParams):
            raise TypeError(f"qparams must be a QParams, got {type(qparams).__name__}")
        shape = (linear.out_features, linear.in_features)
        if tuple(codes.shape) != shape:
            raise ValueError(f"codes must have the weight's shape {shape}, got {tuple(codes.shape)}")
        bits = _packable_bits(qparams.bits)
        if bits == 4 and linear.in_features % 2:
            raise ValueError(f"in_features must be even to pack two INT4 codes per byte, got {linear.in_features}")
        if qparams.group_size is not None:
            if qparams.axis not in (1, -1):
                raise ValueError("group-wise qparams must run along the input axis (axis=-1)")
            granularity = "group"
        elif qparams.axis is not None:
            if qparams.axis not in (0, -2):
                raise ValueError("per-channel qparams must have one grid per output row (axis=0)")
            granularity = "channel"
        else:
            granularity = "tensor"
        layer = cls(linear.in_features, linear.out_features, bits, qparams.mapping, granularity,
                    qparams.group_size, linear.bias)
        device = linear.weight.device
        layer.qweight = cls._pack(codes.to(device), bits, qparams.mapping)
        layer.scales = check_fp16_scales(torch.as_tensor(qparams.scale, device=device), name).to(torch.float16)
        if qparams.mapping is Mapping.ASYMMETRIC:
            zeros = torch.as_tensor(qparams.zero_point, device=device).reshape(-1)
            layer.qzeros = cls._pack(zeros, bits, Mapping.ASYMMETRIC)
        return layer

    @staticmethod
    def _pack(codes: torch.Tensor, bits: int, mapping: Mapping) -> torch.Tensor:
        offset = 2 ** (bits - 1) if mapping is Mapping.SYMMETRIC else 0   # signed codes stored offset, unsigned
        codes = codes.to(torch.int32) + offset
        if bits == 4:
            return quant.pack_int4(codes.to(torch.uint8))
        return codes.to(torch.uint8)

    def _unpack(self, packed: torch.Tensor, n: int) -> torch.Tensor:
        offset = 2 ** (self.bits - 1) if self.mapping is Mapping.SYMMETRIC else 0
        codes = quant.unpack_int4(packed, n) if self.bits == 4 else packed
        return codes.to(torch.int32) - offset if offset else codes

    def codes(self) -> torch.Tensor:
        """The integer codes, (out x in)."""
        return self._unpack(self.qweight, self.in_features)

    def qparams(self) -> QParams:
        """The grid, in :mod:`servebook.quant`'s format (FP32 copies of the stored FP16 scales)."""
        scale = self.scales.float()
        if self.qzeros is None:
            zero = torch.zeros(scale.shape, dtype=torch.int32, device=scale.device)
        else:
            zero = self._unpack(self.qzeros, scale.numel()).to(torch.int32).reshape(scale.shape)
        axis = {"tensor": None, "channel": 0, "group": 1}[self.granularity]
        return QParams(scale, zero, self.bits, self.mapping, axis=axis, group_size=self.group_size)

    def dequantized_weight(self, dtype=torch.float32) -> torch.Tensor:
        """``W_hat = s * (q - z)``, (out x in), by :func:`servebook.quant.dequantize`."""
        return quant.dequantize(self.codes(), self.qparams(), dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if kernels.fused_applies(self, x):   # CUDA and Triton: W_hat made in registers, never in memory
            return kernels.w4a16_linear(self, x)
        return nn.functional.linear(x, self.dequantized_weight(x.dtype), self.bias)

    def weight_nbytes(self) -> int:
        """Bytes of the stored weight: codes + scales + zero points (the bias is not counted)."""
        zeros = 0 if self.qzeros is None else self.qzeros.numel() * self.qzeros.element_size()
        return self.qweight.numel() * self.qweight.element_size() + self.scales.numel() * 2 + zeros

    def extra_repr(self) -> str:
        grid = f"g{self.group_size}" if self.group_size else f"per {self.granularity}"
        return (f"in_features={self.in_features}, out_features={self.out_features}, W{self.bits}A16, {grid}, "
                f"{self.mapping.name.lower()}")


FP16_MAX = 65504.0


def check_fp16_scales(scale: torch.Tensor, layer: str | None = None) -> torch.Tensor:
    """``scale`` unchanged if every value fits an FP16 scale, else a ValueError naming the layer."""
    largest = float(scale.abs().max()) if scale.numel() else 0.0
    if largest > FP16_MAX:
        where = f" of layer {layer}" if layer else ""
        raise ValueError(f"weights{where} need a scale of {largest:.4g}, above FP16's largest number "
                         f"{FP16_MAX:g}: the stored FP16 scale would be inf; rescale the "
                         "layer or keep it in float (skip=[...])")
    return scale


def formula_bytes(out_features: int, in_features: int, bits: int, group_size: int | str,
                  mapping: Mapping | str = Mapping.ASYMMETRIC) -> int:
    """What :func:`servebook.memory.weight_bytes` says one quantized (out x in) weight costs, FP16 scales.

    Per channel is one group per row (``g = in_features``); per tensor, one group in all.
    Widths other than 4 and 8 bits (simulated, ``pack=False``) cost ``bits / 8`` bytes per code:
    what tightly packed codes would take.
    """
    n = whole("out_features", out_features) * whole("in_features", in_features)
    bits = whole("bits", bits)
    zero_points = member("mapping", mapping, Mapping) is Mapping.ASYMMETRIC
    kind, g = quant.weight_granularity(group_size, allow_none=False)
    g = {"group": g, "channel": whole("in_features", in_features), "tensor": n}[kind]
    return _quantized_bytes(n, bits, g, zero_points)


# Scale widths memory.weight_bytes can name, by their bits.
_SCALE_DTYPES = {8: "fp8", 16: "fp16", 32: "fp32"}


def _quantized_bytes(n_params: int, bits: int, group_size: int, zero_points: bool, scale_bits: int = 16) -> int:
    """Bytes of ``n_params`` codes of ``bits`` bits with a scale (and a zero point of ``bits``) per group.

    :func:`servebook.memory.weight_bytes` where its dtypes name the widths (int4, int8; fp16 scales);
    for the others (3 bits, say) the same formula, exactly, in one place.
    """
    code_dtype, scale_dtype = f"int{bits}", _SCALE_DTYPES.get(scale_bits)
    if code_dtype in DTYPE_BYTES and scale_dtype is not None:
        return memory.weight_bytes(n_params, code_dtype, group_size=group_size, scale_dtype=scale_dtype,
                                   zero_points=zero_points)
    groups = ceil_div(n_params, group_size)
    return ceil_div(n_params * bits + groups * (scale_bits + (bits if zero_points else 0)), 8)


@dataclass
class QuantizationReport:
    """What :func:`quantize_model` did: the model, its quantized layers, bytes before and after, time."""

    model: nn.Module
    method: str
    bits: int
    group_size: int | str
    mapping: Mapping
    layers: list[str]
    n_params: int                  # weights in the quantized layers
    bytes_before: int              # those weights at the dtype they had
    bytes_after: int               # codes + scales + zero points
    seconds: float
    packed: bool = True            # False: simulated (weights kept as dequantized floats)
    layer_seconds: dict[str, float] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)   # GPTQ loss / AWQ alpha per layer

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.bytes_after / self.n_params

    def describe(self, timing: bool = True) -> str:
        """One line: method, grid, layers, bytes before and after, bits per weight (and seconds)."""
        grid = f"g{self.group_size}" if isinstance(self.group_size, int) else f"per {self.group_size}"
        simulated = "" if self.packed else " (simulated, weights kept as floats)"
        return (f"{self.method.upper()} W{self.bits} {grid}{simulated}: {len(self.layers)} linear layers, "
                f"{self.n_params:,} weights, {self.bytes_before:,} -> {self.bytes_after:,} bytes "
                f"({self.bits_per_weight:.3f} bits per weight)" + (f", {self.seconds:.1f} s" if timing else ""))


def linear_layers(model: nn.Module, skip=None) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` layers of ``model`` by name, without the output embedding and the names in ``skip``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    every = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    skip = set(() if skip is None else names("skip", skip, every))
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name: module for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name not in skip and module is not output}


def quantize_model(model: nn.Module, method: str = "rtn", *, bits: int = 4, group_size: int | str = 128,
                   calibration: torch.Tensor | None = None, mapping: Mapping | str = Mapping.ASYMMETRIC,
                   act_order: bool = False, damp: float = 0.01, block_size: int | None = None,
                   grid: int = 20, batch_size: int = 16, skip=None, inplace: bool = False, pack: bool = True,
                   rounding: Rounding | str = Rounding.HALF_UP) -> QuantizationReport:
    """Replace the linear layers of ``model`` by :class:`QuantizedLinear` layers; return a report.

    - ``method``: ``"rtn"``, ``"gptq"`` or ``"awq"``.
    - ``bits``: 4 (W4A16) or 8 (W8A16).
    - ``group_size``: an int (group-wise along the input features), ``"channel"`` (one grid per output
      row) or ``"tensor"`` (one grid per weight matrix; RTN only).
    - ``calibration``: token ids, (n_samples, seq_len), for GPTQ and AWQ; RTN takes none.
    - ``skip``: a list of names of linear layers to keep in float (each must name one); the output
      embedding (``lm_head``) always is.
    - ``pack=False`` simulates instead: each weight is replaced by its dequantized value in an
      ordinary ``nn.Linear`` (same numbers, no memory saved), which allows any width from 2 to 8 bits;
      ``bytes_after`` is then what tightly packed codes would take (:func:`formula_bytes`).

    The model is copied first unless ``inplace``.
    """
    method, bits, g, mapping = _checked_options(method, bits, group_size, mapping, pack)
    targets = _targets(model, skip, g)
    calibration = _check_calibration(method, calibration, model)
    rounding = member("rounding", rounding, Rounding)
    if not flag("inplace", inplace):
        model = copy.deepcopy(model)
        targets = linear_layers(model, skip)

    started = time.perf_counter()
    report = QuantizationReport(model, method, bits, group_size, mapping, [], 0, 0, 0, 0.0, packed=pack)
    options = dict(bits=bits, group_size=g, mapping=mapping, rounding=rounding)
    with torch.no_grad(), one_thread_on_cpu(next(model.parameters()).device):
        if method == "rtn":
            _quantize_rtn(model, targets, report, group_size, mapping, rounding)
        else:
            extra = dict(act_order=act_order, damp=damp, block_size=block_size) if method == "gptq" else dict(grid=grid)
            step = partial(_gptq_block if method == "gptq" else _awq_block, model, report, **options, **extra)
            for_each_block(model, targets, calibration, batch_size, step)
    report.seconds = time.perf_counter() - started
    return report


def _checked_options(method, bits, group_size, mapping, pack) -> tuple[str, int, int | None, Mapping]:
    """``quantize_model``'s method, bits, group size (None for a grid per channel or per tensor) and mapping."""
    method = choice("method", method, METHODS)
    if flag("pack", pack):
        bits = _packable_bits(bits)
    else:
        bits = whole("bits", bits, min(SIMULATED_BITS), max(SIMULATED_BITS))
    kind, g = quant.weight_granularity(group_size, allow_none=False)
    mapping = member("mapping", mapping, Mapping)
    if kind == "tensor" and method != "rtn":
        raise ValueError(f"group_size='tensor' is for method 'rtn' only; {method} needs 'channel' or an int")
    return method, bits, g, mapping


def _targets(model: nn.Module, skip, group_size: int | None) -> dict[str, nn.Linear]:
    """The linear layers to quantize; ``group_size`` must cut each one's input features into whole groups."""
    targets = linear_layers(model, skip)
    if not targets:
        raise ValueError("model has no nn.Linear layers to quantize (the output embedding is never quantized)")
    for name, linear in targets.items():
        try:
            check_group_size(group_size, linear.in_features)
        except ValueError as err:
            raise ValueError(f"{err}; layer {name} has in_features {linear.in_features}") from None
    return targets


def _quantize_rtn(model, targets, report, group_size, mapping, rounding) -> None:
    for name, linear in targets.items():
        tick = time.perf_counter()
        codes, qparams = rtn_quantize(linear.weight.detach().float(), report.bits, group_size, mapping=mapping,
                                      rounding=rounding)
        _replace(model, name, linear, codes, qparams, report)
        report.layer_seconds[name] = time.perf_counter() - tick


def _replace(model: nn.Module, name: str, linear: nn.Linear, codes, qparams, report: QuantizationReport):
    report.layers.append(name)
    report.n_params += linear.weight.numel()
    report.bytes_before += linear.weight.numel() * linear.weight.element_size()
    if not report.packed:
        linear.weight.copy_(quant.dequantize(codes, qparams, dtype=torch.float32).to(linear.weight.dtype))
        report.bytes_after += formula_bytes(linear.out_features, linear.in_features, qparams.bits,
                                            report.group_size, qparams.mapping)
        return
    layer = QuantizedLinear.from_codes(linear, codes, qparams, name=name)
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, layer)
    report.bytes_after += layer.weight_nbytes()


def _check_calibration(method, calibration, model) -> torch.Tensor | None:
    """Token ids for GPTQ and AWQ (n_samples x seq_len, inside the vocabulary); none for RTN."""
    if method == "rtn":
        if calibration is not None:
            raise ValueError("method 'rtn' uses no calibration data; pass calibration=None")
        return None
    if calibration is None:
        raise ValueError("gptq and awq need calibration token ids, shape (n_samples, seq_len)")
    if not isinstance(calibration, torch.Tensor):
        raise TypeError(f"calibration must be a torch.Tensor of token ids, got {type(calibration).__name__}")
    if calibration.is_floating_point() or calibration.dtype == torch.bool:
        raise TypeError(f"calibration must hold integer token ids, got {calibration.dtype}")
    if calibration.ndim != 2 or calibration.shape[0] < 1 or calibration.shape[1] < 2:
        raise ValueError(f"calibration must have shape (n_samples, seq_len) with seq_len >= 2, "
                         f"got {tuple(calibration.shape)}")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if int(calibration.min()) < 0 or (vocab is not None and int(calibration.max()) >= vocab):
        raise ValueError(f"calibration token ids must lie in [0, {vocab}), got "
                         f"[{int(calibration.min())}, {int(calibration.max())}]")
    return calibration.long()


def _gptq_block(model, report, block, prefix, inside, inputs, *, bits, group_size, mapping, rounding,
                act_order, damp, block_size):
    stats, _ = input_statistics(block, inside, inputs)
    for name, linear in inside.items():
        tick = time.perf_counter()
        result = gptq_quantize(linear.weight.detach(), stats[name].H, bits, group_size, mapping=mapping,
                               block_size=block_size, damp=damp, act_order=act_order, rounding=rounding)
        _replace(model, f"{prefix}.{name}", linear, result.codes, result.qparams, report)
        report.layer_seconds[f"{prefix}.{name}"] = time.perf_counter() - tick
        report.details[f"{prefix}.{name}"] = {"gptq_loss": result.loss}


def _awq_block(model, report, block, prefix, inside, inputs, *, bits, group_size, mapping, rounding, grid):
    stats, groups = input_statistics(block, inside, inputs)
    scales = []
    for group in groups:
        tick = time.perf_counter()
        previous = _fold_target(block, inside, group)
        if previous is None:
            alpha, s = None, None     # nowhere to put 1/s: round to nearest, unscaled
        else:
            gram = stats[group[0]].H / 2
            s, alpha, _ = search_scale([inside[n].weight.detach() for n in group], stats[group[0]].mean_abs,
                                       gram, bits, group_size, mapping=mapping, grid=grid, rounding=rounding)
            scales.append((previous, group, s))
        for name in group:
            report.details[f"{prefix}.{name}"] = {"awq_alpha": alpha}
            report.layer_seconds[f"{prefix}.{name}"] = (time.perf_counter() - tick) / len(group)
    for previous, group, s in scales:
        _fold(previous, s)
        for name in group:
            inside[name].weight.mul_(s.to(inside[name].weight.dtype))
    for name, linear in inside.items():
        tick = time.perf_counter()
        codes, qparams = rtn_quantize(linear.weight.detach().float(), bits, group_size or "channel",
                                      mapping=mapping, rounding=rounding)
        _replace(model, f"{prefix}.{name}", linear, codes, qparams, report)
        report.layer_seconds[f"{prefix}.{name}"] += time.perf_counter() - tick


def _fold_target(block, inside, group):
    """The module whose output feeds ``group`` and can absorb ``1/s``, or None."""
    name = LLAMA_FOLDS.get(tuple(sorted(group)))
    if name is None:
        return None
    try:
        previous = block.get_submodule(name)
    except AttributeError:
        return None
    in_features = inside[group[0]].in_features
    if isinstance(previous, nn.Linear):
        return previous if previous.out_features == in_features else None
    weight = getattr(previous, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.shape == (in_features,):
        return previous
    return None


def _fold(previous: nn.Module, s: torch.Tensor) -> None:
    """Divide the output of ``previous`` by ``s``: its weight rows (linear) or its per-channel gain (norm)."""
    s = s.to(previous.weight.device)
    if isinstance(previous, nn.Linear):
        previous.weight.div_(s.view(-1, 1).to(previous.weight.dtype))
    else:
        previous.weight.div_(s.to(previous.weight.dtype))
    bias = getattr(previous, "bias", None)
    if isinstance(bias, torch.Tensor):
        bias.div_(s.to(bias.dtype))


def bits_per_weight(bits: int, group_size: int, zero_points: bool = True, scale_bits: int = 16) -> float:
    """Average stored bits per weight with one scale (and zero point) per ``group_size`` weights:
    ``bits + (scale_bits + bits) / group_size``, counted in bytes as :func:`formula_bytes` counts them."""
    bits, group_size = whole("bits", bits), check_group_size(group_size, allow_none=False)
    scale_bits = whole("scale_bits", scale_bits)
    zero_points = flag("zero_points", zero_points)
    n_params = 8 * group_size     # a whole number of bytes, so no rounding up
    return float(Fraction(8 * _quantized_bytes(n_params, bits, group_size, zero_points, scale_bits), n_params))

