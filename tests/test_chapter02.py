"""Chapter 02, the KV cache: the seed answers, the calculator's text, and what the figures show."""

import html
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.colors import to_hex

from servebook import memory, models
from servebook.book import scenarios
from servebook.book.figures import _style
from servebook.book.figures import kv as kv_figures
from servebook.book.widgets import kv as kv_widget
from servebook.models import ModelSpec
from servebook.units import DTYPE_BYTES, GB, UNITS, GiB, KiB, MiB

# ---------------------------------------------------------------- the seed cases


def test_c1_small_model_is_one_and_a_half_mib():
    toy = scenarios.KV_TOY
    assert (toy.n_layers, toy.d_model, toy.n_heads, toy.attention) == (6, 512, 8, "MHA")
    fp16 = memory.kv_cache_bytes(toy, seq_len=128, batch=1, dtype="fp16")
    int8 = memory.kv_cache_bytes(toy, seq_len=128, batch=1, dtype="int8")
    assert fp16 == 1_572_864 == 2 * 1 * 128 * 6 * 512 * 2
    assert fp16 / MiB == 1.5
    assert int8 / MiB == 0.75


def test_c2_twelve_requests_fit_forty_gib_and_thirteen_do_not():
    case = scenarios.KV_BUDGET
    assert (case.model, case.seq_len, case.budget, case.dtype) == ("llama-2-13b", 4096, 40 * GiB, "fp16")
    per_request = memory.kv_cache_bytes("llama-2-13b", seq_len=4096, batch=1, dtype="fp16")
    assert per_request == case.per_request == 3_355_443_200
    assert per_request / GiB == 3.125
    assert f"{per_request / GB:.3f}" == "3.355"
    budget = 40 * GiB
    assert budget / per_request == 12.8
    b_max = memory.max_batch(budget, per_request)
    assert b_max == case.fits == 12
    assert (budget - b_max * per_request) / GiB == 2.5
    assert 12 * per_request / GiB == 37.5 and 13 * per_request / GiB == 40.625
    assert memory.kv_cache_bytes("llama-2-13b", seq_len=4096, batch=13) > budget


def test_c2_budget_read_as_gb_holds_eleven():
    case = scenarios.KV_BUDGET
    assert memory.max_batch(case.budget_gib * GB, case.per_request) == 11


def test_l2_1_one_request_is_about_1_07_gb_and_exactly_one_gib():
    spec = scenarios.KV_7B_CLASS
    assert (spec.n_layers, spec.d_model, spec.attention) == (32, 4096, "MHA")
    one = memory.kv_cache_bytes(spec, seq_len=2048, batch=1, dtype="fp16")
    assert one == 1_073_741_824 == 2**30 == GiB
    assert f"{one:.3e}" == "1.074e+09"
    assert round(one / GB, 2) == 1.07
    assert one == memory.kv_cache_bytes("llama-2-7b", seq_len=2048)


def test_l2_2_thirty_seven_requests_in_forty_gb_forty_in_forty_gib():
    one = memory.kv_cache_bytes("llama-2-7b", seq_len=2048)
    assert memory.max_batch(40 * GB, one) == 37 == math.floor(40e9 / 1.074e9)
    assert memory.max_batch(40 * GiB, one) == 40


dims = st.integers(1, 64)


@settings(max_examples=60, deadline=None)
@given(layers=dims, heads=st.integers(1, 16), head_dim=st.integers(1, 32), seq_len=st.integers(1, 5000),
       batch=st.integers(1, 64), dtype=st.sampled_from(sorted(DTYPE_BYTES)))
def test_l1_2_the_six_factors_multiply(layers, heads, head_dim, seq_len, batch, dtype):
    spec = ModelSpec("mha", n_layers=layers, d_model=heads * head_dim, n_heads=heads)
    expected = 2 * batch * seq_len * layers * spec.d_model * DTYPE_BYTES[dtype]
    assert memory.kv_cache_bytes(spec, seq_len=seq_len, batch=batch, dtype=dtype) == math.ceil(expected)


@settings(max_examples=60, deadline=None)
@given(layers=dims, n_kv=st.integers(1, 8), group=st.integers(1, 8), head_dim=st.integers(1, 32),
       seq_len=st.integers(1, 5000), batch=st.integers(1, 16))
