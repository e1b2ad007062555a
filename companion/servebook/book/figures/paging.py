"""Figures of the paged-attention chapter: naive vs paged waste, block tables, waste against block size."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import ConnectionPatch, Rectangle

from ...paging import PagedAllocator, mean_tail_waste, tail_share
from .. import fmt, scenarios
from . import _style

TAIL = "#f0ad4e"  # amber: the empty tail of the last block


def naive_vs_paged(request: scenarios.PagedRequest = scenarios.PAGED_REQUEST) -> Figure:
    """Token slots of one request: a naive max_len reservation against whole blocks
    (the paged-attention chapter's worked example 2)."""
    n_tokens, max_len, block_size = request.n_tokens, request.max_len, request.block_size
    naive_waste, n_blocks, tail = request.naive_waste, request.blocks, request.paged_waste
    fig, (top, zoom) = _style.new_figure(7.2, 3.8, nrows=2, height_ratios=[1.1, 1])
    with matplotlib.rc_context(_style.RC):
        for ax in (top, zoom):
            ax.grid(False)
            ax.spines[["left"]].set_visible(False)
        rows = {"naive": 1, "paged": 0}
        top.barh(rows["naive"], n_tokens, color=_style.KV, height=0.55, label=f"tokens stored ({n_tokens})")
        top.barh(rows["naive"], naive_waste, left=n_tokens, color=_style.WASTE, height=0.55,
                 label=f"reserved, never used ({naive_waste:,})")
        top.barh(rows["paged"], n_tokens, color=_style.KV, height=0.55)
        top.barh(rows["paged"], tail, left=n_tokens, color=TAIL, height=0.55,
                 label=f"empty tail of the last block ({tail})")
        top.set_yticks([rows["naive"], rows["paged"]], [f"naive\n(max_len {max_len:,})",
                                                        f"paged\n(blocks of {block_size})"])
        top.set_xlim(0, max_len)
        top.set_xlabel("token slots reserved for one request")
        top.set_title(f"A {n_tokens}-token request: {naive_waste:,} slots wasted naively, {tail} with paging")
        # Beside the short paged bar, where nothing is drawn (upper right sat on the red bar).
        top.legend(loc="lower right", bbox_to_anchor=(1, 0.0), fontsize=8)
        top.add_patch(Rectangle((0, -0.45), (n_blocks + 1) * block_size, 0.9, fill=False,
                                edgecolor=_style.MUTED, linestyle=":", linewidth=1))

        zoom.barh(0, n_tokens, color=_style.KV, height=0.5)
        zoom.barh(0, tail, left=n_tokens, color=TAIL, height=0.5)
        for k in range(n_blocks + 1):
            zoom.axvline(k * block_size, ymin=0.2, ymax=0.8, color=_style.ACCENT, linewidth=1.2)
        for k in range(n_blocks):
            zoom.text((k + 0.5) * block_size, 0.42, f"block {k}", ha="center", va="bottom", fontsize=8,
                      color=_style.ACCENT)
        zoom.set_yticks([0], ["paged,\nzoomed"])
        zoom.set_ylim(-0.6, 0.75)
        zoom.set_xlim(0, (n_blocks + 1) * block_size)
        zoom.set_xticks([k * block_size for k in range(n_blocks + 2)])
        zoom.set_xlabel(f"{n_blocks} blocks = {n_blocks * block_size} slots for {n_tokens} tokens")
    return fig


def naive_vs_paged_alt(request: scenarios.PagedRequest = scenarios.PAGED_REQUEST) -> str:
    """The alt text of :func:`naive_vs_paged`: the request, its naive reservation, its blocks and their tail."""
    n_tokens, max_len, block_size = request.n_tokens, request.max_len, request.block_size
    n_blocks, tail = request.blocks, request.paged_waste
    if not 0 < tail < block_size:  # the text describes a last block partly filled
        raise RuntimeError(f"naive_vs_paged_alt describes a partly filled last block; its tail is {tail} slots")
    return (f"Top panel: two horizontal bars on a scale of 0 to {max_len:,} token slots. The naive bar is a short "
            f"teal segment of {n_tokens:,} followed by a long red segment to {max_len:,}. The paged bar is the same "
            f"teal segment with a thin amber tail ending at {n_blocks * block_size:,}. Bottom panel: the paged bar "
            f"zoomed to 0 to {(n_blocks + 1) * block_size:,} slots, with blue lines every {block_size} slots marking "
            f"blocks 0 to {n_blocks - 1}; the amber tail fills the last {tail} slots of block {n_blocks - 1}.")


def _walkthrough_allocator() -> PagedAllocator:
    """The chapter's walk-through (see :func:`servebook.book.scenarios.paging_walkthrough`)."""
    return scenarios.paging_walkthrough()


def _owners(kv: PagedAllocator) -> dict[int, list]:
    """Physical block id -> the sequences whose block tables hold it."""
    owners: dict[int, list] = {}
    for s in kv.sequences:
        for b in kv.block_table(s):
            owners.setdefault(b, []).append(s)
    return owners


def _span(ids: list[int]) -> str:
    """Block ids as prose: '2 to 5' when they run without a gap, else '0, 3 and 7'."""
    if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]} to {ids[-1]}"
    return fmt.listed(ids)


