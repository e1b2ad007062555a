"""Chapter 04's scenarios: one server under batched traffic."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from ... import batching, gpus, memory, models, roofline
from ...units import GiB


@dataclass(frozen=True)
class BatchingServer:
    """A model in FP16 on a GPU: the weights and a flat overhead come off the top, the rest is the KV pool.

    ``kv_slots`` is the pool in tokens; ``cost`` the library's step model on this GPU, which turns
    the simulator's iterations into seconds.
    """

    model: str = "llama-2-13b"
    gpu: str = "a100-40gb-sxm"
    overhead: int = 4 * GiB      # activations, CUDA context and fragmentation: the capacity chapter's flat guess
    max_len: int = 2048          # tokens a naive server reserves per request
    block_size: int = 16         # tokens per block of the paged allocator
    watermark: float = 0.01      # blocks an admission leaves free while others run (vLLM 0.33.0's default: 0)

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @cached_property
    def plan(self) -> memory.CapacityPlan:
        return memory.capacity_plan(gpu=gpus.get(self.gpu).memory, weights=memory.weight_bytes(self.spec.n_params),
                                    per_request=memory.kv_cache_bytes(self.spec, seq_len=self.max_len),
                                    overhead=self.overhead)

    @property
    def kv_slots(self) -> int:
        """Token slots in the KV pool."""
        return self.plan.kv_pool // memory.kv_bytes_per_token(self.spec)

    @cached_property
    def cost(self) -> roofline.StepModel:
        return roofline.StepModel(self.spec, device=self.gpu)

    def simulate(self, trace, **options) -> batching.SimulationResult:
        """Serve ``trace`` on this server: its KV pool, reservations, blocks and step model.

        Chapter 04's server has vLLM's cap of running requests for its GPU but no token
        budget (a prompt is prefilled in one step), so that its four runs differ
        only in the policy and the allocator; the latency chapter adds the budget.
        ``options`` (``policy``, ``allocator``, ``watermark``, ``max_num_batched_tokens``, ...)
        go to :func:`servebook.batching.simulate`.
        """
        options = dict(max_num_seqs=batching.vllm_limits(self.gpu).max_num_seqs, max_num_batched_tokens=None,
                       watermark=self.watermark) | options
        return batching.simulate(trace, kv_slots=self.kv_slots, max_len=self.max_len, block_size=self.block_size,
                                 cost=self.cost, **options)


BATCHING_SERVER = BatchingServer()
"""Chapter 04's server: Llama-2-13B in FP16 on an A100 40GB, 4 GiB of overhead, 2,048-token reservations."""


@dataclass(frozen=True)
class BatchTraffic:
    """Chapter 04's traffic: log-normal prompt and output lengths, about those of the vLLM paper's ShareGPT trace."""

    n_requests: int = 1000
    prompt_mean: int = 160   # tokens
    output_mean: int = 340   # tokens
    seed: int = 0


BATCH_JOB = BatchTraffic()
"""The chapter's offline batch job: every request queued at time 0."""


@lru_cache(maxsize=8)
def batching_trace(n_requests: int = BATCH_JOB.n_requests, seed: int = BATCH_JOB.seed,
                   arrival_rate: float | None = None) -> tuple[batching.Request, ...]:
    """:data:`BATCH_JOB`'s lengths for ``n_requests`` requests.

    All queued at time 0 (an offline batch job), or arriving as a Poisson process of ``arrival_rate``
    requests per second (a live service).
    """
    return tuple(batching.sample_trace(n_requests, seed=seed, prompt_mean=BATCH_JOB.prompt_mean,
                                       output_mean=BATCH_JOB.output_mean, max_len=BATCHING_SERVER.max_len,
                                       arrival_rate=arrival_rate))


@lru_cache(maxsize=4)
def batching_runs(n_requests: int = BATCH_JOB.n_requests,
                  seed: int = BATCH_JOB.seed) -> dict[tuple[str, str], batching.SimulationResult]:
    """The four runs of chapter 04: static and continuous batching, naive and paged allocation."""
    trace = batching_trace(n_requests, seed)
    return {(policy, allocator): BATCHING_SERVER.simulate(trace, policy=policy, allocator=allocator)
            for policy in batching.POLICIES for allocator in batching.ALLOCATORS}
