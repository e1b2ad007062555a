"""What a simulated run recorded (per iteration, per request) and what it achieved (its summary)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Summary:
    """What one simulated run achieved."""

    policy: str
    allocator: str
    n_requests: int
    iterations: int
    makespan_s: float
    output_tokens: int
    throughput_tokens_s: float
    requests_per_s: float
    mean_running: float        # time-weighted requests decoding or prefilling
    peak_running: int
    kv_token_share: float      # of reserved KV memory-time, the share holding tokens
    kv_reserved_share: float   # of the whole pool's memory-time, the share reserved
    kv_pool_token_share: float  # of the whole pool's memory-time, the share holding tokens
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    ttft_p50_s: float
    normalized_latency_s: float  # mean of latency / output tokens, as in the vLLM paper
    preemptions: int
    recomputed_tokens: int       # prompt and output tokens prefilled again after a preemption


@dataclass
class SimulationResult:
    """Per-iteration records (``steps``) and per-request records (``requests``), as numpy arrays.

    ``steps``, one entry per iteration: ``time_s`` (clock at its end), ``dt``,
    ``running`` (requests that prefilled or decoded, so also the tokens
    generated), ``waiting``, ``admitted``, ``preempted``, ``finished``,
    ``prefill_tokens``, ``decode_tokens``, ``tokens_stored`` and
    ``slots_reserved`` (whole blocks or whole regions; reserved minus stored is
    the waste, and reserved / block size the blocks in use).

    ``requests``, one entry per request in trace order: ``request_id``,
    ``arrival_s``, ``prompt_len``, ``output_len``, ``first_token_s``,
    ``finish_s``, ``preemptions``, ``recomputed_tokens``.
    """

    policy: str
    allocator: str
    slots_total: int
    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    config: dict = field(default_factory=dict)

    def kv_shares(self, *, while_queued: bool = False) -> tuple[float, float, float]:
        """Time-weighted KV shares: (tokens / reserved slots, reserved / pool, tokens / pool).

        ``while_queued`` keeps only the iterations after which requests were still
        waiting: the saturated server, without the drain at the end of a finite trace.
        """
        s = self.steps
        keep = s["waiting"] > 0 if while_queued else np.ones(len(s["dt"]), dtype=bool)
        dt = s["dt"][keep]
        if not dt.size:
            raise ValueError("no iteration had requests waiting (the server never saturated)")
        stored = float((s["tokens_stored"][keep] * dt).sum())
        reserved = float((s["slots_reserved"][keep] * dt).sum())
        pool = self.slots_total * float(dt.sum())
        return (stored / reserved if reserved else 1.0), reserved / pool, stored / pool

    def summary(self) -> Summary:
        s, r = self.steps, self.requests
        dt = s["dt"]
        total_time = float(dt.sum())
        token_share, reserved_share, pool_token_share = self.kv_shares()
        latency = r["finish_s"] - r["arrival_s"]
        makespan = float(r["finish_s"].max() - r["arrival_s"].min())
        out_tokens = int(r["output_len"].sum())
        return Summary(
            policy=self.policy, allocator=self.allocator, n_requests=len(latency), iterations=len(dt),
            makespan_s=makespan, output_tokens=out_tokens,
            throughput_tokens_s=out_tokens / makespan, requests_per_s=len(latency) / makespan,
            mean_running=float((s["running"] * dt).sum() / total_time), peak_running=int(s["running"].max()),
            kv_token_share=token_share, kv_reserved_share=reserved_share, kv_pool_token_share=pool_token_share,
            latency_p50_s=float(np.percentile(latency, 50)), latency_p90_s=float(np.percentile(latency, 90)),
            latency_p99_s=float(np.percentile(latency, 99)),
            ttft_p50_s=float(np.percentile(r["first_token_s"] - r["arrival_s"], 50)),
            normalized_latency_s=float(np.mean(latency / r["output_len"])),
            preemptions=int(r["preemptions"].sum()), recomputed_tokens=int(r["recomputed_tokens"].sum()),
        )
