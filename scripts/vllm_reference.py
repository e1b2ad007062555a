"""Drive vLLM 0.33.0's own V1 scheduler on the book's seeded traces, and write what it did.

Run in a virtual environment of its own, never the book's (vLLM pins another
torch, and importing it changes process state)::

    python -m venv /work/venv-vllm
    /work/venv-vllm/bin/pip install torch==2.13.0
    /work/venv-vllm/bin/pip install --no-deps vllm-0.33.0-*.whl   # plus the modules its imports ask for
    VLLM_TARGET_DEVICE=cpu /work/venv-vllm/bin/python scripts/vllm_reference.py

It writes two committed files, which the test suite reads (CI never runs this):

- ``companion/servebook/data/vllm-0.33.0-golden.json``: for each case (a seeded trace and a
  scheduler configuration), vLLM's per-step records (requests scheduled,
  admitted, preempted, finished, running and waiting after the step, tokens
  scheduled, prompt tokens served from the prefix cache, free blocks) and per
  request the steps of its first token and its finish;
- ``companion/servebook/data/vllm-0.33.0.json``: the defaults and enums the
  book cites (block size, memory utilisation, watermark, chunked prefill,
  KV-cache dtypes, the per-device caps of ``EngineArgs.get_batch_defaults``).

No model runs: the scheduler is built from a ``VllmConfig`` whose model config
is a small stand-in, a tensor-less ``KVCacheConfig`` with one full-attention
group (vLLM keeps block 0 as its null block, so the pool gets one block more
than the book's), and a fake model output of one token per request that has
computed all it knows.  Time is counted in steps; a request arrives before the
first step whose clock has reached its ``arrival_s``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "companion"))

from servebook.batching.traces import sample_trace  # noqa: E402  (after the path)

GOLDEN = ROOT / "companion" / "servebook" / "data" / "vllm-0.33.0-golden.json"
FACTS = ROOT / "companion" / "servebook" / "data" / "vllm-0.33.0.json"


def cases() -> dict[str, tuple[list, dict]]:
    """24 seeded traces: Poisson arrivals, shared prefixes, pool pressure with preemption, chunked prefill."""
    out = {}
    for seed in range(24):
        kind = ("poisson", "shared-prefix", "pressure", "chunked")[seed % 4]
        trace = sample_trace(
            30, seed=100 + seed, prompt_mean=(24, 40, 30, 90)[seed % 4], output_mean=(20, 16, 40, 12)[seed % 4],
            max_len=256, arrival_rate=(0.8, 1.5, None, 0.5)[seed % 4],
            shared_prefix_len=32 if kind == "shared-prefix" else 0, n_prefix_groups=2)
        config = dict(
            num_blocks=(48, 64, 36, 64)[seed % 4], block_size=(16, 8, 8, 16)[seed % 4], max_len=256,
            max_num_seqs=(8, 16, 32, 6)[seed % 4], max_num_batched_tokens=(256, 128, 512, 48)[seed % 4],
            chunked_prefill=kind != "pressure" or seed % 8 == 2,
            prefix_caching=kind == "shared-prefix" or seed % 3 == 0,
            watermark=0.0 if seed % 5 else 0.02)
        if not config["chunked_prefill"]:
            config["max_num_batched_tokens"] = max(config["max_num_batched_tokens"], config["max_len"])
        out[f"{kind}-{seed:02d}"] = (trace, config)
    return out


def _model_stand_in(max_len: int) -> SimpleNamespace:
    """The attributes of ``ModelConfig`` that the scheduler and its managers read, for a plain decoder."""
    return SimpleNamespace(
        max_model_len=max_len, uses_mrope=False, is_encoder_decoder=False, runner_type="generate",
        is_diffusion=False, supports_multimodal_inputs=False, return_sampling_mask=False,
        is_multimodal_model=False, hf_config=None, dtype="float16", enable_return_routed_experts=False,
        is_hybrid=False, is_attention_free=False, multimodal_config=None, skip_tokenizer_init=True,
    )


def build_scheduler(config: dict):
    import torch
    from vllm.config import CacheConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    block_size, num_blocks = config["block_size"], config["num_blocks"] + 1  # + vLLM's null block
    scheduler_config = SchedulerConfig(
        max_num_seqs=config["max_num_seqs"], max_num_batched_tokens=config["max_num_batched_tokens"],
        max_model_len=config["max_len"], enable_chunked_prefill=config["chunked_prefill"],
        watermark=config["watermark"], is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=block_size, enable_prefix_caching=config["prefix_caching"])
    cache_config.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(scheduler_config=scheduler_config, cache_config=cache_config)
    vllm_config.model_config = _model_stand_in(config["max_len"])
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=16, dtype=torch.float16)
    kv_config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                              kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return Scheduler(vllm_config, kv_config, StructuredOutputManager(vllm_config), block_size=block_size)


def _vllm_request(req, block_hasher):
    from vllm import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=req.output_len, ignore_eos=True, temperature=0.0)
    return Request(str(req.request_id), req.tokens(req.prompt_len), params, None, arrival_time=req.arrival_s,
                   block_hasher=block_hasher)


def run(trace: list, config: dict) -> dict:
    """One case through vLLM's scheduler: per-step and per-request records."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput

    scheduler = build_scheduler(config)
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(config["block_size"], hash_fn)
    by_id = {str(r.request_id): r for r in trace}
    pending, clock, step = list(trace), trace[0].arrival_s, 0
    steps = {k: [] for k in ("running", "admitted", "preempted", "finished", "tokens", "cached_tokens",
                             "blocks_free", "in_flight", "waiting")}
    first, finish, emitted = {}, {}, {r.request_id: 0 for r in trace}
    pool = scheduler.kv_cache_manager.block_pool
    # Unfinished, not has_requests(): the latter stays true for one more, empty, step that only
    # reports the last finished ids.
    while pending or scheduler.get_num_unfinished_requests():
        while pending and pending[0].arrival_s <= clock:
            scheduler.add_request(_vllm_request(pending.pop(0), hasher))
        if not scheduler.get_num_unfinished_requests():
            clock = pending[0].arrival_s
            continue
        out = scheduler.schedule()
        counts = out.num_scheduled_tokens
        new_ids = [r.req_id for r in out.scheduled_new_reqs] + list(out.scheduled_cached_reqs.resumed_req_ids or ())
        cached = sum(scheduler.requests[i].num_computed_tokens - counts[i] for i in new_ids)
        ids = list(counts)
        sampled = []
        for rid in ids:
            request = scheduler.requests[rid]
            done_prompt = request.num_computed_tokens >= request.num_tokens
            sampled.append([by_id[rid].token(request.num_tokens)] if done_prompt else [])
        result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                   sampled_token_ids=sampled)
        engine_outputs = scheduler.update_from_output(out, result)
        finished = 0
        for outputs in engine_outputs.values():
            for o in outputs.outputs:
                rid = int(o.request_id)
                if o.new_token_ids and rid not in first:
                    first[rid] = step
                emitted[rid] += len(o.new_token_ids)
                if o.finish_reason is not None:
                    finish[rid] = step
                    finished += 1
        row = dict(running=len(ids), admitted=len(new_ids), preempted=len(out.preempted_req_ids or ()),
                   finished=finished, tokens=out.total_num_scheduled_tokens, cached_tokens=cached,
                   blocks_free=pool.get_num_free_blocks(), in_flight=len(scheduler.running),
                   waiting=len(scheduler.waiting))
        for k, v in row.items():
            steps[k].append(v)
        clock += 1.0
        step += 1
        if step > 100_000:
            raise RuntimeError("vLLM made no progress (a request that can never fit the pool?)")
    assert all(emitted[r.request_id] == r.output_len for r in trace)
    fields = ("request_id", "arrival_s", "prompt_len", "output_len", "prefix_group", "prefix_len")
    return {"config": config, "trace": [[getattr(r, f) for f in fields] for r in trace], "steps": steps,
            "requests": {"first_token_step": [first[r.request_id] for r in trace],
                         "finish_step": [finish[r.request_id] for r in trace]}}


