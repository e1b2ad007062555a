"""The roofline of one serving step: FLOPs, bytes moved, and which one sets the time.

A step of a transformer (one prefill of a batch of prompts, or one decode step
that adds a token to every sequence in a batch) does FLOPs and moves bytes
between HBM and the chip.  The GPU cannot do it faster than either allows
(Williams et al., 2009), so

    time >= max(FLOPs / peak FLOP/s, bytes / bandwidth)

and which term wins is decided by the step's *arithmetic intensity*
(FLOPs per byte) against the GPU's *ridge point* (peak / bandwidth).

What a step counts (Pope et al., 2023, do the same accounting):

- matmul FLOPs: 2 per weight per token (one multiply, one add), the "2·N rule";
- attention FLOPs: 4 · L · (n_heads · head_dim) per token per position attended
  (2 for q·k, 2 for the weighted sum of v); a sliding-window or chunked layer
  attends to at most W (or its chunk's) positions; multi-head latent attention
  attends over its stored latent, as vLLM 0.33.0's decode path does
  (``model_executor/layers/attention/mla_attention.py``: every head's query is
  multiplied into the latent, width kv_rank + rope, and the weighted sum is
  taken over the latent, width kv_rank);
- weight bytes: every matmul weight is read from HBM once per step, whatever the
  batch: that is what makes a small decode step memory-bound.  A mixture of
  experts reads only the experts its tokens are routed to: with uniform routing
  a step of T tokens, each sent to k of a layer's E experts, reads
  E · (1 − (1 − k/E)^T) of them per MoE layer (:func:`experts_read`): about
  k·T at a small decode batch, all E in a large prefill.  FLOPs use the active
  parameters (each token computes its k experts only);
- KV bytes: the cache the step reads (tokens already stored) and writes (its new
  tokens).

Activations are not counted, so the bytes are a lower bound and the time bound
stays a lower bound.  All byte counts are ``int``; times are seconds (float).

Quantization changes the sums (see :class:`Scheme`): W8A8 stores INT8 weights
and runs the matmuls on the INT8 tensor cores; W4A16 stores 4-bit weights (plus
group scales) but multiplies in FP16, after dequantizing the weights on the
ordinary CUDA cores: fewer bytes, the same tensor-core FLOPs, and extra work.
"""

from __future__ import annotations

from ..gpus import GPU, GPUS
from .bounds import (
                     Bound,
                     bound,
                     decode_crossover_batch,
                     decode_time,
                     gpu,
                     gpu_table,
                     ridge_point,
                     scheme_bounds,
                     weight_scheme_speedup,
)
from .schemes import SCHEMES, Scheme, compute_time, runs_on, scheme
from .step import (
                     PHASES,
                     StepCost,
                     StepModel,
                     StepShape,
                     attention_flops_per_pair,
                     attention_pairs,
                     decode_step,
                     experts_read,
                     local_view,
                     matmul_params,
                     prefill_step,
)

__all__ = ["GPU", "GPUS", "gpu", "ridge_point", "Scheme", "SCHEMES", "scheme", "runs_on", "compute_time",
           "matmul_params", "attention_pairs", "experts_read", "local_view", "attention_flops_per_pair", "StepCost",
           "StepModel", "StepShape", "PHASES", "prefill_step", "decode_step", "Bound", "bound",
           "decode_crossover_batch", "decode_time", "scheme_bounds", "gpu_table", "weight_scheme_speedup"]
