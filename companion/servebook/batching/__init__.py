"""A step-by-step simulator of an LLM server: vLLM V1's scheduler over a paged (or naive) KV cache.

The server runs in *steps*.  Each step has a token budget shared by the
running requests' decodes and (chunked) prefills, runs the running requests
first, admits waiting ones only in a step that preempted nothing, and emits one
token for every request that has computed all it knows: the loop of vLLM
0.33.0's V1 scheduler (FCFS), restated in :mod:`~servebook.batching.simulator`.
Two teaching baselines sit beside it, which vLLM does not have:

- **static batching** forms a batch, runs it until its longest member has
  finished, and only then forms the next one; members that finish early sit
  idle, and their KV memory stays reserved until the batch ends;
- **continuous batching** (iteration-level scheduling, Orca; Yu et al., 2022)
  is vLLM's: a request leaves the step it finishes, and waiting requests join
  every step, as long as their KV cache fits.

The KV cache is held by an allocator from :mod:`servebook.paging`: the paged
one (blocks on demand) or the naive one (``max_len`` reserved per request).
When a running request needs a new block and none is free, the *last* running
request is preempted by recomputation: its blocks are freed, it goes back to
the head of the queue, and when readmitted it prefills its prompt plus the
tokens it had already generated.

Time comes from the library's one step model, :class:`servebook.roofline.StepModel`:
a step's prefill and decode work add up (weights read once, every stored
token's KV read or written, the matmul and attention FLOPs, logits for each
scheduled sequence's last position), bounded by the roofline.  The simulator
counts tokens exactly; only the seconds are modelled.

- :mod:`~servebook.batching.traces`: :class:`Request` and the traces (seeded, or from CSV);
- :mod:`~servebook.batching.simulator`: :func:`simulate`, the loop over the phases of a step;
- :mod:`~servebook.batching.cohort`: the running requests that decode, advanced by their events
  (a block to take, a block to hash, a last token) rather than token by token;
- :mod:`~servebook.batching.results`: :class:`SimulationResult` (per-step and
  per-request records, per-token steps) and its :class:`Summary`;
- :mod:`~servebook.batching.latency`: TTFT, TPOT, inter-token and end-to-end
  latency, percentiles, goodput under an :class:`SLO`, Little's law;
- :mod:`~servebook.batching.defaults`: vLLM 0.33.0's defaults (caps per device) from its facts file;
- :mod:`~servebook.batching.reference`: the engine replayed on the traces vLLM 0.33.0 itself was driven on.
"""

from .defaults import VLLM_VERSION, Limits, device_tier, vllm_facts, vllm_limits
from .latency import SLO, attainment, goodput, inter_token_latencies, littles_law, meets, percentiles, request_latencies
from .reference import Comparison, reference_comparison, reference_records, replay
from .results import SimulationResult, Summary
from .simulator import ALLOCATORS, POLICIES, simulate
from .traces import Request, load_trace, lognormal_lengths, sample_trace, save_trace

__all__ = [
    "Request", "Summary", "SimulationResult",
    "sample_trace", "lognormal_lengths", "load_trace", "save_trace", "simulate", "POLICIES", "ALLOCATORS",
    "SLO", "request_latencies", "inter_token_latencies", "percentiles", "meets", "attainment", "goodput", "littles_law",
    "VLLM_VERSION", "Limits", "vllm_facts", "vllm_limits", "device_tier",
    "Comparison", "reference_comparison", "reference_records", "replay",
]