def block_tables(allocator: PagedAllocator | None = None) -> Figure:
    """Logical blocks of each sequence, arrows to the physical blocks they use; shared blocks outlined."""
    kv = allocator if allocator is not None else _walkthrough_allocator()
    seqs = kv.sequences
    colours = {s: _style.SEQUENCE[i % len(_style.SEQUENCE)] for i, s in enumerate(seqs)}
    owners = _owners(kv)
    # The page shows a figure about 7 inches wide: drawn wider, it is scaled down and its text shrinks.
    fig, ax = _style.new_figure(7.2, 1.25 + 0.8 * len(seqs) + 1.6)
    n_phys = kv.pool.num_blocks
    with matplotlib.rc_context(_style.RC):
        ax.set_axis_off()
        _physical_blocks(ax, kv, owners, colours)
        _logical_blocks(ax, kv, colours)
        top = 1.9 + 1.05 * len(seqs)
        ax.set_xlim(-1.6, n_phys * 1.25)
        ax.set_ylim(-0.95, top + 0.2)
        ax.set_title("Block tables map each sequence's logical blocks to physical blocks\n"
                     "(red outline, hatched: shared)", fontsize=10.5)
    return fig


def block_tables_alt(allocator: PagedAllocator | None = None) -> str:
    """The alt text of :func:`block_tables`: its sequences, its pool, and which blocks are shared, owned or free."""
    kv = allocator if allocator is not None else _walkthrough_allocator()
    seqs, owners, bs = kv.sequences, _owners(kv), kv.block_size
    blocks = kv.pool.blocks
    shared = [b.block_id for b in blocks if len(owners.get(b.block_id, ())) > 1]
    owned = [b.block_id for b in blocks if len(owners.get(b.block_id, ())) == 1]
    free = [b.block_id for b in blocks if b.ref_count == 0]
    refs = {blocks[b].ref_count for b in shared}
    if (any(kv.num_tokens(s) % bs == 0 for s in seqs) or len(refs) != 1 or len(owned) < 2 or len(free) < 2
            or any(set(owners[b]) != set(seqs) for b in shared) or any(blocks[b].block_hash for b in free)):
        raise RuntimeError("block_tables_alt describes partly filled last blocks, blocks shared by every sequence "
                           "with one reference count, two or more owned blocks and two or more free, uncached ones")
    names = fmt.listed([s.replace("'", "-prime") for s in seqs])
    return (f"Diagram. {fmt.spelled(len(seqs)).capitalize()} rows of small boxes at the top, one per sequence "
            f"({names}), each box a logical block of {bs} token cells coloured by sequence, with the last box of each "
            f"row partly empty. Arrows run down to a row of {kv.pool.num_blocks} physical blocks: blocks "
            f"{_span(shared)} have thick red outlines, hatching and the label ref {refs.pop()}, and receive arrows "
            f"from all {fmt.spelled(len(seqs))} sequences; blocks {_span(owned)} are coloured by the one sequence "
            f"that uses each; blocks {_span(free)} are light grey and free.")


