"""Chapter 01's scenarios: one model on one GPU, the steps on its roofline, and the two memory buckets."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ... import gpus, memory, models, roofline
from ...units import GB


@dataclass(frozen=True)
class RooflineCase:
    """A model on a GPU, with the decode and prefill steps chapter 01 places on the GPU's roofline.

    ``context_len`` is the cache every decode step of the chapter reads; ``max_step_tokens`` the
    largest step whose speed under each weight scheme the chapter plots.
    """

    model: str = "llama-2-13b"
    gpu: str = "a100-80gb-sxm"
    context_len: int = 512
    decode_batches: tuple[int, ...] = (1, 16, 64, 256)
    prefills: tuple[tuple[int, int], ...] = ((1, 512), (8, 2048))   # (batch, prompt_len)
    max_step_tokens: int = 16_384

    @cached_property
    def spec(self) -> models.ModelSpec:
        return models.get(self.model)

    @cached_property
    def device(self) -> gpus.GPU:
        return gpus.get(self.gpu)

    def decode_bounds(self) -> list[roofline.Bound]:
        """One decode step per batch size of ``decode_batches``, at ``context_len`` tokens cached."""
        return [roofline.bound(roofline.decode_step(self.spec, batch, self.context_len), self.device)
                for batch in self.decode_batches]

    def prefill_bounds(self) -> list[roofline.Bound]:
        """One prefill step per ``(batch, prompt_len)`` of ``prefills``."""
        return [roofline.bound(roofline.prefill_step(self.spec, batch, prompt), self.device)
                for batch, prompt in self.prefills]


PREFILL_DECODE = RooflineCase()
"""Chapter 01's pair: Llama-2-13B on an A100 80GB SXM, decode at 512 tokens cached (its exercises reuse it)."""


@dataclass(frozen=True)
class MemoryBuckets:
    """A model's weights and a batch's KV cache on one GPU of ``gpu_gb`` GB, for each weight precision."""

    n_params: int = 13 * 10**9
    model: str = "llama-2-13b"     # whose FP16 KV cache
    seq_len: int = 4096
    batch: int = 16
    gpu_gb: int = 80

    @property
    def gpu(self) -> int:
        return self.gpu_gb * GB

    @property
    def kv(self) -> int:
        return memory.kv_cache_bytes(self.model, seq_len=self.seq_len, batch=self.batch)

    def weights(self, dtype: str = "fp16") -> int:
        return memory.weight_bytes(self.n_params, dtype)

    def free(self, dtype: str = "fp16") -> int:
        """Bytes of the GPU neither bucket fills."""
        return self.gpu - self.weights(dtype) - self.kv


MEMORY_BUCKETS = MemoryBuckets()
"""Chapter 01's two buckets: a 13B model serving 16 requests of 4,096 tokens on an 80 GB GPU."""
