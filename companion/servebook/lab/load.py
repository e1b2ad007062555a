"""Models to measure: a Hub model, the project's small trained model, a real shape with random weights,
and quantized variants of each, with the weight bytes servebook.memory predicts for them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from .. import memory, models
from ..checks import byte_count, choice, whole
from ..hub import reachable as hub_reachable
from ..models import CHUNKED, MLA, SLIDING, ModelSpec, MoE
from ..units import GiB
from .device import Device, MeasurementSkipped, cuda_allocated, cuda_growth, require_torch

DEFAULT_HUB_MODEL = "Qwen/Qwen2.5-0.5B"
FLOAT_VARIANTS = ("fp32", "fp16", "bf16")
QUANT_BITS = {"w8a16": 8, "w4a16": 4}  # weight-only: the codes' width; activations stay in the float dtype
QUANT_VARIANTS = tuple(QUANT_BITS)
# W4A16 measured again with servebook.kernels' fused kernel turned off, where it would run (CUDA, Triton).
UNFUSED_VARIANT = "w4a16-unfused"
VARIANTS = FLOAT_VARIANTS + QUANT_VARIANTS + (UNFUSED_VARIANT,)
# How a quantized variant multiplies: servebook.kernels' fused W4A16 kernel, or qmodel's dequantize-then-matmul.
KERNEL_PATHS = ("fused", "dequantize-matmul")
QUANT_METHODS = ("rtn", "gptq", "awq")  # servebook.qmodel.METHODS, named here so a config needs no torch


class ModelUnavailable(RuntimeError):
    """A model could not be loaded (offline, unknown name, missing files); the message says why."""


@dataclass
class LabModel:
    """A loaded model and everything the predictions need about it."""

    name: str                  # how rows name it: "tiny-llama", "llama-2-7b/8", "Qwen/Qwen2.5-0.5B"
    source: str                # "hub", "project" or "random"
    variant: str               # one of VARIANTS
    dtype: str                 # dtype of activations and of the KV cache ("fp32", "fp16", "bf16")
    spec: ModelSpec
    module: Any = field(repr=False)
    predicted_weight_bytes: int | None
    weight_basis: str
    tokenizer: Any = field(default=None, repr=False)
    heldout_text: str | None = field(default=None, repr=False)
    reduced_from: str | None = None
    group_size: int | None = None  # of the quantized variants
    note: str = ""
    load_seconds: float = 0.0
    allocated_bytes: int | None = None  # CUDA: what the allocator's count grew by while loading
    kernel: str | None = None  # quantized variants: one of KERNEL_PATHS

    def entry(self) -> dict[str, Any]:
        """This model as the results' ``models`` list records it."""
        spec = {k: getattr(self.spec, k) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim",
                                                    "vocab_size", "intermediate_size", "n_params",
                                                    "tied_embeddings")}
        return {"name": self.name, "source": self.source, "variant": self.variant, "dtype": self.dtype,
                "spec": spec, "reduced_from": self.reduced_from, "group_size": self.group_size,
                "note": self.note, "load_seconds": round(self.load_seconds, 3), "kernel": self.kernel}


def torch_dtype(dtype: str):
    """The torch dtype of ``"fp32"``, ``"fp16"`` or ``"bf16"``."""
    torch = require_torch()
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    return table[choice("dtype", dtype, FLOAT_VARIANTS)]


def _dtype_argument(dtype: str) -> dict[str, Any]:
    """``dtype`` as the keyword argument this transformers' loaders take it by."""
    from .. import smallmodel

    return {smallmodel.dtype_keyword(): torch_dtype(dtype)}


def _ensure_dtype(module, dtype: str):
    """Cast ``module`` if its weights are not in ``dtype``: a transformers that ignores the dtype argument
    would otherwise load FP32 and double every byte the lab measures."""
    wanted = torch_dtype(dtype)
    if next(module.parameters()).dtype != wanted:
        module.to(dtype=wanted)
    return module


