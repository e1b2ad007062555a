"""The lab: a real model on a real device, measured against the book's formulas.

For each model and precision, and for several batch sizes and prompt lengths,
the lab measures

- the weight bytes on the device (every tensor of the state dict, shared ones
  once; on CUDA also the allocator's own count),
- the KV-cache bytes during generation (the cache tensors' own sizes),
- the time of a prefill step and of a decode step (median of repeats, with the
  device synchronised around each), and tokens per second,
- the held-out perplexity,
- on a GPU run: a decode step at batch 1 launched from Python and replayed
  from a CUDA graph (:mod:`~servebook.lab.graph`), and the fused W4A16 kernel
  alone, layer shape by layer shape, against a device-to-device copy
  (:mod:`~servebook.lab.kernel`),

and puts beside each measurement the prediction of :mod:`servebook.memory`
(bytes) or :mod:`servebook.roofline` (time, on a GPU in its table) and the
ratio measured / predicted.  Results are a JSON document (:data:`SCHEMA`) with
the device, the library versions and the date::

    python -m servebook.lab --out results.json

Bad input never crashes a run: a Hub model that cannot be loaded (no internet,
unknown name), a batch that does not fit, a missing optional library (vLLM) is
recorded under ``"skipped"`` with the reason, and the run goes on.
"""

from .device import Device, MeasurementSkipped, detect_device, environment, roofline_gpu_for
from .graph import GraphedDecode, graphed_decode
from .kernel import check_kernel, copy_bandwidth, kernel_table, layer_shapes, measure_kernel
from .load import (
    DEFAULT_HUB_MODEL,
    FLOAT_VARIANTS,
    KERNEL_PATHS,
    QUANT_BITS,
    QUANT_METHODS,
    QUANT_VARIANTS,
    UNFUSED_VARIANT,
    VARIANTS,
    LabModel,
    ModelUnavailable,
    hub_reachable,
    kernel_path,
    linear_shapes,
    llama_config,
    load_hub,
    load_project,
    load_random,
    quantize,
    quantized_weight_prediction,
    reduced_spec,
    torch_dtype,
)
from .measure import (
    Generation,
    cache_bytes,
    cache_tensors,
    measure_generation,
    other_buffer_bytes,
    perplexity,
    prefill_cache,
    tensor_bytes,
    timed,
    weight_bytes_of,
)
from .predict import fused_scheme, generation_rows, qmodel_scheme, time_predictions
from .results import (
    QUANTITIES,
    SCHEMA,
    SCHEMA_VERSION,
    format_table,
    latest_recorded,
    markdown_table,
    measurement_row,
    provenance,
    recorded_dir,
    recorded_runs,
    table,
    validate,
    write_results,
)
from .run import LabConfig, Run, check_fits, run_lab
from .vllm import compare_vllm, parse_vllm_log, servebook_vllm_prediction

__all__ = [
    # device
    "Device", "MeasurementSkipped", "detect_device", "environment", "roofline_gpu_for",
    # models to measure
    "DEFAULT_HUB_MODEL", "FLOAT_VARIANTS", "KERNEL_PATHS", "QUANT_BITS", "QUANT_METHODS", "QUANT_VARIANTS",
    "UNFUSED_VARIANT", "VARIANTS", "LabModel", "ModelUnavailable", "hub_reachable", "kernel_path", "linear_shapes",
    "llama_config", "load_hub", "load_project", "load_random", "quantize", "quantized_weight_prediction",
    "reduced_spec", "torch_dtype",
    # measuring
    "Generation", "cache_bytes", "cache_tensors", "measure_generation", "other_buffer_bytes", "perplexity",
    "prefill_cache", "tensor_bytes", "timed", "weight_bytes_of",
    # a decode step in a CUDA graph; the fused kernel alone
    "GraphedDecode", "graphed_decode", "check_kernel", "copy_bandwidth", "kernel_table", "layer_shapes",
    "measure_kernel",
    # predictions
    "fused_scheme", "generation_rows", "qmodel_scheme", "time_predictions",
    # the results document
    "QUANTITIES", "SCHEMA", "SCHEMA_VERSION", "format_table", "latest_recorded", "markdown_table", "measurement_row",
    "provenance", "recorded_dir", "recorded_runs", "table", "validate", "write_results",
    # a run
    "LabConfig", "Run", "check_fits", "run_lab",
    # vLLM
    "compare_vllm", "parse_vllm_log", "servebook_vllm_prediction",
]
