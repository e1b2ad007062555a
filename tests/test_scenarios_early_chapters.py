"""The scenarios of chapters 01 to 03, the book's speed-up and tail-waste functions, and the figures that read them."""

import numpy as np
import pytest

from servebook import batching, gpus, memory, paging, roofline
from servebook.book import scenarios
from servebook.book.figures import paging as paging_figures
from servebook.book.figures import prefill as prefill_figures
from servebook.paging import mean_tail_waste, tail_share
from servebook.roofline import weight_scheme_speedup
from servebook.units import GB, GiB

# ---------------------------------------------------------------- chapter 01


def test_memory_buckets_leave_0_31_gb_of_80_with_fp16_weights():
    buckets = scenarios.MEMORY_BUCKETS
    assert buckets.kv == memory.kv_cache_bytes("llama-2-13b", seq_len=4096, batch=16)
    assert buckets.weights("fp16") == 26 * GB and buckets.weights("int4") == 6.5 * GB
    assert f"{(buckets.weights() + buckets.kv) / GB:.2f}" == "79.69"
    assert f"{buckets.free() / GB:.2f}" == "0.31"
    assert buckets.free("int8") - buckets.free("fp16") == 13 * GB


def test_the_speedup_is_the_ratio_of_the_two_step_bounds():
    case = scenarios.PREFILL_DECODE
    for tokens in (1, 64, 4096):
        fp16 = roofline.bound(roofline.prefill_step(case.spec, tokens, 1, "W16A16"), case.device).time
        w4 = roofline.bound(roofline.prefill_step(case.spec, tokens, 1, "W4A16"), case.device).time
        assert weight_scheme_speedup(case.spec, case.device, tokens, "W4A16") == fp16 / w4
    assert weight_scheme_speedup(case.model, case.gpu, 128, "W16A16") == 1.0


def test_the_quant_speedup_figure_draws_the_speedup_function():
    case = scenarios.PREFILL_DECODE
    ax = prefill_figures.quant_speedup().axes[0]
    lines = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
    for weights in ("W4A16", "W8A8"):
        tokens = lines[weights].get_xdata()
        assert tokens[-1] == case.max_step_tokens
        expected = [weight_scheme_speedup(case.spec, case.device, int(t), weights) for t in tokens]
        assert list(lines[weights].get_ydata()) == expected


def test_the_roofline_figure_places_the_scenarios_steps():
    case = scenarios.PREFILL_DECODE
    ax = prefill_figures.roofline_prefill_decode().axes[0]
    points = [(line.get_xdata()[0], line.get_marker()) for line in ax.lines if line.get_marker() in ("o", "s")]
    assert points == ([(b.step.intensity, "o") for b in case.decode_bounds()]
                      + [(b.step.intensity, "s") for b in case.prefill_bounds()])


# ---------------------------------------------------------------- chapter 03


def test_the_paged_request_is_seed_case_c4():
    request = scenarios.PAGED_REQUEST
    assert (request.n_tokens, request.max_len, request.block_size) == (100, 2048, 16)
    assert (request.naive_waste, request.blocks, request.slots, request.paged_waste) == (1948, 7, 112, 12)


def test_the_walkthrough_shares_the_prefix_and_copies_a_partial_block_on_write():
    kv = scenarios.paging_walkthrough()
    assert [kv.block_table(s) for s in ("A", "A'", "B")] == [[0, 1, 3], [0, 1, 2], [0, 1, 4, 5]]
    assert [kv.pool.blocks[b].ref_count for b in range(6)] == [3, 3, 1, 1, 1, 1]
    assert kv.tokens("A")[-1] == 201 and kv.tokens("A'")[-1] == 301
    assert kv.tokens("A")[:10] == kv.tokens("A'")[:10] == list(range(101, 111))


def test_the_chatbot_runs_on_chapter_04s_server():
    server = scenarios.BATCHING_SERVER
    naive = scenarios.chat_sessions(server.max_len)
    assert naive == server.plan                    # the same server, with the same reservations
    assert naive.gpu == 40 * GiB == gpus.get(server.gpu).memory
    paged = scenarios.chat_sessions(paging.paged_slots(60, 16))
    int4 = scenarios.chat_sessions(server.max_len, weight_dtype="int4")
    assert (naive.requests, paged.requests, int4.requests) == (7, 240, 19)
    n_params = server.spec.n_params
    assert int4.kv_pool - naive.kv_pool == memory.weight_bytes(n_params, "fp16") - memory.weight_bytes(n_params, "int4")


def test_the_length_mix_is_the_seeded_log_normal_sample():
    mix = scenarios.BLOCK_SIZE_MIX
    assert len(mix.lengths) == mix.n_requests == 2000
    assert mix.lengths == tuple(int(n) for n in batching.lognormal_lengths(2000, mean=300, sigma=1.0, seed=0))
    assert all(isinstance(n, int) and n >= 1 for n in mix.lengths)


def test_tail_share_at_16_is_2_5_percent_and_18_at_128():
    lengths = scenarios.BLOCK_SIZE_MIX.lengths
    assert round(100 * tail_share(lengths, 16), 1) == 2.5
    assert round(100 * tail_share(lengths, 128)) == 18


def test_mean_tail_waste_is_half_a_block_when_lengths_cover_every_residue():
    for b in (1, 4, 16, 32):
        lengths = range(1, 10 * b + 1)
        assert mean_tail_waste(lengths, b) == (b - 1) / 2
        assert tail_share(lengths, b) == sum(paging.paged_waste(n, b) for n in lengths) / sum(
            paging.paged_slots(n, b) for n in lengths)


def test_tail_share_of_one_request_is_its_empty_slots_over_its_slots():
    assert tail_share([100], 16) == 12 / 112 and mean_tail_waste([100], 16) == 12
    assert tail_share([128], 16) == mean_tail_waste([128], 16) == 0


def test_tail_functions_refuse_no_lengths_and_bad_block_sizes():
    for function in (mean_tail_waste, tail_share):
        with pytest.raises(ValueError, match="lengths must hold at least one"):
            function([], 16)
        with pytest.raises(ValueError, match="block_size"):
            function([100], 0)


def test_the_block_size_figure_draws_the_tail_functions():
    mix = scenarios.BLOCK_SIZE_MIX
    left, right = paging_figures.waste_vs_block_size().axes
    assert list(left.lines[0].get_ydata()) == [mean_tail_waste(mix.lengths, b) for b in mix.block_sizes]
    assert np.array_equal(right.lines[0].get_ydata(), 100 * np.array([tail_share(mix.lengths, b)
                                                                       for b in mix.block_sizes]))


def test_the_naive_vs_paged_figure_draws_the_paged_request():
    request = scenarios.PAGED_REQUEST
    top = paging_figures.naive_vs_paged().axes[0]
    widths = [bar.get_width() for bar in top.patches[:4]]
    assert widths == [request.n_tokens, request.naive_waste, request.n_tokens, request.paged_waste]