_PHYS_Y = 0.0  # the row of physical blocks; each sequence's row of logical blocks sits above it


def _physical_blocks(ax, kv: PagedAllocator, owners: dict[int, list], colours: dict) -> None:
    """The pool: a row of boxes, one cell per slot, coloured by owner; shared blocks hatched and outlined."""
    bs = kv.block_size
    cell = 1.0 / bs
    for block in kv.pool.blocks:
        x = block.block_id * 1.25
        shared = len(owners.get(block.block_id, ())) > 1
        for k in range(bs):
            filled = k < len(block.tokens)
            if block.ref_count == 0:
                face = _style.FREE if not filled else "#bcd9d7"
            elif shared:
                face = "#ffffff"
            else:
                face = colours[owners[block.block_id][0]] if filled else "#ffffff"
            ax.add_patch(Rectangle((x + k * cell, _PHYS_Y), cell, 0.8, facecolor=face,
                                   edgecolor="#ffffff", linewidth=0.5))
            if shared and filled:
                ax.add_patch(Rectangle((x + k * cell, _PHYS_Y), cell, 0.8, facecolor="#ffffff",
                                       edgecolor=_style.MUTED, hatch="////", linewidth=0))
        ax.add_patch(Rectangle((x, _PHYS_Y), 1.0, 0.8, fill=False,
                               edgecolor=_style.WASTE if shared else _style.MUTED,
                               linewidth=2.2 if shared else 0.8))
        label = f"{block.block_id}"
        if block.ref_count > 1:
            label += f"\nref {block.ref_count}"
        elif block.ref_count == 0 and block.block_hash is not None:
            label += "\ncached"
        ax.text(x + 0.5, _PHYS_Y - 0.12, label, ha="center", va="top", fontsize=9, color=_style.MUTED)
    ax.text(-0.2, _PHYS_Y + 0.4, "physical\nblocks", ha="right", va="center", fontsize=10)


def _logical_blocks(ax, kv: PagedAllocator, colours: dict) -> None:
    """Each sequence's block table: its logical blocks in a row, an arrow from each to its physical block."""
    bs = kv.block_size
    cell = 1.0 / bs
    for row, s in enumerate(reversed(kv.sequences)):
        y = 1.9 + 1.05 * row
        for logical, phys in enumerate(kv.block_table(s)):
            x = logical * 1.25
            n_filled = len(kv.pool.blocks[phys].tokens)
            for k in range(bs):
                ax.add_patch(Rectangle((x + k * cell, y), cell, 0.6,
                                       facecolor=colours[s] if k < n_filled else "#ffffff",
                                       edgecolor="#ffffff", linewidth=0.5))
            ax.add_patch(Rectangle((x, y), 1.0, 0.6, fill=False, edgecolor=colours[s], linewidth=1))
            ax.text(x + 0.5, y + 0.66, f"L{logical}", ha="center", va="bottom", fontsize=9, color=_style.MUTED)
            ax.add_artist(ConnectionPatch((x + 0.5, y), (phys * 1.25 + 0.5, _PHYS_Y + 0.8), "data", "data",
                                          arrowstyle="-|>", color=colours[s], linewidth=0.9, alpha=0.8,
                                          shrinkA=1, shrinkB=1, zorder=0))
        ax.text(-0.2, y + 0.3, f"seq {s}\n{kv.num_tokens(s)} tokens", ha="right", va="center", fontsize=10,
                color=colours[s])


