"""A step-by-step simulator of an LLM server's scheduler: static vs continuous batching.

The server runs in *iterations*.  In each one every running request either
prefills its prompt (and emits its first token) or decodes one more token.
What changes between schedulers is *when requests may join and leave*:

- **static batching** forms a batch, runs it until its longest member has
  finished, and only then forms the next one; members that finish early sit
  idle, and their KV memory stays reserved until the batch ends;
- **continuous batching** (iteration-level scheduling, Orca; Yu et al., 2022)
  removes a request the iteration it finishes and admits waiting requests
  into every iteration, as long as their KV cache fits.

The KV cache is held by an allocator from :mod:`servebook.paging`: the paged
one (blocks on demand) or the naive one (``max_len`` reserved per request).
When a running request needs a new block and none is free, the most recently
admitted request is *preempted by recomputation*: its blocks are freed, it
goes back to the front of the queue, and when readmitted it prefills its
prompt plus the tokens it had already generated.

Time comes from the library's one step model, :class:`servebook.roofline.StepModel`:
an iteration is one step whose prefill and decode work add up (weights read
once, every stored token's KV read or written, the matmul and attention
FLOPs), bounded by the roofline.  The simulator counts tokens exactly; only
the seconds are modelled.

- :mod:`~servebook.batching.traces`: :class:`Request` and the traces (seeded, or from CSV);
- :mod:`~servebook.batching.simulator`: :func:`simulate`, a loop over the phases of
  an iteration (arrive, admit, schedule, preempt, step, finish);
- :mod:`~servebook.batching.results`: :class:`SimulationResult` (per-iteration and
  per-request records) and its :class:`Summary`.
"""

from .results import SimulationResult, Summary
from .simulator import ALLOCATORS, POLICIES, simulate
from .traces import Request, load_trace, lognormal_lengths, sample_trace, save_trace

__all__ = [
    "Request", "Summary", "SimulationResult",
    "sample_trace", "lognormal_lengths", "load_trace", "save_trace", "simulate", "POLICIES", "ALLOCATORS",
]