def test_l1_2_gqa_replaces_d_model_by_kv_heads_times_head_dim(layers, n_kv, group, head_dim, seq_len, batch):
    n_heads = n_kv * group
    spec = ModelSpec("gqa", n_layers=layers, d_model=n_heads * head_dim, n_heads=n_heads, n_kv_heads=n_kv)
    total = memory.kv_cache_bytes(spec, seq_len=seq_len, batch=batch, dtype="fp16")
    assert total == 2 * batch * seq_len * layers * n_kv * head_dim * 2
    mha = ModelSpec("mha", n_layers=layers, d_model=n_heads * head_dim, n_heads=n_heads)
    assert memory.kv_cache_bytes(mha, seq_len=seq_len, batch=batch) == group * total


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(0, 10**12), per_request=st.integers(1, 10**10))
def test_max_batch_is_the_largest_batch_that_fits(budget, per_request):
    fits = memory.max_batch(budget, per_request)
    assert fits * per_request <= budget < (fits + 1) * per_request


# ---------------------------------------------------------------- real models (beyond the seeds)


def test_llama_3_8b_caches_a_quarter_of_llama_2_7b():
    old, new = memory.kv_bytes_per_token("llama-2-7b"), memory.kv_bytes_per_token("llama-3-8b")
    assert (old, new) == (512 * KiB, 128 * KiB)
    assert old == 4 * new
    assert memory.kv_bytes_per_token("mistral-7b") == new


def test_llama_2_70b_caches_less_per_token_than_llama_2_13b():
    assert memory.kv_bytes_per_token("llama-2-70b") == 320 * KiB
    assert memory.kv_bytes_per_token("llama-2-13b") == 800 * KiB
    assert memory.max_batch(40 * GiB, memory.kv_cache_bytes("llama-2-70b", seq_len=4096)) == 32


def test_falcon_7b_mqa_caches_one_sixty_fourth_of_llama_2_7b():
    falcon = models.get("falcon-7b")
    assert falcon.attention == "MQA"
    assert memory.kv_bytes_per_token(falcon) == 8 * KiB
    assert memory.kv_bytes_per_token("llama-2-7b") == 64 * memory.kv_bytes_per_token(falcon)


def test_vllm_papers_800_kb_per_token_is_800_kib():
    # Kwon et al. 2023, section 3: OPT-13B, 2 x 5120 x 40 x 2 bytes, "800 KB".
    assert memory.kv_bytes_per_token("llama-2-13b") == 2 * 5120 * 40 * 2 == 800 * KiB


