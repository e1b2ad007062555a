"""A block-size explorer: one request's slots and bytes, naive against paged.

:func:`paging_explorer_text` computes everything the explorer shows from its
inputs, with the same functions the chapter uses (:mod:`servebook.paging`,
:mod:`servebook.memory`); :func:`paging_explorer` only collects inputs and
displays that text, so what a test checks is what a reader sees.
"""

from __future__ import annotations

from fractions import Fraction

from ... import memory, models, paging
from ...models import ModelSpec
from ...units import MiB
from ..scenarios import PAGED_REQUEST


def paging_explorer_text(n_tokens: int, block_size: int = 16, max_len: int = 2048,
                         model: ModelSpec | str = "llama-2-13b", dtype: str = "fp16") -> str:
    """Slots reserved, slots empty and their bytes for one ``n_tokens`` request, naive and paged."""
    spec = models.resolve(model)
    per_token = memory.kv_bytes_per_token(spec, dtype)
    naive_empty = paging.naive_waste(n_tokens, max_len)
    blocks = paging.blocks_needed(n_tokens, block_size)
    slots = paging.paged_slots(n_tokens, block_size)
    paged_empty = paging.paged_waste(n_tokens, block_size)

    def share(part: int, whole: int) -> str:
        return f"{float(Fraction(part, whole)):.2%}" if whole else "n/a"

    ratio = f"{naive_empty / paged_empty:,.1f} times the paged waste" if paged_empty else "paged waste is zero"
    rows = [
        ("request", f"{n_tokens:,} tokens on {spec.display_name} ({dtype}): {per_token:,} bytes per token"),
        ("naive", f"{max_len:,} slots reserved, {naive_empty:,} empty ({share(naive_empty, max_len)} of them) "
                  f"= {naive_empty * per_token / MiB:,.2f} MiB"),
        ("paged", f"{blocks:,} blocks of {block_size} = {slots:,} slots, {paged_empty} empty "
                  f"({share(paged_empty, slots)} of them) = {paged_empty * per_token / MiB:,.2f} MiB"),
        ("worst case", f"{block_size - 1} empty slots per request with blocks of {block_size}"),
        ("naive waste", ratio),
    ]
    return "\n".join(f"{label:<12} {value}" for label, value in rows)


def paging_explorer(n_tokens: int = PAGED_REQUEST.n_tokens, block_size: int = PAGED_REQUEST.block_size,
                    max_len: int = PAGED_REQUEST.max_len, model: str = "llama-2-13b"):
    """The interactive explorer (ipywidgets): request length, block size and max_len; bad input shows its error.

    A :class:`~.layout.Panel` whose ``controls`` are named after :func:`paging_explorer_text`'s arguments.
    """
    import ipywidgets as w

    from .layout import Panel

    panel = Panel({
        "n_tokens": ("tokens n", w.BoundedIntText(value=n_tokens, min=0, max=10**7)),
        "block_size": ("block size", w.Dropdown(options=[1, 2, 4, 8, 16, 32, 64, 128, 256], value=block_size)),
        "max_len": ("max_len", w.BoundedIntText(value=max_len, min=1, max=10**7)),
        "model": ("model", w.Dropdown(options=[(models.display_name(n), n) for n in models.names()], value=model)),
    })
    panel.follow(lambda *_: panel.show(lambda: paging_explorer_text(
        **{name: box.value for name, box in panel.controls.items()})))
    return panel
