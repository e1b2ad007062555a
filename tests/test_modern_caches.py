"""The modern-caches chapter: the longest request a budget holds, its scenarios, and what its figures show."""

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