def test_hf_config_dicts_of_the_chapter():
    llama3 = {"hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256}
    spec = ModelSpec.from_hf_config(llama3)
    assert memory.kv_bytes_per_token(spec) == memory.kv_bytes_per_token("llama-3-8b")
    gemma = ModelSpec.from_hf_config({"hidden_size": 3072, "head_dim": 256, "num_attention_heads": 16,
                                      "num_key_value_heads": 16, "num_hidden_layers": 28})
    assert gemma.kv_dim == 4096 != gemma.d_model
    assert memory.kv_bytes_per_token(gemma) == 2 * 28 * 4096 * 2


def test_exercise_answers_beyond_the_seeds():
    llama3 = models.get("llama-3-8b")
    per_token = memory.kv_bytes_per_token(llama3)
    assert memory.max_batch(40 * GiB, 8 * per_token) == 40_960
    assert memory.max_batch(40 * GiB, memory.kv_cache_bytes(llama3, seq_len=llama3.max_seq_len)) == 40
    fp8 = memory.kv_cache_bytes("llama-2-13b", seq_len=4096, dtype="fp8")
    assert memory.max_batch(40 * GiB, fp8) == 25


# ---------------------------------------------------------------- the calculator


def test_calculator_rows_for_worked_example_2():
    lines = dict(kv_widget.kv_calculator_rows("llama-2-13b", seq_len=4096, batch=8, dtype="fp16", budget=40,
                                              budget_unit="GiB"))
    assert lines["model"] == "Llama-2-13B: MHA, L = 40 layers, kv_dim = 40 KV heads × 128 = 5,120"
    assert lines["per token"] == "819,200 bytes = 800 KiB = 819.2 KB"
    assert lines["per request"] == "S = 4,096: 3,355,443,200 bytes = 3.125 GiB = 3.355 GB"
    assert lines["batch"] == "B = 8: 26,843,545,600 bytes = 25 GiB = 26.844 GB"
    assert lines["fits"] == "12 requests of S = 4,096 (2.5 GiB left over; request 13 would overflow it by 640 MiB)"
    assert lines["your batch"] == "B = 8 fits, with 15 GiB to spare"
    assert lines["longest S"] == "6,553 tokens per request for B = 8 within the budget"
    assert "note" not in lines
    text = kv_widget.kv_calculator_text("llama-2-13b", seq_len=4096, batch=8)
    assert text.splitlines()[2] == "per token    819,200 bytes = 800 KiB = 819.2 KB"


def test_calculator_text_for_the_small_model_and_a_decimal_budget():
    toy = kv_widget.custom_model(n_layers=6, d_model=512, n_heads=8)
    text = kv_widget.kv_calculator_text(toy, seq_len=128, dtype="fp16", budget=1, budget_unit="GB")
    assert "per request  S = 128: 1,572,864 bytes = 1.5 MiB = 1.573 MB" in text
    assert "fits         635 requests" in text  # 10**9 // 1,572,864
    assert "1 GB = 1,000,000,000 bytes" in text


def test_calculator_budget_unit_changes_the_answer():
    def fits(unit):
        rows = dict(kv_widget.kv_calculator_rows("llama-2-13b", seq_len=4096, budget=40, budget_unit=unit))
        return rows["fits"].split()[0]

    assert (fits("GiB"), fits("GB")) == ("12", "11")


def test_calculator_reports_a_batch_that_does_not_fit_and_a_context_beyond_the_window():
    text = kv_widget.kv_calculator_text("llama-2-13b", seq_len=8192, batch=13)
    assert "B = 13 does NOT fit" in text
    assert "beyond Llama-2-13B's context window (4,096 tokens)" in text


@pytest.mark.parametrize("budget, unit, expected", [
    (40, "GiB", 40 * GiB), (69.5, "GiB", 139 * GiB // 2), (0.1, "GB", 10**8), (Fraction(1, 3), "GB", 333_333_333),
])
def test_budget_bytes_is_exact_then_floored(budget, unit, expected):
    assert kv_widget.budget_bytes(budget, unit) == expected


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(budget=0), ValueError, "budget"),
    (dict(budget=-1), ValueError, "budget"),
    (dict(budget=float("nan")), ValueError, "budget"),
    (dict(budget="40"), TypeError, "budget"),
    (dict(budget_unit="TB"), ValueError, "budget_unit"),
    (dict(dtype="fp12"), ValueError, "dtype"),
    (dict(seq_len=0), ValueError, "seq_len"),
    (dict(seq_len=1.5), TypeError, "seq_len"),
    (dict(batch=0), ValueError, "batch"),
    (dict(model="gpt-5"), ValueError, "unknown model"),
])
def test_calculator_text_rejects_bad_input(kwargs, error, match):
    args = dict(model="llama-2-13b", seq_len=4096) | kwargs
    with pytest.raises(error, match=match):
        kv_widget.kv_calculator_text(**args)


def test_custom_model_rejects_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_widget.custom_model(n_layers=2, d_model=64, n_heads=8, n_kv_heads=3)


def test_widget_shows_the_text_function_and_follows_its_inputs():
    pytest.importorskip("ipywidgets")
    widget = kv_widget.kv_calculator()
    out, boxes = widget.output, widget.controls
    model_box, unit_box = boxes["model"], boxes["budget_unit"]
    shape = [boxes[field] for field in [*kv_widget._SHAPE_BOXES, "local_kind"]]
    assert out.value == f"<pre>{html.escape(kv_widget.kv_calculator_text('llama-2-13b', 4096))}</pre>"
    assert all(box.disabled for box in shape)
    unit_box.value = "GB"
    assert "fits         11 requests" in out.value
    model_box.value = "custom"
    assert not any(box.disabled for box in shape)
    assert "custom: MHA, L = 40 layers" in out.value  # starts from the shape last shown
    shape[3].value = 3  # 40 heads are not divisible by 3 KV heads
    assert out.value.startswith("<pre>cannot compute: n_heads (40) must be divisible by n_kv_heads (3)")


def test_widget_rejects_an_unknown_model():
    with pytest.raises(ValueError, match="model must be one of"):
        kv_widget.kv_calculator(model="gpt-5")


# ---------------------------------------------------------------- the calculator's fields for modern shapes


