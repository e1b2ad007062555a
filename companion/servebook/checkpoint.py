"""Checkpoints that leave the book: a model quantized by servebook, saved in the compressed-tensors format.

vLLM and transformers load a directory whose ``config.json`` carries a ``quantization_config``
with ``"quant_method": "compressed-tensors"`` and whose safetensors hold, for each quantized
linear layer ``name``:

- INT4 (``"format": "pack-quantized"``): ``name.weight_packed`` (int32, out x in/8: eight 4-bit
  codes per word, :mod:`servebook.quant.packing`), ``name.weight_scale`` (FP16, out x groups),
  ``name.weight_shape`` (int32 [out, in]) and, for the affine mapping, ``name.weight_zero_point``
  (packed the same way along the output dimension, out/8 x groups);
- INT8 (``"int-quantized"``): ``name.weight`` as int8 codes, ``name.weight_scale``, and
  ``name.weight_zero_point`` (int8) for the affine mapping;
- FP8 (``"float-quantized"``): ``name.weight`` as ``float8_e4m3fn``, a float32 scale per output
  channel, and activations quantized on the fly per token (W8A8-FP8, ``input_activations``).

compressed-tensors' codes are *signed*: ``-2^(b-1) .. 2^(b-1) - 1`` with ``w = s (q - z)``.
:class:`~servebook.qmodel.QuantizedLinear` stores every code *unsigned*, ``0 .. 2^b - 1`` (its
affine codes as they are, its symmetric ones offset by ``2^(b-1)``), so a signed code is the stored
one less ``2^(b-1)``, for the zero point too, which leaves ``q - z``, and every weight, unchanged.
INT8 weights and zero points are written so.  For INT4 the shift undoes itself:
compressed-tensors' ``pack_to_int32`` adds ``2^(b-1)`` back before it packs, along the input
dimension, eight codes per word, the first in the lowest bits, which is the book's one packing
read as little-endian int32 words (:mod:`servebook.quant.packing`).  So ``weight_packed`` is
``qweight`` itself, viewed as int32; only the zero points are repacked, because compressed-tensors
packs them along the *output* dimension where ``qzeros`` runs along the groups of each row.

Serve the directory with ``vllm serve DIRECTORY`` (vLLM reads the scheme from ``config.json``; no
``--quantization`` flag is needed).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from . import quant
from .qmodel import QuantizedLinear
from .quant import Mapping

__all__ = ["save_compressed", "save_fp8", "load_decompressed", "pack_int32", "unpack_int32"]


def pack_int32(codes: torch.Tensor) -> torch.Tensor:
    """Unsigned 4-bit codes (rows x n) as int32 words (rows x n/8): :func:`servebook.quant.pack_int4`'s
    bytes read as little-endian int32, the first code in the lowest bits (compressed-tensors' layout)."""
    if codes.shape[-1] % 8:
        raise ValueError(f"the packed dimension must be a multiple of 8, got {codes.shape[-1]}")
    return _words(quant.pack_int4(codes.to(torch.uint8)))


def _words(packed: torch.Tensor) -> torch.Tensor:
    """Bytes of packed INT4 codes (rows x n/2, uint8) read as int32 words (rows x n/8), no copy."""
    rows = packed.shape[:-1]
    # a 1-d view, since torch refuses to view a (1 x n) tensor whose row stride is not a multiple of 4;
    # torch reads the bytes in the machine's order: little-endian
    return packed.contiguous().reshape(-1).view(torch.int32).reshape(*rows, -1)


def unpack_int32(words: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of :func:`pack_int32`: ``n`` unsigned codes per row, as uint8."""
    if words.dtype != torch.int32:
        raise TypeError(f"words must be an int32 tensor, got {words.dtype}")
    return quant.unpack_int4(words.contiguous().view(torch.uint8), n)


def _strategy(layer: QuantizedLinear) -> dict:
    if layer.granularity == "group":
        return {"strategy": "group", "group_size": layer.group_size}
    return {"strategy": layer.granularity, "group_size": None}


def _scale_2d(layer: QuantizedLinear) -> torch.Tensor:
    scale = layer.scales
    if layer.granularity == "channel":
        return scale.reshape(-1, 1)
    return scale.reshape(1) if layer.granularity == "tensor" else scale


def _layer_tensors(name: str, layer: QuantizedLinear) -> dict[str, torch.Tensor]:
    """The compressed-tensors entries of one :class:`QuantizedLinear` (the module docstring says how
    its stored codes become compressed-tensors' signed ones)."""
    offset = 2 ** (layer.bits - 1)
    scale = _scale_2d(layer)
    out = {f"{name}.weight_scale": scale.clone()}
    if layer.bits == 4:
        if layer.in_features % 8:
            raise ValueError(f"layer {name}: compressed-tensors packs 8 INT4 codes per int32 word, so "
                             f"in_features must be a multiple of 8, got {layer.in_features}")
        out[f"{name}.weight_packed"] = _words(layer.qweight)
        out[f"{name}.weight_shape"] = torch.tensor([layer.out_features, layer.in_features], dtype=torch.int32)
    else:
        out[f"{name}.weight"] = (layer.qweight.to(torch.int16) - offset).to(torch.int8)
    if layer.mapping is Mapping.ASYMMETRIC:
        zero = layer.qparams().zero_point.to(torch.int32).reshape(scale.shape)   # unsigned, as stored
        if layer.bits == 4 and layer.granularity != "tensor":   # packed along the output dimension
            out[f"{name}.weight_zero_point"] = pack_int32(zero.T.contiguous()).T.contiguous()
        else:
            out[f"{name}.weight_zero_point"] = (zero - offset).to(torch.int8)
    return out


def _plain_state(model: nn.Module, quantized: set[str]) -> dict[str, torch.Tensor]:
    """Every tensor that is not part of a quantized layer; a tied output embedding is saved once."""
    state = {}
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    for key, value in model.state_dict().items():
        module = key.rpartition(".")[0]
        if module in quantized or (tied and key == "lm_head.weight"):
            continue
        state[key] = value.detach().contiguous()
    return state


def _write(model: nn.Module, directory, state: dict, quantization_config: dict, tokenizer=None) -> Path:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("_name_or_path", None)  # the folder the weights were read from: of no use elsewhere, never the same
    config["quantization_config"] = quantization_config
    dtypes = {v.dtype for k, v in state.items() if v.is_floating_point() and not k.endswith("weight_scale")}
    config["dtype"] = str(dtypes.pop()).removeprefix("torch.") if len(dtypes) == 1 else config.get("dtype")
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return directory


def _ignored(model: nn.Module, quantized: set[str]) -> list[str]:
    return sorted(name for name, m in model.named_modules() if isinstance(m, nn.Linear) and name not in quantized)


def save_compressed(model: nn.Module, directory, tokenizer=None) -> Path:
    """Save a model whose linear layers :func:`servebook.qmodel.quantize_model` replaced (RTN, GPTQ or
    AWQ; 4 or 8 bits, one scheme for all layers) as a compressed-tensors checkpoint in ``directory``."""
    layers = {name: m for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    if not layers:
        raise ValueError("model has no QuantizedLinear layers: quantize it with qmodel.quantize_model first")
    schemes = {(m.bits, m.mapping, m.granularity, m.group_size) for m in layers.values()}
    if len(schemes) != 1:
        raise ValueError(f"every quantized layer must share one scheme to be saved as one config group, "
                         f"found {len(schemes)}")
    first = next(iter(layers.values()))
    state = _plain_state(model, set(layers))
    for name, layer in layers.items():
        state.update(_layer_tensors(name, layer))
    weights = {"num_bits": first.bits, "type": "int", "symmetric": first.mapping is Mapping.SYMMETRIC,
               "dynamic": False, "observer": "minmax", "actorder": None, **_strategy(first)}
    config = _quantization_config("pack-quantized" if first.bits == 4 else "int-quantized", weights, None,
                                  _ignored(model, set(layers)))
    return _write(model, directory, state, config, tokenizer)


def save_fp8(model: nn.Module, directory, tokenizer=None) -> Path:
    """Quantize a float model's linear layers to FP8 E4M3 (a scale per output channel, activations per
    token on the fly: W8A8-FP8, vLLM's ``FP8_DYNAMIC``) and save it as a compressed-tensors checkpoint."""
    from .qmodel import linear_layers

    targets = linear_layers(model)
    state = _plain_state(model, set(targets))
    for name, linear in targets.items():
        weight = linear.weight.detach().float()
        scale = quant.choose_fp8_scale(weight, axis=0)
        state[f"{name}.weight"] = quant.quantize_fp8(weight, scale)
        state[f"{name}.weight_scale"] = scale.contiguous()
        if linear.bias is not None:
            state[f"{name}.bias"] = linear.bias.detach().contiguous()
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": "channel",
               "observer": "minmax", "group_size": None}
    activations = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True, "strategy": "token",
                   "observer": None, "group_size": None}
    config = _quantization_config("float-quantized", weights, activations, _ignored(model, set(targets)))
    return _write(model, directory, state, config, tokenizer)


def _quantization_config(fmt: str, weights: dict, activations: dict | None, ignore: list[str]) -> dict:
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": activations, "output_activations": None}},
            "ignore": ignore, "kv_cache_scheme": None}


def load_decompressed(directory):
    """The float model a checkpoint in ``directory`` describes, each quantized layer's weight rebuilt by
    compressed-tensors' own decompressor for the checkpoint's format (on the CPU, in FP32)."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = Path(directory)
    config = json.loads((directory / "config.json").read_text())
    qconfig = config.get("quantization_config") or {}
    if qconfig.get("quant_method") != "compressed-tensors":
        raise ValueError(f"{directory} holds no compressed-tensors checkpoint (quantization_config.quant_method)")
    group = qconfig["config_groups"]["group_0"]
    scheme = QuantizationScheme(**group)
    compressor = BaseCompressor.get_value_from_registry(qconfig["format"])
    tensors = load_file(directory / "model.safetensors")
    hf_config = AutoConfig.from_pretrained(directory)
    hf_config.quantization_config = None
    model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    layers = {key.rpartition(".")[0] for key in tensors if key.endswith(".weight_scale")}
    plain = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()
             if k.rpartition(".")[0] not in layers}
    for name in layers:
        local = {k.rpartition(".")[2]: v for k, v in tensors.items() if k.rpartition(".")[0] == name}
        plain[f"{name}.weight"] = compressor.decompress(local, scheme)["weight"].float()
        if "bias" in local:
            plain[f"{name}.bias"] = local["bias"].float()
    missing, unexpected = model.load_state_dict(plain, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not match the model: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.tie_weights()
    return model.eval()