def _not_a_llama(spec: ModelSpec) -> list[str]:
    """What of ``spec`` a transformers ``LlamaConfig`` cannot express (empty for a Llama-style shape)."""
    found = {
        "sliding-window or chunked layers": spec.local_kind is not None,
        "multi-head latent attention": spec.mla is not None,
        "a mixture of experts": spec.moe is not None,
        "keys and values of different widths": spec.v_head_dim != spec.head_dim,
        "an MLP without a gate": not spec.gated_mlp,
        "biases on q, k and v without one on the output, or the reverse": spec.biases.qkv != spec.biases.o,
        "LayerNorm": spec.norms.kind != "rms",
        "a norm count other than two per layer and a final one": (spec.norms.per_layer, spec.norms.final) != (2, True),
        "query and key norms": spec.norms.qk,
        "a learned position table": spec.learned_positions > 0,
    }
    return [what for what, present in found.items() if present]


def llama_config(spec: ModelSpec):
    """A transformers ``LlamaConfig`` with the shape of ``spec`` (a Llama-style decoder).

    A shape a Llama cannot have (a window, MLA, experts, ...) is refused with
    what it has, never built as a Llama that would be measured against the
    wrong formula.
    """
    from transformers import LlamaConfig

    unlike = _not_a_llama(spec)
    if unlike:
        raise ValueError(f"{spec.name}: a random-weight model is built as a transformers Llama, which cannot have "
                         f"{'; '.join(unlike)}: load this model from the Hub instead")
    if spec.vocab_size is None or spec.intermediate_size is None:
        raise ValueError(f"{spec.name}: a random-weight model needs vocab_size and intermediate_size "
                         "(a Llama-style spec)")
    return LlamaConfig(vocab_size=spec.vocab_size, hidden_size=spec.d_model,
                       intermediate_size=spec.intermediate_size, num_hidden_layers=spec.n_layers,
                       num_attention_heads=spec.n_heads, num_key_value_heads=spec.n_kv_heads,
                       head_dim=spec.head_dim, max_position_embeddings=spec.max_seq_len or 4096,
                       tie_word_embeddings=spec.tied_embeddings, attention_bias=spec.biases.qkv,
                       mlp_bias=spec.biases.mlp)


