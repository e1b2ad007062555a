"""A step on a parallel layout: one GPU's share of the work, its link time, and the pipeline around it.

:func:`step_shape` gives the roofline's step model (:class:`servebook.roofline.StepShape`)
the counts of one GPU of one stage: its weight shards, its query and key/value
heads, its layers, and the all-reduces it joins.  Every GPU of a stage does
the same work at the same time, so the stage's step takes that GPU's bound:

    t_step >= max(FLOPs_gpu / peak, bytes_gpu / HBM bandwidth) + t_link

and at t = 1, p = 1 the shape is the whole model's and the bound the one-GPU
bound, to the last bit.  A pipeline runs its stages one after another for a
batch (:class:`PipelineStep`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import gpus, models, roofline
from ..gpus import GPU, Link
from ..models import ModelSpec
from ..roofline import Bound, StepShape
from ..units import bytes_per_element
from .comm import ALLREDUCES_PER_LAYER, allreduce_latency, stage_send_bytes_per_token
from .kv import kv_width_per_gpu, stage_kv_bytes_per_token
from .layout import VOCAB_PADDING, Layout, check, padded_vocab, stage_layers, tensor_link
from .weights import stage_params, stage_tensors


def _matmul_params(spec: ModelSpec, layout: Layout, stage: int, padding: int) -> tuple[int, int]:
    """(weights multiplied, LM head weights) on one GPU of ``stage``: every shard but the embedding lookup's."""
    matmul = lm_head = 0
    for x in stage_tensors(spec, layout, stage, padding):
        table_is_head = x.name == "embedding table" and spec.tied_embeddings and layout.pipeline == 1
        if x.name == "embedding table" and not table_is_head:
            continue  # a lookup reads a few rows and multiplies nothing
        matmul += x.per_gpu
        if x.name == "LM head" or table_is_head:
            lm_head = x.per_gpu
    return matmul, lm_head


def _attention_per_pair(spec: ModelSpec, tensor: int) -> int:
    """One layer's attention FLOPs per (query, key) pair on one GPU: its n_heads / t query heads."""
    heads = spec.n_heads // tensor
    if spec.mla is not None:
        return 2 * heads * (spec.mla.cache_width + spec.mla.kv_rank)
    return 2 * heads * (spec.head_dim + spec.v_head_dim)


def _link_terms(spec: ModelSpec, layout: Layout, link: Link | None, stage: int, dtype: str, padding: int) -> dict:
    """The link fields of a stage's shape: ring bytes per token and per logit, collectives, latency, bandwidth."""
    t = layout.tensor
    if t == 1:
        return {}
    first, last = stage == 0, stage == layout.pipeline - 1
    allreduces = ALLREDUCES_PER_LAYER * len(stage_layers(spec, layout)[stage]) + first  # + the embedding's
    message = int(spec.d_model * bytes_per_element(dtype))
    logits_row = int(padded_vocab(spec, padding) * bytes_per_element(dtype)) if last else 0
    return dict(link_bytes_per_token=2 * (t - 1) * allreduces * message // t,
                link_bytes_per_logit=(t - 1) * logits_row // t,  # the LM head's all-gather
                collectives=allreduces + last, collective_latency=allreduce_latency(t, link),
                link_bandwidth=float(link.per_direction))


def fullest_stage(spec: ModelSpec, layout: Layout, padding: int = VOCAB_PADDING) -> int:
    """The stage whose GPUs hold the most parameters (the first of equals): the pipeline's slowest, to a roofline."""
    per_stage = stage_params(spec, layout, padding)
    return per_stage.index(max(per_stage))


