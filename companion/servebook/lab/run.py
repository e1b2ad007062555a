"""A whole lab run: what to measure (:class:`LabConfig`), each model and its variants measured in turn,
and the results document they make."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from .. import kernels, memory, models
from ..checks import byte_count, choice, flag, names, whole
from ..units import GiB
from .device import Device, MeasurementSkipped, detect_device, environment, free_device_memory, require_torch
from .graph import graphed_decode
from .kernel import measure_kernel
from .load import (
    DEFAULT_HUB_MODEL,
    FLOAT_VARIANTS,
    QUANT_METHODS,
    QUANT_VARIANTS,
    UNFUSED_VARIANT,
    LabModel,
    ModelUnavailable,
    load_hub,
    load_project,
    load_random,
    quantize,
    reduced_spec,
)
from .measure import measure_generation, perplexity, weight_bytes_of
from .predict import generation_rows, time_predictions
from .results import SCHEMA_VERSION, measurement_row, validate
from .vllm import compare_vllm


@dataclass
class LabConfig:
    """What to measure.  :meth:`for_device` gives the book's defaults for a GPU and for a CPU."""

    hub_model: str | None = DEFAULT_HUB_MODEL
    project_model: bool = True
    random_models: tuple[str, ...] = ("llama-2-7b",)
    reduce: int = 1                    # divide the random models' shape (CPU runs)
    dtype: str = "fp16"
    variants: tuple[str, ...] = ("w8a16", "w4a16")  # quantized variants of the Hub and project models
    group_size: int = 128
    quant_method: str = "rtn"          # servebook.qmodel's "rtn", "gptq" or "awq"
    batches: tuple[int, ...] = (1, 8, 32)
    prompt_lens: tuple[int, ...] = (256, 1024)
    decode_steps: int = 16
    repeats: int = 5
    perplexity_window: int = 128
    perplexity_tokens: int = 16_384
    # Bytes free for a measurement's KV cache (and, before a random model is built, for its weights);
    # None: the device's free memory on CUDA, no check on a CPU.
    memory_budget: int | None = None
    vllm: bool = True
    seed: int = 0
    # The GPU run (benchmarks/gpu_run.py) also measures: the random-weight models' quantized variants; W4A16
    # again with the fused kernel off, where it runs; a decode step at batch 1 launched and replayed from a
    # CUDA graph; and the fused kernel alone on the first random model's layer shapes.
    quantize_random: bool = False
    unfused: bool = False
    decode_graph: bool = False
    kernel_benchmark: bool = False
    kernel_batches: tuple[int, ...] = (1, 16, 64, 512, 4096)

    def __post_init__(self) -> None:
        choice("dtype", self.dtype, FLOAT_VARIANTS)
        choice("quant_method", self.quant_method, QUANT_METHODS)
        self.variants = tuple(names("variants", self.variants, QUANT_VARIANTS))
        for name in ("batches", "prompt_lens", "kernel_batches"):
            values = tuple(getattr(self, name))
            if not values:
                raise ValueError(f"{name} must name at least one size")
            for value in values:
                whole(name, value, 1)
            setattr(self, name, values)
        for name in ("reduce", "group_size", "decode_steps", "repeats", "perplexity_window", "perplexity_tokens"):
            whole(name, getattr(self, name), 1)
        whole("seed", self.seed, 0)
        for name in ("project_model", "vllm", "quantize_random", "unfused", "decode_graph", "kernel_benchmark"):
            flag(name, getattr(self, name))
        for name in self.random_models:
            models.get(name)  # an unknown name fails here, naming the known ones
        if self.memory_budget is not None:
            byte_count("memory_budget", self.memory_budget, allow_zero=False)

    @classmethod
    def for_device(cls, device: Device, **overrides) -> LabConfig:
        """The book's settings: real sizes on a GPU; on a CPU, small ones that finish in seconds."""
        if device.kind == "cuda":
            return cls(**overrides)
        small = dict(dtype="fp32", reduce=8, batches=(1, 4), prompt_lens=(32, 128), decode_steps=8, repeats=3,
                     perplexity_tokens=4096)
        return cls(**{**small, **overrides})


def _budget(config: LabConfig, device: Device) -> int | None:
    if config.memory_budget is not None:
        return config.memory_budget
    if device.kind == "cuda":
        return int(require_torch().cuda.mem_get_info(device.index)[0])
    return None


