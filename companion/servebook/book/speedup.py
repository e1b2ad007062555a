"""How much faster a weight scheme makes a step than FP16 weights, by the roofline bound.

Chapter 01's figure and summary, its exercises and the tests read this one
function, so the speed-up they quote is computed once.  (It is roofline
arithmetic; it waits here while the roofline module is rewritten.)
"""

from __future__ import annotations

from .. import roofline
from ..gpus import GPU
from ..models import ModelSpec


def weight_scheme_speedup(model: ModelSpec | str, device: GPU | str, tokens: int, weights: str) -> float:
    """Bound of a ``tokens``-token step with FP16 weights over its bound with ``weights``.

    The step is ``tokens`` one-token sequences: the matmuls of a ``tokens``-token
    step, without an attention term that grows with ``tokens``², and without a
    KV cache to read, so only the weights tell the schemes apart.
    """
    def step_time(scheme: str) -> float:
        return roofline.bound(roofline.prefill_step(model, tokens, 1, scheme), device).time

    return step_time("W16A16") / step_time(weights)