@pytest.mark.parametrize("name", models.names())
def test_every_registry_model_typed_into_the_boxes_gives_its_own_cache(name):
    spec = models.get(name)
    typed = kv_widget.model_from_fields(**kv_widget.shape_fields(spec))
    for seq_len in (1, 4096, 131_072):
        assert memory.kv_cache_bytes(typed, seq_len) == memory.kv_cache_bytes(spec, seq_len)
    assert typed.attention == spec.attention and typed.layers_of("global") == spec.layers_of("global")


def test_calculator_shows_the_layer_pattern_and_where_the_per_token_cost_stops():
    lines = dict(kv_widget.kv_calculator_rows("gemma-2-9b", seq_len=8192, batch=4))
    assert lines["layers"] == ("21 global + 21 sliding (W = 4,096): "
                               "a sliding layer holds at most 4,096 tokens of a request")
    assert lines["per token"].endswith("while S <= 4,096; past it only the 21 global layers grow")
    assert lines["per request"] == "S = 8,192: 2,113,929,216 bytes = 1.969 GiB = 2.114 GB"  # not 2.625 GiB
    assert lines["longest S"] == "58,319 tokens per request for B = 4 within the budget"
    mistral = dict(kv_widget.kv_calculator_rows("mistral-7b", seq_len=32_768, batch=4))
    assert mistral["longest S"].startswith("any: every layer is sliding, so a request's cache stops growing at 4,096")
    assert mistral["per token"].endswith("past it the cache stops growing")
    assert "layers" not in dict(kv_widget.kv_calculator_rows("llama-2-13b", seq_len=4096))


def test_calculator_shows_mla_as_one_latent_stored_once():
    lines = dict(kv_widget.kv_calculator_rows("deepseek-v3", seq_len=1))
    assert lines["model"] == ("DeepSeek-V3: MLA, L = 61 layers, latent 512 + rope key 64 = 576 elements per layer, "
                              "stored once")
    assert lines["per token"] == "70,272 bytes = 68.625 KiB = 70.272 KB"  # (512 + 64) * 61 * 2, no factor 2


def test_custom_model_with_a_window_latent_or_chunks():
    gemma = kv_widget.custom_model(42, 3584, 16, 8, 256, window=4096, local_layers=21)
    assert memory.kv_cache_bytes(gemma, 8192) == memory.kv_cache_bytes("gemma-2-9b", 8192)
    every = kv_widget.custom_model(32, 4096, 32, 8, window=4096)  # local_layers defaults to all
    assert every.layers_of("sliding") == 32
    chunked = kv_widget.custom_model(4, 512, 8, 2, window=1024, local_layers=3, local_kind="chunked")
    assert (chunked.layers_of("chunked"), chunked.attention_chunk, chunked.sliding_window) == (3, 1024, None)
    mla = kv_widget.custom_model(61, 7168, 128, head_dim=192, kv_rank=512, rope_dim=64)
    assert memory.kv_bytes_per_token(mla) == memory.kv_bytes_per_token("deepseek-v3") == 70_272


