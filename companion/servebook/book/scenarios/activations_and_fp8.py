"""Set-ups of the chapter on activations, the KV cache and FP8: one serving case."""

from __future__ import annotations

from dataclasses import dataclass

from ... import gpus, memory, models
from ...parallel import GPU_MEMORY_UTILIZATION
from ...parallel.reserve import Server


@dataclass(frozen=True)
class KVServingCase:
    """A model on a GPU serving requests of ``context`` tokens: how many fit under each KV-cache scheme."""

    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    context: int = 32_768
    weights_dtype: str = "fp16"
    gpu_fraction: float = GPU_MEMORY_UTILIZATION  # vLLM 0.33.0's default share of total memory

    @property
    def spec(self):
        return models.get(self.model)

    @property
    def device(self):
        return gpus.get(self.gpu)

    @property
    def title(self) -> str:
        return f"{self.spec.display_name} on {self.device.display_name}"

    def budget(self) -> int:
        return Server(gpu_memory_utilization=self.gpu_fraction).budget(self.device.memory)

    def per_request(self, scheme: str) -> int:
        from ...kvquant import kv_bytes_per_token

        return kv_bytes_per_token(self.spec, scheme) * self.context

    def plan(self, scheme: str) -> memory.CapacityPlan:
        """The capacity plan (weights, KV pool, requests that fit) with the KV cache in ``scheme``."""
        weights = memory.model_weight_bytes(self.spec, self.weights_dtype)
        return memory.capacity_plan(self.budget(), weights, self.per_request(scheme))


KV_SERVING = KVServingCase()
"""Llama-3.1-8B in BF16 on one H100 SXM, requests of 32K tokens: the chapter's KV-cache capacity case."""