def _tail_waste(mix: scenarios.LengthMix) -> tuple[tuple[int, ...], list[float], list[float]]:
    """The block sizes of ``mix``, and at each the mean empty slots per request and the share of slots empty."""
    block_sizes = mix.block_sizes
    return (block_sizes, [mean_tail_waste(mix.lengths, b) for b in block_sizes],
            [tail_share(mix.lengths, b) for b in block_sizes])


def waste_vs_block_size(mix: scenarios.LengthMix = scenarios.BLOCK_SIZE_MIX) -> Figure:
    """Tail waste per request against block size: about (block_size - 1) / 2, never more than block_size - 1."""
    block_sizes, mean_waste, share = _tail_waste(mix)
    fig, (left, right) = _style.new_figure(7.2, 3.2, ncols=2)
    with matplotlib.rc_context(_style.RC):
        left.plot(block_sizes, mean_waste, "o-", color=TAIL, label="mean tail waste (simulated lengths)")
        left.plot(block_sizes, [(b - 1) / 2 for b in block_sizes], "--", color=_style.MUTED, label="(b - 1) / 2")
        left.plot(block_sizes, [b - 1 for b in block_sizes], ":", color=_style.WASTE, label="worst case b - 1")
        left.set_xscale("log", base=2)
        left.set_xticks(block_sizes, [str(b) for b in block_sizes])
        left.set_xlabel("block size b (tokens)")
        left.set_ylabel("empty slots per request")
        left.legend(fontsize=8)
        right.plot(block_sizes, 100 * np.array(share), "o-", color=_style.WASTE)
        right.set_xscale("log", base=2)
        right.set_xticks(block_sizes, [str(b) for b in block_sizes])
        right.set_xlabel("block size b (tokens)")
        right.set_ylabel("share of reserved slots empty (%)")
        right.set_ylim(0, None)
        fig.suptitle(f"Tail waste grows with the block size ({mix.n_requests:,} requests, mean {mix.mean} tokens)",
                     fontsize=10)
    return fig


MARKED_BLOCK = scenarios.PAGED_REQUEST.block_size  # the chapter's block size (vLLM's default), named in the text


def waste_vs_block_size_alt(mix: scenarios.LengthMix = scenarios.BLOCK_SIZE_MIX) -> str:
    """The alt text of :func:`waste_vs_block_size`: where both curves start and end, and the share at 16."""
    block_sizes, mean_waste, share = _tail_waste(mix)
    if (mean_waste[0] != 0 or share[0] != 0 or mean_waste != sorted(mean_waste) or share != sorted(share)
            or any(abs(w - (b - 1) / 2) > 0.05 * b for b, w in zip(block_sizes, mean_waste, strict=True))
            or MARKED_BLOCK not in block_sizes):
        raise RuntimeError("waste_vs_block_size_alt describes curves rising from 0, the mean on (b - 1) / 2")
    at_marked = 100 * share[block_sizes.index(MARKED_BLOCK)]
    return (f"Two line charts against block size from {block_sizes[0]} to {block_sizes[-1]} on a base-2 log scale. "
            f"Left: mean empty slots per request, rising from 0 to about {mean_waste[-1]:.2g}, lying on a dashed "
            f"(b - 1)/2 line, with a dotted worst-case line b - 1 above it. Right: the share of reserved slots that "
            f"are empty, rising from 0 at block size {block_sizes[0]} to about {at_marked:.2g} percent at "
            f"{MARKED_BLOCK} and about {100 * share[-1]:.2g} percent at {block_sizes[-1]}.")


FIGURES = {
    "paging-naive-vs-paged": naive_vs_paged,
    "paging-block-tables": block_tables,
    "paging-waste-vs-block-size": waste_vs_block_size,
}

ALT_TEXTS = {
    "paging-naive-vs-paged": naive_vs_paged_alt,
    "paging-block-tables": block_tables_alt,
    "paging-waste-vs-block-size": waste_vs_block_size_alt,
}