def _reduced_moe(moe: MoE | None, factor: int, n_layers: int) -> MoE | None:
    """The experts with their width divided: as many experts, the same top-k, dense layers that still exist."""
    if moe is None:
        return None
    return replace(moe, expert_size=max(1, moe.expert_size // factor),
                   shared_size=max(1, moe.shared_size // factor) if moe.n_shared else 0,
                   dense_layers=tuple(i for i in moe.dense_layers if i < n_layers))


def _reduced_mla(mla: MLA | None, factor: int) -> MLA | None:
    """The latent ranks divided; the rope and nope widths kept, as head_dim is."""
    if mla is None:
        return None
    return replace(mla, kv_rank=max(1, mla.kv_rank // factor),
                   q_rank=None if mla.q_rank is None else max(1, mla.q_rank // factor))


def reduced_spec(spec: ModelSpec | str, factor: int = 8) -> ModelSpec:
    """``spec`` with depth, width, MLP and vocabulary divided by ``factor``, keeping what each layer is.

    Kept: head_dim (and MLA's rope and nope widths), the GQA ratio, the layer
    pattern (the first layers of it, so an alternation stays one), the window
    or chunk in tokens, the norms, biases and tied embeddings; a mixture of
    experts keeps its experts and top-k, each expert narrower.  The memory and
    time formulas hold at any size, so a CPU checks them on a shape that runs
    in seconds; a GPU runs the real size.
    """
    spec = models.resolve(spec)
    factor = whole("factor", factor, 1)
    if factor == 1:
        return spec
    if spec.vocab_size is None or (spec.dense_mlp_layers and spec.intermediate_size is None):
        raise ValueError(f"{spec.name}: reducing needs vocab_size and (for dense MLP layers) intermediate_size")
    n_layers = max(1, spec.n_layers // factor)
    kinds = spec.layer_types[:n_layers]
    n_kv_heads = max(1, spec.n_kv_heads // factor)
    n_heads = n_kv_heads * spec.group_size  # each key/value head keeps its group of query heads
    reduced = replace(
        spec, name=f"{spec.name}/{factor}", n_layers=n_layers, d_model=n_heads * spec.head_dim, n_heads=n_heads,
        n_kv_heads=n_kv_heads, vocab_size=max(256, spec.vocab_size // factor), n_params=None,
        intermediate_size=None if spec.intermediate_size is None else max(1, spec.intermediate_size // factor),
        layer_types=kinds, sliding_window=spec.sliding_window if SLIDING in kinds else None,
        attention_chunk=spec.attention_chunk if CHUNKED in kinds else None,
        moe=_reduced_moe(spec.moe, factor, n_layers), mla=_reduced_mla(spec.mla, factor),
        source=f"{spec.name} divided by {factor}", display_name="",
        notes=f"{spec.name}'s shape with depth, width, MLP and vocabulary divided by {factor}; head_dim kept",
    )
    return replace(reduced, n_params=reduced.count_params())


def _weight_prediction(spec: ModelSpec, dtype: str) -> tuple[int | None, str]:
    if spec.n_params is None:
        return None, "no prediction: the model's parameter count is unknown"
    return (memory.weight_bytes(spec.n_params, dtype),
            f"servebook.memory.weight_bytes({spec.n_params:,} parameters, {dtype})")


def load_random(spec: ModelSpec | str, device: Device, dtype: str = "fp16", reduce: int = 1,
                budget: int | None = None) -> LabModel:
    """A Llama-style model of ``spec``'s shape with random weights, built on ``device`` without downloading.

    Bytes and time do not depend on the weights' values, so this measures a
    7B model's memory and speed without its 13 GB download.  ``reduce`` > 1
    divides the shape (see :func:`reduced_spec`).  Raises
    :class:`MeasurementSkipped`, before building anything, if the predicted
    weights exceed ``budget`` bytes.
    """
    torch = require_torch()
    from transformers import LlamaForCausalLM

    full = models.resolve(spec)
    shaped = reduced_spec(full, reduce)
    if shaped.n_params is None:
        shaped = replace(shaped, n_params=shaped.count_params())
    predicted, basis = _weight_prediction(shaped, dtype)
    if budget is not None and predicted > byte_count("budget", budget):
        raise MeasurementSkipped(f"its {predicted / GiB:.2f} GiB of weights do not fit the {budget / GiB:.2f} GiB free")
    config = llama_config(shaped)
    started, before = time.perf_counter(), cuda_allocated(device)
    torch.manual_seed(0)
    # Built on the device in its dtype: a 7B model never exists in FP32 in host memory.
    with torch.device(device.torch_device):
        module = LlamaForCausalLM._from_config(config, **_dtype_argument(dtype))
    module.eval()
    note = "random weights: bytes and time are real, perplexity is meaningless"
    if reduce > 1:
        note += f"; {full.name}'s shape divided by {reduce} so the CPU run takes seconds"
    return LabModel(name=shaped.name, source="random", variant=dtype, dtype=dtype, spec=shaped, module=module,
                    predicted_weight_bytes=predicted, weight_basis=basis,
                    reduced_from=full.name if reduce > 1 else None, note=note,
                    load_seconds=time.perf_counter() - started, allocated_bytes=cuda_growth(device, before))


def _registry_spec(repo: str) -> ModelSpec | None:
    """The registry's entry for a Hub repo (``Qwen/Qwen2.5-0.5B`` -> ``qwen2.5-0.5b``), if there is one."""
    key = repo.rsplit("/", 1)[-1].lower().removesuffix("-hf")
    return models.REGISTRY.get(key)


def _with_parameter_count(spec: ModelSpec, name: str) -> tuple[ModelSpec, str]:
    """``spec`` with ``n_params``: the registry's where it has this shape, else counted; and where it came from."""
    known = _registry_spec(name)
    if known is not None and known.kv_dim == spec.kv_dim and known.n_layers == spec.n_layers:
        return replace(spec, n_params=known.n_params), f"n_params from servebook's registry ({known.name})"
    try:
        return (replace(spec, n_params=spec.count_params()),
                "n_params from ModelSpec.count_params() (every tensor the config describes, biases and norms included)")
    except ValueError:
        return spec, "n_params unknown"


def load_hub(name: str, device: Device, dtype: str = "fp16", online: bool | None = None) -> LabModel:
    """A pretrained causal LM from the Hugging Face Hub (or the local cache when offline).

    Raises :class:`ModelUnavailable` with the reason (offline and not cached,
    unknown name, gated model, or a config that servebook cannot model, found
    from the config before any weight is downloaded) instead of a deep
    traceback, quickly: without internet it does not wait for retries.
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a Hub model id such as {DEFAULT_HUB_MODEL!r}, got {name!r}")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    online = hub_reachable() if online is None else online
    where = "the Hub" if online else "the local cache (no internet: the Hub is not reachable)"
    started, before = time.perf_counter(), cuda_allocated(device)
    try:
        config = AutoConfig.from_pretrained(name, local_files_only=not online)
    except (OSError, ValueError, KeyError) as error:
        raise ModelUnavailable(f"cannot load {name!r} from {where}: {str(error).splitlines()[0]}") from error
    try:
        shape = ModelSpec.from_hf_config(config, name=name)
    except ValueError as error:
        raise ModelUnavailable(f"servebook cannot model {name!r}, so there is no prediction to measure it "
                               f"against: {str(error).splitlines()[0]}") from error
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=not online)
        module = AutoModelForCausalLM.from_pretrained(name, local_files_only=not online, **_dtype_argument(dtype))
    except (OSError, ValueError, KeyError) as error:
        raise ModelUnavailable(f"cannot load {name!r} from {where}: {str(error).splitlines()[0]}") from error
    _ensure_dtype(module.to(device.torch_device), dtype).eval()
    spec, basis_note = _with_parameter_count(shape, name)
    predicted, basis = _weight_prediction(spec, dtype)
    return LabModel(name=name, source="hub", variant=dtype, dtype=dtype, spec=spec, module=module,
                    predicted_weight_bytes=predicted, weight_basis=f"{basis}; {basis_note}", tokenizer=tokenizer,
                    heldout_text=_project_heldout_text(), note="pretrained weights from the Hugging Face Hub",
                    load_seconds=time.perf_counter() - started, allocated_bytes=cuda_growth(device, before))


def _project_heldout_text() -> str | None:
    from .. import smallmodel

    return smallmodel.heldout_text() if (smallmodel.TINY_LLAMA / "heldout.txt").exists() else None


def load_project(device: Device, dtype: str = "fp32") -> LabModel:
    """The project's small Llama (:mod:`servebook.smallmodel`), trained on the CPython documentation."""
    from .. import smallmodel

    if not (smallmodel.TINY_LLAMA / "config.json").exists():
        raise ModelUnavailable("the project's model is not in servebook/data/tiny-llama "
                               "(scripts/train_tiny_llama.py writes it)")
    started, before = time.perf_counter(), cuda_allocated(device)
    module, tokenizer = smallmodel.load("tiny-llama", dtype=torch_dtype(dtype), device=device.torch_device)
    spec = ModelSpec.from_hf_config(module.config.to_dict(), name="tiny-llama")
    spec = replace(spec, n_params=spec.count_params())
    predicted, basis = _weight_prediction(spec, dtype)
    return LabModel(name="tiny-llama", source="project", variant=dtype, dtype=dtype, spec=spec, module=module,
                    predicted_weight_bytes=predicted, weight_basis=basis, tokenizer=tokenizer,
                    heldout_text=_project_heldout_text(),
                    note="the book's small Llama, trained on the CPython documentation (held-out topics unseen)",
                    load_seconds=time.perf_counter() - started, allocated_bytes=cuda_growth(device, before))


# ---------------------------------------------------------------------------
# Quantized variants: servebook.qmodel's layers in place of the block linears.


def linear_shapes(spec: ModelSpec) -> list[tuple[int, int]]:
    """(out, in) of the linear layers of one Llama-style block: q, k, v, o, gate, up, down."""
    if spec.intermediate_size is None:
        raise ValueError(f"{spec.name}: linear shapes need intermediate_size (a Llama-style spec)")
    d, q, kv, f = spec.d_model, spec.n_heads * spec.head_dim, spec.kv_dim, spec.intermediate_size
    return [(q, d), (kv, d), (kv, d), (d, q), (f, d), (f, d), (d, f)]


def quantized_weight_prediction(spec: ModelSpec, variant: str, group_size: int, dtype: str) -> tuple[int, str]:
    """Bytes of a model whose block linears are quantized group-wise and the rest kept in ``dtype``.

    Each (out x in) linear costs ``memory.weight_bytes(out*in, int4|int8,
    group_size)`` (codes, FP16 scales, zero points as wide as the codes); the
    embeddings, norms and LM head stay in ``dtype``, as servebook.qmodel leaves them.
    """
    choice("variant", variant, QUANT_VARIANTS)
    if spec.n_params is None:
        raise ValueError(f"{spec.name}: the prediction needs n_params")
    code = f"int{QUANT_BITS[variant]}"
    shapes = linear_shapes(spec)
    quantized = spec.n_layers * sum(memory.weight_bytes(o * i, code, group_size=group_size) for o, i in shapes)
    kept = spec.n_params - spec.n_layers * sum(o * i for o, i in shapes)
    total = quantized + memory.weight_bytes(kept, dtype)
    return total, (f"servebook.memory.weight_bytes: {spec.n_layers} x 7 linears in {code} g{group_size} "
                   f"(FP16 scales, {code} zero points) + {kept:,} other parameters in {dtype}")


def quantize(base: LabModel, variant: str, device: Device, group_size: int = 128, method: str = "rtn") -> LabModel:
    """A copy of ``base`` whose block linears are servebook :class:`~servebook.qmodel.QuantizedLinear` layers.

    ``variant`` is ``"w8a16"`` or ``"w4a16"`` (group-wise, ``group_size``
    input features per scale); ``method`` is qmodel's ``"rtn"``, ``"gptq"`` or
    ``"awq"`` (the last two calibrate on the project's calibration text).
    The activations keep ``base``'s dtype: FP32 on a CPU.
    """
    choice("variant", variant, QUANT_VARIANTS)
    choice("method", method, QUANT_METHODS)
    from .. import qmodel, smallmodel

    calibration = None
    if method != "rtn":
        if base.tokenizer is None:
            raise ModelUnavailable(f"{method} needs calibration text and a tokenizer; {base.name} has none")
        ids = smallmodel.encode(base.tokenizer, smallmodel.calibration_text())
        calibration = smallmodel.calibration_batch(ids)
    started, before = time.perf_counter(), cuda_allocated(device)
    try:
        report = qmodel.quantize_model(base.module, method, bits=QUANT_BITS[variant], group_size=group_size,
                                       calibration=calibration)
    except ValueError as error:
        raise ModelUnavailable(f"cannot quantize {base.name} to {variant}: {error}") from error
    predicted, basis = quantized_weight_prediction(base.spec, variant, group_size, base.dtype)
    kernel = kernel_path(report.model, device, base.dtype)
    how = "fused W4A16 kernel" if kernel == "fused" else "dequantize, then matmul"
    note = f"{method.upper()} {variant.upper()} g{group_size} by servebook.qmodel ({how})"
    if base.dtype != "fp16":
        note += f"; activations in {base.dtype}"
    return replace(base, variant=variant, module=report.model, predicted_weight_bytes=predicted,
                   weight_basis=basis, group_size=group_size, note=note,
                   load_seconds=base.load_seconds + time.perf_counter() - started,
                   allocated_bytes=cuda_growth(device, before), kernel=kernel)


def kernel_path(module, device: Device, dtype: str) -> str:
    """``"fused"`` if every quantized layer of ``module`` multiplies ``dtype`` activations on ``device`` with
    servebook.kernels' fused kernel, else ``"dequantize-matmul"``."""
    from .. import kernels, qmodel

    torch = require_torch()
    probe = torch.empty(1, 1, dtype=torch_dtype(dtype), device=device.torch_device)  # its device and dtype decide
    layers = [m for m in module.modules() if isinstance(m, qmodel.QuantizedLinear)]
    return "fused" if layers and all(kernels.fused_applies(m, probe) for m in layers) else "dequantize-matmul"