def _default(cls, name: str):
    """A config field's default (pydantic wraps some in a ``FieldInfo``)."""
    value = cls.__dataclass_fields__[name].default
    return getattr(value, "default", value)


def facts() -> dict:
    """The defaults and enums of vLLM 0.33.0 that the book cites, read from the installed package."""
    from unittest import mock

    import vllm
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.config.cache import KV_CACHE_DTYPES
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    gib = 1 << 30
    tiers = {"large": (192 * gib, "nvidia b200"), "h100_class": (80 * gib, "nvidia h100 80gb hbm3"),
             "other": (80 * gib, "nvidia a100-sxm4-80gb")}
    defaults = {}
    for tier, (memory, name) in tiers.items():
        with mock.patch.object(current_platform, "get_device_total_memory", return_value=memory), \
             mock.patch.object(current_platform, "get_device_name", return_value=name), \
             mock.patch.object(current_platform, "is_device_capability", return_value=False), \
             mock.patch.object(current_platform, "is_cpu", return_value=False), \
             mock.patch.object(current_platform, "is_tpu", return_value=False):
            tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
        defaults[tier] = {c: [seqs[getattr(UsageContext, c)], tokens[getattr(UsageContext, c)]]
                          for c in ("LLM_CLASS", "OPENAI_API_SERVER")}
    with mock.patch.object(current_platform, "is_cpu", return_value=True), \
         mock.patch.object(current_platform, "is_tpu", return_value=False):
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
    defaults["cpu"] = {c: [seqs[getattr(UsageContext, c)], tokens[getattr(UsageContext, c)]]
                       for c in ("LLM_CLASS", "OPENAI_API_SERVER")}
    rules = {"large": "device memory >= 160 GiB", "h100_class": "device memory >= 70 GiB, not an A100, not a GB10",
             "other": "any other GPU", "cpu": "CPU, per unit of world size"}
    return {
        "version": vllm.__version__,
        "source": "vllm 0.33.0 wheel: vllm/config/cache.py, vllm/config/scheduler.py, "
                  "vllm/engine/arg_utils.py (EngineArgs.get_batch_defaults)",
        "block_size": CacheConfig.DEFAULT_BLOCK_SIZE,
        "gpu_memory_utilization": _default(CacheConfig, "gpu_memory_utilization"),
        "enable_prefix_caching": _default(CacheConfig, "enable_prefix_caching"),
        "watermark": _default(SchedulerConfig, "watermark"),
        "enable_chunked_prefill": _default(SchedulerConfig, "enable_chunked_prefill"),
        "scheduler_reserve_full_isl": _default(SchedulerConfig, "scheduler_reserve_full_isl"),
        "long_prefill_token_threshold": _default(SchedulerConfig, "long_prefill_token_threshold"),
        "scheduling_policies": ["fcfs", "priority"],
        "kv_cache_dtypes": list(KV_CACHE_DTYPES),
        "batch_defaults": {tier: {"rule": rules[tier], **defaults[tier]} for tier in rules},
    }


def main(argv: list[str]) -> None:
    if "--facts-only" not in argv:
        records = {name: run(trace, config) for name, (trace, config) in cases().items()}
        GOLDEN.write_text(json.dumps(records, separators=(",", ":")) + "\n")
        print(f"wrote {GOLDEN} ({len(records)} cases)")
    FACTS.write_text(json.dumps(facts(), indent=2) + "\n")
    print(f"wrote {FACTS}")


if __name__ == "__main__":
    main(sys.argv[1:])
