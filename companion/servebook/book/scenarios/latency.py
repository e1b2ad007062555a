"""The latency chapter's scenarios: chapter 04's server under vLLM's caps, chat traffic with a shared system prompt."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ... import batching
from ...checks import lookup
from .continuous_batching import BATCHING_SERVER

LATENCY_RATES = (1.0, 2.0, 4.0, 6.0, 8.0)
"""Arrival rates (requests per second) of the throughput-latency sweep."""

LATENCY_SLO = batching.SLO(ttft_s=1.0, tpot_s=0.030)
"""The chapter's service-level objective: first token within 1 s, then at most 30 ms per token."""


@dataclass(frozen=True)
class ServerConfig:
    """One line of the sweep: a policy and the scheduler options that differ from vLLM 0.33.0's defaults."""

    label: str
    options: tuple[tuple[str, object], ...]

    def simulate(self, trace) -> batching.SimulationResult:
        return BATCHING_SERVER.simulate(trace, **self.scheduler_options())

    def scheduler_options(self) -> dict:
        return latency_limits() | dict(self.options)


LATENCY_CONFIGS: tuple[ServerConfig, ...] = (
    # A static batch is not vLLM's: it gets no token budget, or its batches would be a few prompts each.
    ServerConfig("static batching", (("policy", "static"), ("max_num_batched_tokens", None))),
    ServerConfig("continuous, whole prompts", (("chunked_prefill", False),)),
    ServerConfig("continuous, chunked prefill", ()),
    ServerConfig("continuous, chunked + prefix cache", (("prefix_caching", True),)),
)
"""The four servers of the throughput-latency figure, on the same paged KV pool."""


def latency_limits() -> dict:
    """vLLM 0.33.0's server defaults for chapter 04's A100: caps, chunked prefill, no watermark."""
    return batching.vllm_limits(BATCHING_SERVER.gpu).as_options() | dict(chunked_prefill=True, watermark=0.0)


@dataclass(frozen=True)
class ChatTraffic:
    """Chat requests: a system prompt every request shares, then a user turn and an answer of
    log-normal lengths, arriving as a Poisson process."""

    system_prompt: int = 400   # tokens
    turn_mean: int = 200       # mean tokens of a user turn
    answer_mean: int = 120     # mean tokens of an answer
    n_requests: int = 150
    seed: int = 11


CHAT = ChatTraffic()
"""The latency chapter's traffic."""


@lru_cache(maxsize=16)
def chat_trace(arrival_rate: float) -> tuple[batching.Request, ...]:
    """:data:`CHAT` traffic at ``arrival_rate`` requests per second, on chapter 04's server's context."""
    return tuple(batching.sample_trace(CHAT.n_requests, seed=CHAT.seed, prompt_mean=CHAT.turn_mean,
                                       output_mean=CHAT.answer_mean, max_len=BATCHING_SERVER.max_len,
                                       arrival_rate=arrival_rate, shared_prefix_len=CHAT.system_prompt))


@lru_cache(maxsize=64)
def _served(arrival_rate: float, options: tuple[tuple[str, object], ...]) -> batching.SimulationResult:
    # One cache for every run of the chapter: the sweep's servers and the caps table share runs.
    return BATCHING_SERVER.simulate(chat_trace(arrival_rate), **dict(options))


def latency_run(label: str, arrival_rate: float) -> batching.SimulationResult:
    """One server of :data:`LATENCY_CONFIGS` (by label) on :func:`chat_trace` at ``arrival_rate``."""
    config = lookup("server", label, {c.label: c for c in LATENCY_CONFIGS}, key=str)
    return _served(arrival_rate, tuple(sorted(config.scheduler_options().items())))


def latency_sweep() -> dict[tuple[str, float], batching.SimulationResult]:
    """Every server of :data:`LATENCY_CONFIGS` at every rate of :data:`LATENCY_RATES`."""
    return {(c.label, rate): latency_run(c.label, rate) for c in LATENCY_CONFIGS for rate in LATENCY_RATES}


def budget_run(max_num_batched_tokens: int, max_num_seqs: int = 256,
               arrival_rate: float = 4.0) -> batching.SimulationResult:
    """The chunked server at one rate with other caps: what the token budget and the sequence cap trade."""
    options = latency_limits() | dict(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
    return _served(arrival_rate, tuple(sorted(options.items())))