def step_shape(model: ModelSpec | str, layout: Layout, gpu: GPU | str, stage: int | None = None,
               kv_dtype: str = "fp16", activation_dtype: str = "bf16", padding: int = VOCAB_PADDING,
               link: Link | None = None) -> StepShape:
    """The step shape of one GPU of ``stage`` (default: the fullest) of ``layout``.

    The group all-reduces over ``link``, by default the one :func:`tensor_link`
    picks for the GPU (pass ``gpu.pcie`` to ask what the same GPUs would do
    without NVLink).
    """
    spec, device = models.resolve(model), gpus.get(gpu)
    if link is not None and not isinstance(link, Link):
        raise TypeError(f"link must be a gpus.Link (such as gpus.get('h100-sxm').pcie), got {type(link).__name__}")
    link = tensor_link(device, layout.tensor) if link is None else link
    check(spec, layout, padding)
    stage = fullest_stage(spec, layout, padding) if stage is None else stage
    layers = stage_layers(spec, layout)[stage]
    kinds = [spec.layer_types[i] for i in layers]
    local = kinds.count(spec.local_kind) if spec.local_kind else 0
    matmul, lm_head = _matmul_params(spec, layout, stage, padding)
    moe_layers = 0 if spec.moe is None else sum(i not in spec.moe.dense_layers for i in layers)
    expert = 3 * spec.d_model * spec.moe.expert_size // layout.tensor if spec.moe else 0
    unused = moe_layers * (spec.moe.n_experts - spec.moe.top_k) * expert if spec.moe else 0
    per_layer_kv = math.ceil(kv_width_per_gpu(spec, layout.tensor) * bytes_per_element(kv_dtype))
    pair = _attention_per_pair(spec, layout.tensor)
    return StepShape(
        matmul_params=matmul, active_params=matmul - unused,
        routed_params=moe_layers * spec.moe.n_experts * expert if spec.moe else 0, expert_params=expert,
        moe_layers=moe_layers, kv_per_token=stage_kv_bytes_per_token(spec, layout, stage, kv_dtype),
        kv_local_per_token=local * per_layer_kv, attention_flops_per_pair=(len(layers) - local) * pair,
        local_attention_flops_per_pair=local * pair, lm_head_params=lm_head,
        **_link_terms(spec, layout, link, stage, activation_dtype, padding))


@dataclass(frozen=True)
class PipelineStep:
    """One step of a batch through every stage of a pipeline: each stage's bound and the sends between them."""

    stages: tuple[Bound, ...]
    send_time: float  # one stage-to-stage send of the step's hidden states

    @property
    def latency(self) -> float:
        """Seconds from the step's start on the first stage to its end on the last."""
        return sum(b.time for b in self.stages) + (len(self.stages) - 1) * self.send_time

    @property
    def interval(self) -> float:
        """Seconds between finished steps with a batch in flight on every stage: the slowest stage's turn."""
        return max(b.time for b in self.stages) + (self.send_time if len(self.stages) > 1 else 0.0)


def pipeline_step(model: ModelSpec | str, layout: Layout, gpu: GPU | str, batch: int, new_tokens: int,
                  cached_tokens: int, weights: str = "W16A16", kv_dtype: str = "fp16",
                  activation_dtype: str = "bf16") -> PipelineStep:
    """A uniform step (``batch`` sequences adding ``new_tokens`` to ``cached_tokens`` each) through every stage.

    Stages pass each token's hidden state and residual to the next over
    NVLink when one link joins all the layout's GPUs, else over PCIe (the
    bus a network card sits on, for stages on different nodes).
    """
    spec, device = models.resolve(model), gpus.get(gpu)
    bounds = []
    for stage in range(check(spec, layout).pipeline):
        shape = step_shape(spec, layout, device, stage, kv_dtype, activation_dtype)
        if new_tokens == 1:
            step = roofline.decode_step(spec, batch, cached_tokens, weights, kv_dtype, shape=shape)
        else:
            step = roofline.prefill_step(spec, batch, new_tokens, weights, kv_dtype, cached_tokens, "last", shape=shape)
        bounds.append(roofline.bound(step, device))
    link = tensor_link(device, layout.gpus) or device.pcie
    sent = batch * new_tokens * stage_send_bytes_per_token(spec, activation_dtype)
    return PipelineStep(tuple(bounds), sent / link.per_direction if layout.pipeline > 1 else 0.0)