def check_fits(model: LabModel, batch: int, prompt_len: int, decode_steps: int, budget: int | None) -> None:
    """Raise :class:`MeasurementSkipped` if the predicted KV cache alone exceeds ``budget`` bytes.

    Skipping before the run is kinder than an out-of-memory error halfway
    through, and it is the book's own formula deciding.
    """
    if budget is None:
        return
    need = memory.kv_cache_bytes(model.spec, prompt_len + decode_steps, batch, model.dtype)
    if need > byte_count("budget", budget):
        raise MeasurementSkipped(
            f"batch {batch} x {prompt_len + decode_steps} tokens needs a {need / GiB:.2f} GiB KV cache "
            f"(servebook.memory), more than the {budget / GiB:.2f} GiB free: skipped")


class Run:
    """The state of one lab run: rows, skipped measurements, model entries and the log."""

    def __init__(self, config: LabConfig, device: Device, log: Callable[[str], None]):
        self.config, self.device, self.log = config, device, log
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[dict[str, str]] = []
        self.models: list[dict[str, Any]] = []

    def skip(self, what: str, reason: str) -> None:
        self.log(f"skipped {what}: {reason}")
        self.skipped.append({"what": what, "reason": reason})

    def measure(self, model: LabModel, reference_perplexity: float | None = None) -> float | None:
        """Every measurement of one loaded model; returns its perplexity (or None)."""
        device, config = self.device, self.config
        self.log(f"measuring {model.name} [{model.variant}] on {device.describe()}")
        self.models.append(model.entry())
        measured_weights = weight_bytes_of(model.module)
        self.rows.append(measurement_row(model, "weight_bytes", measured_weights, model.predicted_weight_bytes,
                                         model.weight_basis))
        if model.allocated_bytes is not None:
            self.rows.append(measurement_row(
                model, "allocated_bytes", model.allocated_bytes, model.predicted_weight_bytes,
                "growth of torch.cuda.memory_allocated() while loading, vs " + model.weight_basis))
        budget = _budget(config, device)
        with kernels.use_fused(model.variant != UNFUSED_VARIANT):
            for batch, prompt_len in self.shapes(model):
                what = f"{model.name} [{model.variant}] batch {batch} x {prompt_len}"
                try:
                    check_fits(model, batch, prompt_len, config.decode_steps, budget)
                    g = measure_generation(model.module, device, batch, prompt_len, config.decode_steps,
                                           config.repeats, config.seed)
                except MeasurementSkipped as reason:
                    self.skip(what, str(reason))
                    continue
                self.rows += generation_rows(model, device, g)
            if config.decode_graph:
                self.measure_graphed_decode(model)
            return self._perplexity(model, reference_perplexity)

    def measure_graphed_decode(self, model: LabModel) -> None:
        """A decode step at batch 1, launched from Python and replayed from a CUDA graph, at each prompt length."""
        for prompt_len in self.config.prompt_lens:
            what = f"{model.name} [{model.variant}] decode step, batch 1 x {prompt_len}, in a CUDA graph"
            if model.kernel == "dequantize-matmul" and self.device.kind == "cuda":
                self.skip(what, "dequantize-then-matmul checks its codes on the host, which a CUDA graph cannot "
                                "capture")
                continue
            try:
                g = graphed_decode(model.module, self.device, 1, prompt_len, self.config.decode_steps, self.config.seed)
            except MeasurementSkipped as reason:
                self.skip(what, str(reason))
                continue
            _, decode, basis = time_predictions(model, self.device, 1, prompt_len)
            bound = decode and decode.time
            self.rows += [measurement_row(model, "decode_static_s", g.plain_median, bound,
                                          basis + "; launched from Python, static cache", 1, prompt_len),
                          measurement_row(model, "decode_graph_s", g.graph_median, bound,
                                          basis + "; replayed from a CUDA graph, static cache", 1, prompt_len)]

    def shapes(self, model: LabModel) -> list[tuple[int, int]]:
        """(batch, prompt length) pairs to measure; a Hub model on a CPU gets the smallest only (it is slow there)."""
        batches, lens = self.config.batches, self.config.prompt_lens
        if self.device.kind == "cpu" and model.source == "hub":
            return [(min(batches), min(lens))]
        return [(b, s) for b in batches for s in lens]

    def _perplexity(self, model: LabModel, reference: float | None) -> float | None:
        what = f"{model.name} [{model.variant}] perplexity"
        if model.source == "random":
            self.skip(what, "random weights: perplexity would only measure the random initialisation")
            return None
        if model.tokenizer is None or not model.heldout_text:
            self.skip(what, "no held-out text or tokenizer for this model")
            return None
        tokens = self.config.perplexity_tokens
        if self.device.kind == "cpu" and model.source == "hub":
            tokens = min(tokens, 1024)
        ppl = perplexity(model.module, model.tokenizer, model.heldout_text, self.config.perplexity_window, tokens)
        basis = ("the unquantized model's perplexity (the reference)" if reference is not None
                 else "no prediction: the unquantized reference")
        self.rows.append(measurement_row(model, "perplexity", ppl, reference, basis,
                                         seq_len=self.config.perplexity_window))
        return ppl

    def measure_with_variants(self, load: Callable[[], LabModel], what: str, fallback: str = "",
                              variants: tuple[str, ...] | None = None) -> None:
        """Load a model, measure it, then its quantized variants (the config's by default) against its perplexity.

        With ``unfused``, a W4A16 variant that runs the fused kernel is measured again with it turned off.
        """
        try:
            base = load()
        except ModelUnavailable as reason:
            self.skip(what, str(reason) + fallback)
            return
        reference = self.measure(base)
        for variant in self.config.variants if variants is None else variants:
            try:
                quantized = quantize(base, variant, self.device, self.config.group_size, self.config.quant_method)
            except ModelUnavailable as reason:
                self.skip(f"{base.name} [{variant}]", str(reason))
                continue
            self.measure(quantized, reference)
            if self.config.unfused and quantized.kernel == "fused":
                self.measure(replace(quantized, variant=UNFUSED_VARIANT, kernel="dequantize-matmul",
                                     note=quantized.note.replace("fused W4A16 kernel", "dequantize, then matmul: "
                                                                 "the fused kernel turned off")), reference)
            del quantized
            free_device_memory(self.device)
        del base
        free_device_memory(self.device)

    def measure_random(self, name: str) -> None:
        """Build a registry model's shape with random weights (if it fits) and measure it, and with
        ``quantize_random`` its quantized variants."""
        config = self.config

        def load() -> LabModel:
            try:
                return load_random(name, self.device, config.dtype, config.reduce,
                                   budget=_budget(config, self.device))
            except (MeasurementSkipped, ValueError) as reason:
                raise ModelUnavailable(str(reason)) from reason

        self.measure_with_variants(load, f"{name} (random weights)",
                                   variants=None if config.quantize_random else ())

    def measure_kernel(self) -> dict[str, Any] | None:
        """The fused kernel alone on the first random model's layer shapes (:mod:`servebook.lab.kernel`)."""
        config = self.config
        if not config.random_models:
            self.skip("the fused kernel alone", "no random-weight model names the layer shapes")
            return None
        if not kernels.triton_available():
            self.skip("the fused kernel alone", "Triton is not installed (pip install 'servebook[kernels]')")
            return None
        spec = reduced_spec(models.get(config.random_models[0]), config.reduce)
        try:
            return measure_kernel(spec, self.device, config.kernel_batches, config.group_size, config.repeats,
                                  log=self.log)
        except (RuntimeError, ValueError) as error:   # out of memory, a Triton error: the run's rows still count
            self.skip("the fused kernel alone", f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            return None


def run_lab(config: LabConfig | None = None, device: Device | None = None,
            log: Callable[[str], None] = print, schema: bool = True) -> dict[str, Any]:
    """Measure everything ``config`` asks for on ``device``; the results document (:data:`~servebook.lab.SCHEMA`,
    checked against it unless ``schema=False``: see :func:`~servebook.lab.validate`)."""
    torch = require_torch()
    started = time.perf_counter()
    device = device or detect_device(log=log)
    config = config or LabConfig.for_device(device)
    run = Run(config, device, log)
    torch.manual_seed(config.seed)

    if config.hub_model:
        run.measure_with_variants(lambda: load_hub(config.hub_model, device, config.dtype), config.hub_model,
                                  fallback=" The lab goes on with the project's model and random-weight shapes.")
    if config.project_model:
        run.measure_with_variants(lambda: load_project(device, config.dtype), "tiny-llama")
    for name in config.random_models:
        run.measure_random(name)

    kernel = run.measure_kernel() if config.kernel_benchmark else None
    vllm_result = compare_vllm(config.hub_model or DEFAULT_HUB_MODEL, device, log) if config.vllm else {
        "status": "skipped", "reason": "not requested"}
    results = {
        "schema_version": SCHEMA_VERSION,
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "device": asdict(device),
        "versions": environment(device),
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "models": run.models,
        "rows": run.rows,
        "skipped": run.skipped,
        "vllm": vllm_result,
        "run_seconds": round(time.perf_counter() - started, 2),
        "note": ("measured on a CPU at reduced size: bytes are checked exactly; times show the CPU, "
                 "not a GPU, and have no roofline prediction") if device.kind == "cpu" else
                "measured on a GPU at full size",
    }
    if kernel is not None:
        results["kernel"] = kernel
    validate(results, schema=schema)
    return results
