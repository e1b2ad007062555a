"""Results the book quotes from papers, each with the table it comes from: one place for every quoted number."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """Perplexities one paper's table reports for one model and setting."""

    source: str                    # "GPTQ, Table 5": the paper and its table
    model: str
    setting: str
    fp16: float                    # the unquantized model's perplexity
    results: tuple[tuple[str, float], ...]   # (method, perplexity)


# WikiText-2 perplexity: GPTQ (Frantar et al., 2023) Table 5; AWQ (Lin et al., 2024) Table 4, INT4 g128.
QUANTIZED_PERPLEXITY = (
    Published("GPTQ, Table 5", "OPT-175B", "INT4 per row", 8.34, (("RTN", 10.54), ("GPTQ", 8.37))),
    Published("GPTQ, Table 5", "OPT-175B", "INT3 g128", 8.34, (("GPTQ", 8.45),)),
    Published("GPTQ, Table 5", "BLOOM-176B", "INT4 per row", 8.11, (("RTN", 8.37), ("GPTQ", 8.21))),
    Published("AWQ, Table 4", "Llama-2-7B", "INT4 g128", 5.47,
              (("RTN", 5.73), ("GPTQ", 5.69), ("GPTQ-R", 5.63), ("AWQ", 5.60))),
    Published("AWQ, Table 4", "Llama-2-13B", "INT4 g128", 4.88,
              (("RTN", 4.98), ("GPTQ", 4.98), ("GPTQ-R", 4.99), ("AWQ", 4.97))),
    Published("AWQ, Table 4", "Llama-2-70B", "INT4 g128", 3.32,
              (("RTN", 3.46), ("GPTQ", 3.42), ("GPTQ-R", 3.43), ("AWQ", 3.41))),
)


def quantized_perplexity(model: str, setting: str) -> Published:
    """The published row for ``model`` and ``setting`` (e.g. ``"Llama-2-7B"``, ``"INT4 g128"``)."""
    for row in QUANTIZED_PERPLEXITY:
        if (row.model, row.setting) == (model, setting):
            return row
    known = ", ".join(f"{r.model} / {r.setting}" for r in QUANTIZED_PERPLEXITY)
    raise ValueError(f"no published row for {model!r} / {setting!r}; known: {known}")
