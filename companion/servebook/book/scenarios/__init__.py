"""Every scenario the book reuses, set up once: chapters, exercise pages, figures, widgets and tests read
them from here and never rebuild one.  One module per chapter, named after it.

A scenario is the set-up of a worked example or a simulation: a model on a
GPU with a memory budget, a trace of requests, a workload.  Where the source
documents leave a number open (which model, which GPU, how long the
prompts), the choice is made here once, and the chapter says so.
"""

from __future__ import annotations

from .activations_and_fp8 import KV_SERVING, KVServingCase
from .capacity_planning import (
    CAPACITY,
    DECIMAL_BUDGET,
    ROUNDED_WEIGHTS,
    CapacityCase,
    DecimalBudget,
)
from .choosing_the_lever import LEVER_SCENARIOS, Scenario
from .continuous_batching import BATCH_JOB, BATCHING_SERVER, BatchingServer, BatchTraffic, batching_runs, batching_trace
from .gptq_awq import (
    OUTLIER_COUNT,
    OUTLIER_FACTOR,
    OUTLIER_KINDS,
    OUTLIER_SHAPE,
    WEIGHT_STD,
    planted_outliers,
    relative_error,
)
from .kv_cache import KV_7B_CLASS, KV_BUDGET, KV_TOY, KVBudget
from .latency import (
    CHAT,
    LATENCY_CONFIGS,
    LATENCY_RATES,
    LATENCY_SLO,
    ChatTraffic,
    ServerConfig,
    budget_run,
    chat_trace,
    latency_limits,
    latency_run,
    latency_sweep,
)
from .modern_caches import (
    COMPARE_CONTEXT,
    CONTEXT_CAPACITY,
    MOE_CASE,
    VLLM_RESERVATION,
    WINDOW_CASE,
    ContextCapacity,
    MoECase,
    VllmReservation,
    WindowCase,
    all_global,
    as_mha,
    kv_per_token_by_kind,
)
from .paged_attention import BLOCK_SIZE_MIX, PAGED_REQUEST, LengthMix, PagedRequest, chat_sessions, paging_walkthrough
from .parallelism import BIG_MODEL, NODE_REQUESTS, SPLIT_JOBS, TENSOR_SIZES, BigModel, SplitJob
from .prefill_decode import MEMORY_BUCKETS, PREFILL_DECODE, MemoryBuckets, RooflineCase
from .quantization_basics import BINARY_TIE, ERROR_SAMPLES, EXAMPLE_OUTLIER, EXAMPLE_RANGE, EXAMPLE_WEIGHT, UNIT_RANGE

__all__ = [
    "CHAT",
    "ChatTraffic",
    "KVServingCase",
    "KV_SERVING",
    "BATCHING_SERVER",
    "BATCH_JOB",
    "BatchTraffic",
    "BIG_MODEL",
    "BINARY_TIE",
    "BLOCK_SIZE_MIX",
    "BatchingServer",
    "BigModel",
    "DECIMAL_BUDGET",
    "DecimalBudget",
    "ROUNDED_WEIGHTS",
    "CAPACITY",
    "COMPARE_CONTEXT",
    "CONTEXT_CAPACITY",
    "CapacityCase",
    "ContextCapacity",
    "ERROR_SAMPLES",
    "KVBudget",
    "KV_7B_CLASS",
    "KV_BUDGET",
    "KV_TOY",
    "LATENCY_CONFIGS",
    "LATENCY_RATES",
    "LATENCY_SLO",
    "LEVER_SCENARIOS",
    "LengthMix",
    "MEMORY_BUCKETS",
    "MOE_CASE",
    "MemoryBuckets",
    "MoECase",
    "NODE_REQUESTS",
    "OUTLIER_COUNT",
    "OUTLIER_FACTOR",
    "OUTLIER_KINDS",
    "OUTLIER_SHAPE",
    "PAGED_REQUEST",
    "PREFILL_DECODE",
    "PagedRequest",
    "RooflineCase",
    "EXAMPLE_OUTLIER",
    "EXAMPLE_RANGE",
    "EXAMPLE_WEIGHT",
    "SPLIT_JOBS",
    "Scenario",
    "ServerConfig",
    "SplitJob",
    "TENSOR_SIZES",
    "UNIT_RANGE",
    "VLLM_RESERVATION",
    "VllmReservation",
    "WEIGHT_STD",
    "WINDOW_CASE",
    "WindowCase",
    "all_global",
    "as_mha",
    "batching_runs",
    "batching_trace",
    "budget_run",
    "chat_trace",
    "chat_sessions",
    "kv_per_token_by_kind",
    "latency_limits",
    "latency_run",
    "latency_sweep",
    "paging_walkthrough",
    "planted_outliers",
    "relative_error",
]
