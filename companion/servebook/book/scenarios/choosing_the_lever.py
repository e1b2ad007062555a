"""Chapter 08's scenarios: the two workloads of the lever exercise, the source's open numbers filled in."""

from __future__ import annotations

from dataclasses import dataclass

from ... import advisor
from ...advisor import Workload


@dataclass(frozen=True)
class Scenario:
    """A model, a GPU and a workload, with the story they stand for."""

    name: str
    model: str
    gpu: str
    workload: Workload
    story: str

    def advise(self) -> advisor.Advice:
        return advisor.advise(self.model, self.gpu, self.workload)


LEVER_SCENARIOS: dict[str, Scenario] = {
    "A": Scenario(
        "A: a chatbot of short sessions", "llama-2-13b", "a100-80gb-sxm",
        Workload(prompt_len=30, output_len=30, batch=1000, max_len=2048, goal="throughput"),
        "Thousands of short chat sessions, 60 tokens each on average (read here as a 30-token prompt and a "
        "30-token answer, 1,000 sessions in flight), on a server that reserves max_len = 2,048 KV slots per "
        "request: it keeps running out of memory."),
    "B": Scenario(
        "B: batch summarisation", "llama-3-70b", "h200",
        Workload(prompt_len=6000, output_len=250, batch=16, max_len=8192, goal="throughput"),
        "A summarisation job: prompts of many thousands of tokens (read here as 6,000 in, 250 out) at a large "
        "batch (16), throughput is all that matters, and the model barely fits the GPU (a 70B model in BF16 on "
        "one 141 GB H200)."),
}