@pytest.mark.parametrize("kwargs, match", [
    (dict(kv_rank=512), "kv_rank .* and rope_dim"),
    (dict(rope_dim=64), "kv_rank .* and rope_dim"),
    (dict(kv_rank=512, rope_dim=129), "rope_dim must be"),
    (dict(local_layers=2), "local_layers .* needs a window"),
    (dict(window=4096, local_layers=5), "local_layers must be"),
    (dict(window=0), "sliding_window must be"),
    (dict(window=4096, local_kind="global"), "local_kind must be one of"),
])
def test_custom_model_rejects_a_shape_it_cannot_be(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kv_widget.custom_model(4, 512, 4, **kwargs)


def test_zero_in_a_box_means_none():
    fields = kv_widget.shape_fields(models.get("llama-3-8b"))
    assert {k: fields[k] for k in ("window", "local_layers", "kv_rank", "rope_dim")} == dict.fromkeys(
        ("window", "local_layers", "kv_rank", "rope_dim"), 0)
    spec = kv_widget.model_from_fields(**fields | {"window": 2048})  # 0 local layers with a window: all
    assert spec.layers_of("sliding") == 32 and spec.sliding_window == 2048


def test_widget_fills_the_new_boxes_and_computes_a_typed_window():
    pytest.importorskip("ipywidgets")
    widget = kv_widget.kv_calculator()
    out, model_box, shape = widget.output, widget.controls["model"], widget.controls
    assert dict(model_box.options)["Gemma-2-9B"] == "gemma-2-9b"  # display names, registry ids as values
    model_box.value = "gemma-2-9b"
    assert (shape["window"].value, shape["local_layers"].value, shape["head_dim"].value) == (4096, 21, 256)
    assert "21 global + 21 sliding" in out.value
    model_box.value = "custom"
    shape["local_layers"].value = 42
    assert "0 global + 42 sliding" in out.value
    shape["kv_rank"].value = 512  # without a rope key: refused, with the reason
    assert "cannot compute: kv_rank (512) and rope_dim (None)" in out.value


# ---------------------------------------------------------------- the figures show the computed numbers


def test_kv_growth_marks_where_batch_16_fills_40_gib():
    fig = kv_figures.kv_growth()
    ax = fig.axes[0]
    markers = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(markers) == 1  # only batch 16 crosses the budget before 4,096 tokens
    assert markers[0].get_xdata()[0] == 3276 == memory.max_batch(40 * GiB, 16 * 800 * KiB)
    assert any("S = 3,276" in t.get_text() for t in ax.texts)
    assert ax.get_title().startswith("Llama-2-13B, FP16")  # a display name, never the registry id


def test_kv_batch_limit_bars_are_the_c2_totals():
    ax = kv_figures.kv_batch_limit().axes[0]
    bars = ax.patches
    assert [b.get_height() for b in bars] == [3.125 * b for b in range(1, 15)]
    colours = [to_hex(b.get_facecolor()) for b in bars]
    assert colours == [_style.KV] * 12 + [_style.WASTE] * 2


def test_kv_per_token_bars_are_the_registry_values():
    ax = kv_figures.kv_per_token().axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = [b.get_width() for b in ax.patches]
    assert widths == [memory.kv_bytes_per_token(name) / KiB for name in labels]
    assert widths == sorted(widths)
    assert labels[0] == "Falcon-7B" and labels[-1] == "Llama-2-13B"  # display names, never registry ids


def test_kv_gib_vs_gb_shows_the_gaps_and_twelve_against_eleven():
    left, right = kv_figures.kv_gib_vs_gb().axes
    gaps = [b.get_height() for b in left.patches]
    assert gaps == pytest.approx([100 * (UNITS[b] / UNITS[d] - 1)
                                  for b, d in [("KiB", "KB"), ("MiB", "MB"), ("GiB", "GB"), ("TiB", "TB")]])
    requests = [p for p in right.patches if to_hex(p.get_facecolor()) == _style.KV]
    assert len(requests) == 12 + 11
    assert [t.get_text() for t in right.texts] == ["12 requests", "11 requests"]


def test_figure_registry_lists_the_four_kv_figures():
    assert set(kv_figures.FIGURES) == {"kv-growth", "kv-batch-limit", "kv-per-token", "kv-gib-vs-gb"}


def test_batch_16_fills_forty_gib_at_3276_tokens_and_batch_8_fits_4096():
    case = scenarios.KV_BUDGET
    assert [case.longest(b) >= case.seq_len for b in case.growth_batches] == [True, True, True, False]
    assert case.longest(16) == 3276 and case.longest(8) == 6553
    assert memory.kv_cache_bytes("llama-2-13b", seq_len=4096, batch=8) <= 40 * GiB


def test_binary_units_are_2_4_percent_larger_at_kilo_and_7_4_at_giga():
    assert [f"{100 * (UNITS[b] / UNITS[d] - 1):.1f}" for b, d in [("KiB", "KB"), ("GiB", "GB")]] == ["2.4", "7.4"]


def test_the_widget_starts_on_worked_example_2():
    pytest.importorskip("ipywidgets")
    case = scenarios.KV_BUDGET
    text = kv_widget.kv_calculator_text(case.model, seq_len=case.seq_len, budget=case.budget_gib)
    assert kv_widget.kv_calculator().children[1].value == f"<pre>{html.escape(text)}</pre>"


def test_fmt_unit_refuses_an_unknown_family():
    assert kv_widget.fmt_unit(3 * GiB, "binary") == "3 GiB" and kv_widget.fmt_unit(3 * GB, "decimal") == "3 GB"
    with pytest.raises(ValueError, match="family"):
        kv_widget.fmt_unit(GiB, "metric")
