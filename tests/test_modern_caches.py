"""The modern-caches chapter: the longest request a budget holds, its scenarios, and what its figures show."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from servebook import memory, models
from servebook.book import scenarios
from servebook.book.figures import _style
from servebook.book.figures import modern as modern_figures
from servebook.units import GiB, KiB, MiB

# ---------------------------------------------------------------- the longest request that fits


@pytest.mark.parametrize("model, batch, expected", [("llama-2-13b", 1, 52_428), ("llama-2-13b", 8, 6_553),
                                                    ("llama-3-8b", 1, 327_680), ("deepseek-v3", 2, 305_595)])
def test_longest_request_of_an_all_global_model_is_the_budget_over_its_tokens(model, batch, expected):
    per_token = memory.kv_bytes_per_token(model)
    assert memory.longest_seq_len(model, 40 * GiB, batch) == expected == memory.max_batch(40 * GiB, batch * per_token)


def test_a_hybrid_model_is_limited_by_its_global_layers_alone():
    # Gemma-2-9B: 21 global and 21 sliding layers of 8 KV heads x 256, W = 4,096, FP16.
    per_layer = 2 * 8 * 256 * 2
    budget = 40 * GiB
    longest = memory.longest_seq_len("gemma-2-9b", budget)
    assert longest == 4096 + (budget - 4096 * 42 * per_layer) // (21 * per_layer) == 245_564
    assert memory.kv_cache_bytes("gemma-2-9b", longest) <= budget < memory.kv_cache_bytes("gemma-2-9b", longest + 1)
    assert memory.max_batch(budget, memory.kv_bytes_per_token("gemma-2-9b")) == 124_830  # the misreading


def test_a_model_whose_every_layer_slides_has_no_limit_once_its_cap_fits():
    assert memory.longest_seq_len("mistral-7b", 40 * GiB, batch=64) is None
    cap = memory.kv_cache_bytes("mistral-7b", 4096)  # 512 MiB: the cache stops at W = 4,096 tokens
    assert memory.longest_seq_len("mistral-7b", cap) is None
    assert memory.longest_seq_len("mistral-7b", cap - 1) == 4095
    assert memory.longest_seq_len("mistral-7b", 100 * MiB) == 800  # 128 KiB a token below the window


def test_a_budget_below_one_token_holds_no_request():
    assert memory.longest_seq_len("llama-2-13b", 800 * KiB - 1) == 0
    assert memory.longest_seq_len("llama-2-13b", 800 * KiB) == 1


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(budget=-1), ValueError, "budget"), (dict(budget=1.5), ValueError, "budget"),
    (dict(batch=0), ValueError, "batch"), (dict(dtype="fp12"), ValueError, "dtype"),
    (dict(model="gpt-5"), ValueError, "unknown model"),
])
def test_longest_seq_len_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        memory.longest_seq_len(**(dict(model="llama-2-13b", budget=GiB) | kwargs))


# ---------------------------------------------------------------- the chapter's scenarios


def test_the_issues_numbers_through_the_scenarios():
    # DeepSeek-V3: (512 + 64) x 61 layers x 2 bytes; the same heads with MHA would store K and V per head.
    v3 = models.get("deepseek-v3")
    assert memory.kv_bytes_per_token(v3) == 70_272 == (512 + 64) * 61 * 2
    assert memory.kv_bytes_per_token(scenarios.as_mha(v3)) == 128 * (192 + 128) * 61 * 2
    # Gemma-2-9B at 8,192 tokens: 21 sliding + 21 global layers, against every layer counted in full.
    case = scenarios.WINDOW_CASE
    assert (case.total / GiB, case.if_all_global / GiB) == (1.96875, 2.625)
    assert case.by_kind == {"global": 2 * case.by_kind["sliding"], "sliding": 4096 * 21 * 8 * 256 * 2 * 2}


def test_the_vllm_reservation_of_a_sliding_layer_is_its_window_plus_the_in_flight_tokens():
    case = scenarios.VLLM_RESERVATION  # Gemma-3-27B, 131,072 tokens, blocks of 16, two batches of 8,192 in flight
    assert case.kinds == ("global", "sliding") and case.page == 16 * 16 * 128 * 2 * 2
    assert case.blocks("global") == 131_072 // 16 == case.held_blocks("global")
    assert case.blocks("sliding") == -(-(1024 - 1 + 2 * 8192) // 16) + 1 == 1089
    assert case.held_blocks("sliding") == 1024 // 16
    assert case.reserved == case.page * (10 * 8192 + 52 * 1089) > case.counted
    one_batch = replace(case, concurrent_batches=1)  # with --no-async-scheduling
    assert one_batch.blocks("sliding") == -(-(1024 - 1 + 8192) // 16) + 1 == 577


def test_a_mixture_of_experts_changes_the_weights_not_the_cache():
    case = scenarios.MOE_CASE
    assert memory.kv_bytes_per_token(case.model) == memory.kv_bytes_per_token(case.dense_twin)
    assert case.weights() == 2 * 46_702_792_704 and case.weights(active=True) == 2 * 12_879_925_248
    assert case.experts_read(1) == 2 and case.experts_read(64) == pytest.approx(8, abs=1e-6)
    reads = [case.weight_bytes_read(b) for b in case.decode_batches]
    assert reads == sorted(reads) and reads[-1] <= case.weights()


def test_the_capacity_comparison_reads_chapter_07s_plan():
    case = scenarios.CONTEXT_CAPACITY
    users = {(m, s): case.users(m, s) for m in case.models for s in case.contexts}
    assert users["llama-3.1-8b", 131_072] == 7 and users["gemma-3-27b", 131_072] == 8
    assert users["gemma-3-27b", 8192] < users["llama-3.1-8b", 8192]  # the order turns at 128k
    with pytest.raises(ValueError, match="beyond the window"):
        scenarios.ContextCapacity(models=("llama-2-7b",))


# ---------------------------------------------------------------- the figures show the computed numbers


def test_kv_by_layer_kind_stacks_every_registry_model():
    ax = modern_figures.kv_by_layer_kind().axes[0]
    labels = [t.get_text().removesuffix(" †") for t in ax.get_yticklabels()]
    assert sorted(labels) == sorted(models.display_name(n) for n in models.names())
    widths = {}
    for bar in ax.patches:
        row = labels[round(bar.get_y() + bar.get_height() / 2)]
        widths.setdefault(row, {})[to_hex(bar.get_facecolor())] = bar.get_width()
    gemma = widths["Gemma-2-9B"]
    assert gemma[_style.KV] == 168 and gemma[modern_figures.KIND_COLOURS["sliding"]] == 84  # KiB per token at 8k
    assert widths["Llama-4-Scout"][modern_figures.KIND_COLOURS["chunked"]] == 144
    assert "OPT-13B †" in [t.get_text() for t in ax.get_yticklabels()]  # context 2,048 < 8,192


def test_total_vs_active_shows_the_registry_counts():
    ax = modern_figures.total_vs_active().axes[0]
    totals = [b.get_width() for b in ax.patches if to_hex(b.get_facecolor()) == _style.WEIGHTS]
    assert totals[0] == models.get("deepseek-v3").n_params / 1e9
    assert any(t.get_text() == "12.9 B, 28% active" for t in ax.texts)


def test_capacity_by_context_bars_are_the_plans():
    case = scenarios.CONTEXT_CAPACITY
    fig = modern_figures.capacity_by_context()
    for ax, seq_len in zip(fig.axes, case.contexts, strict=True):
        assert sorted(b.get_width() for b in ax.patches) == sorted(case.users(m, seq_len) for m in case.models)
    assert "H200 SXM" in fig.get_suptitle()


def test_kv_vs_context_stops_each_line_at_the_models_window():
    ax = modern_figures.kv_vs_context().axes[0]
    mistral = [line for line in ax.lines if line.get_label().startswith("Mistral-7B")][0]
    assert mistral.get_xdata()[-1] == models.get("mistral-7b").max_seq_len
    assert max(mistral.get_ydata()) == memory.kv_cache_bytes("mistral-7b", 4096) / GiB


# ---------------------------------------------------------------- the exercise page


EXERCISES = Path(__file__).resolve().parents[1] / "exercises" / "modern-caches.qmd"


def test_every_exercise_has_a_collapsed_solution_computed_by_code():
    sections = re.split(r"^## Exercise \d+", EXERCISES.read_text(encoding="utf-8"), flags=re.M)[1:]
    assert len(sections) == 5
    for section in sections:
        solution = section.split('::: {.callout-note collapse="true"}\n## Solution', 1)
        assert len(solution) == 2, "each exercise folds its solution"
        assert "```{python}" in solution[1].split("\n:::\n", 1)[0], "a solution's numbers come from code"


def test_the_exercise_answers():
    lite = models.get("deepseek-v2-lite")
    assert memory.kv_bytes_per_token(lite) == 31_104
    assert memory.kv_bytes_per_token(scenarios.as_mha(lite)) == 276_480
    assert memory.kv_cache_bytes("gemma-3-27b", 32768) == 2.90625 * GiB
    assert memory.kv_cache_bytes(scenarios.all_global("gemma-3-27b"), 32768) == 15.5 * GiB
    scout = models.get("llama-4-scout")
    assert memory.kv_bytes_by_layer_kind(scout, scout.max_seq_len)["chunked"] == 1.125 * GiB
    assert memory.kv_cache_bytes(scout, scout.max_seq_len) == 481.125 * GiB
    base = replace(scenarios.VLLM_RESERVATION, model="mistral-7b", max_model_len=32768, max_num_batched_tokens=2048,
                   concurrent_batches=1)
    busy = replace(base, max_num_batched_tokens=8192, concurrent_batches=2)
    assert (base.blocks("sliding"), busy.blocks("sliding"), base.held_blocks("sliding")) == (385, 1281, 256)
    users = [scenarios.CapacityCase(m, "h100-sxm", 4 * GiB, 32768).users(w)
             for m in ("qwen3-30b-a3b", "qwen3-8b") for w in ("fp16", "int8")]
    assert users == [6, 15, 13, 15]
