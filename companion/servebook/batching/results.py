"""What a simulated run recorded (per iteration, per request) and what it achieved (its summary)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .latency import percentiles, request_latencies


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
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    normalized_latency_s: float  # mean of latency / output tokens, as in the vLLM paper
    preemptions: int
    recomputed_tokens: int       # prompt and output tokens prefilled again after a preemption


@dataclass
class SimulationResult:
    """Per-step records (``steps``) and per-request records (``requests``), as numpy arrays.

    ``steps``, one entry per step: ``time_s`` (clock at its end), ``dt``,
    ``running`` (requests scheduled in the step), ``waiting`` (queued after
    it), ``admitted``, ``preempted``, ``finished``, ``prefill_tokens``,
    ``decode_tokens``, ``cached_tokens`` (prompt tokens the step's admissions
    took from the prefix cache), ``tokens_stored`` and ``slots_reserved``
    (whole blocks or whole regions; reserved minus stored is the waste),
    ``blocks_free`` (free or cached blocks; regions for the naive allocator)
    and ``in_flight`` (requests holding KV memory after the step).

    ``requests``, one entry per request in trace order: ``request_id``,
    ``arrival_s``, ``prompt_len``, ``output_len``, ``scheduled_s`` (start of
    the step that first scheduled it), ``first_token_s``, ``finish_s``,
    ``preemptions``, ``recomputed_tokens``.

    ``token_steps``: the step at which each output token came out, request after
    request (``token_offsets[i]`` is where request ``i``'s start), so that
    per-token times are one array lookup, ``steps["time_s"][token_steps]``.
    """

    policy: str
    allocator: str
    slots_total: int
    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    config: dict = field(default_factory=dict)
    token_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, policy: str, allocator: str, slots_total: int, steps: dict, trace: list, server,
           config: dict) -> SimulationResult:
        """The result of a finished server run (``server`` is the simulator's, after its last step)."""
        ordered = [server.lives[r.request_id] for r in trace]
        requests = {
            "request_id": np.array([v.req.request_id for v in ordered]),
            "arrival_s": np.array([v.req.arrival_s for v in ordered]),
            "prompt_len": np.array([v.req.prompt_len for v in ordered]),
            "output_len": np.array([v.req.output_len for v in ordered]),
            "scheduled_s": np.array([v.scheduled_s for v in ordered]),
            "first_token_s": np.array([v.first_token_s for v in ordered]),
            "finish_s": np.array([v.finish_s for v in ordered]),
            "preemptions": np.array([v.preemptions for v in ordered]),
            "recomputed_tokens": np.array([v.recomputed for v in ordered]),
        }
        token_steps = np.frombuffer(server.token_steps, dtype=np.int64)  # the server's buffer, no copy: it is done
        return cls(policy, allocator, slots_total, steps, requests, config, token_steps)

    @property
    def token_offsets(self) -> np.ndarray:
        """Where each request's tokens start in ``token_steps`` (one more entry: the end)."""
        return np.concatenate([[0], np.cumsum(self.requests["output_len"])])

    def token_times(self, index: int) -> np.ndarray:
        """When each output token of the ``index``-th request (trace order) came out, in seconds."""
        lo, hi = self.token_offsets[index:index + 2]
        return self.steps["time_s"][self.token_steps[lo:hi]]

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
        lat = request_latencies(self)
        latency = lat["e2e_s"]
        e2e, ttft = percentiles(latency), percentiles(lat["ttft_s"], (50, 99))
        tpot = percentiles(lat["tpot_s"], (50, 99), empty=float("nan"))
        makespan = float(r["finish_s"].max() - r["arrival_s"].min())
        out_tokens = int(r["output_len"].sum())
        return Summary(
            policy=self.policy, allocator=self.allocator, n_requests=len(latency), iterations=len(dt),
            makespan_s=makespan, output_tokens=out_tokens,
            throughput_tokens_s=out_tokens / makespan, requests_per_s=len(latency) / makespan,
            mean_running=float((s["running"] * dt).sum() / total_time), peak_running=int(s["running"].max()),
            kv_token_share=token_share, kv_reserved_share=reserved_share, kv_pool_token_share=pool_token_share,
            latency_p50_s=e2e[50], latency_p90_s=e2e[90], latency_p99_s=e2e[99],
            ttft_p50_s=ttft[50], ttft_p99_s=ttft[99], tpot_p50_s=tpot[50], tpot_p99_s=tpot[99],
            normalized_latency_s=float(np.mean(latency / r["output_len"])),
            preemptions=int(r["preemptions"].sum()), recomputed_tokens=int(r["recomputed_tokens"].sum()),
        )

