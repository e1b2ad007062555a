"""KV-cache quantization: vLLM 0.33.0's schemes and KIVI, their bytes, and the cache during generation."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from servebook import kvquant, memory, models, quant, smallmodel


def _kv(seed=0, tokens=64, heads=2, head_dim=64):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(1, heads, tokens, head_dim, generator=gen)
    k[..., 3] *= 8                       # a key outlier channel, as KIVI observed
    return torch.randn(1, heads, tokens, head_dim, generator=gen), k, torch.randn(1, heads, tokens, head_dim,
                                                                                  generator=gen)


def test_per_token_head_schemes_follow_vllms_formulas():
    _, k, v = _kv()
    k8, _ = kvquant.fake_quantize_kv(k, v, "int8_per_token_head")
    scale = (k.abs().amax(-1, keepdim=True) / 127).clamp(min=1e-6)
    codes = torch.round(k * (1 / scale))     # half away from zero and half even agree off exact ties
    assert torch.allclose(k8, codes * scale, atol=0, rtol=1e-6)
    kf, _ = kvquant.fake_quantize_kv(k, v, "fp8_per_token_head")
    expected = quant.fake_quantize_fp8(k, (k.abs().amax(-1, keepdim=True) / 448).clamp(min=1e-6))
    assert torch.equal(kf, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_per_token_head_scales_are_the_librarys_in_float32_and_int8_rounds_half_away_from_zero(dtype):
    _, k, v = _kv()
    k, v = k.to(dtype), v.to(dtype)
    k[0, 0, 0] = 0                           # an all-zero head vector: the 1e-6 floor
    kf, _ = kvquant.fake_quantize_kv(k, v, "fp8_per_token_head")
    scale = quant.choose_fp8_scale(k, axis=(0, 1, 2), floor=1e-6)      # float32, as vLLM computes it
    assert torch.equal(kf, quant.fake_quantize_fp8(k, scale))
    k8, _ = kvquant.fake_quantize_kv(k, v, "int8_per_token_head")
    assert bool(k8.isfinite().all()) and not bool(k8[0, 0, 0].any())
    # absmax 127: scale 1, so the codes are the values rounded as vLLM's int8 store rounds them
    ties = torch.tensor([127.0, -2.5, 2.5, -1.5, 0.5, -0.5, 3.25], dtype=dtype).view(1, 1, 1, -1)
    t8, _ = kvquant.fake_quantize_kv(ties, ties, "int8_per_token_head")
    assert t8.flatten().tolist() == [127.0, -3.0, 3.0, -2.0, 1.0, -1.0, 3.0]


def test_fp8_per_tensor_uses_scale_one_unless_given():
    _, k, v = _kv()
    k1, v1 = kvquant.fake_quantize_kv(k, v, "fp8")
    assert torch.equal(k1, k.to(torch.float8_e4m3fn).float()) and torch.equal(v1, v.to(torch.float8_e4m3fn).float())
    k_scale, v_scale = kvquant.calibrated_scales(k, v)
    kc, _ = kvquant.fake_quantize_kv(k, v, "fp8", k_scale=k_scale, v_scale=v_scale)
    assert float(kc.abs().max()) == pytest.approx(float(k.abs().max()), rel=2**-4)


def test_the_hadamard_rotation_is_orthonormal_so_int4_keeps_attention_scores():
    h = kvquant.hadamard(64)
    assert torch.allclose(h @ h.T, torch.eye(64), atol=1e-6)
    q, k, v = _kv()
    plain = kvquant.attention_error(q, k, v, "kivi4")
    assert kvquant.attention_error(q, k, v, "int4_per_token_head") < 0.2 and plain < 0.2


def test_kivi_keeps_the_unfilled_last_group_and_quantizes_keys_per_channel():
    _, k, v = _kv(tokens=40)
    k4, v4 = kvquant.fake_quantize_kv(k, v, "kivi4")
    assert torch.equal(k4[..., 32:, :], k[..., 32:, :])                  # residual: 8 tokens in 16 bits
    assert not torch.equal(v4[..., 32:, :], v[..., 32:, :])              # values are per token: all quantized
    # per channel over the 32 tokens of the group: each channel's error is within half its own step
    group = k[..., :32, :]
    step = (group.amax(-2, keepdim=True) - group.amin(-2, keepdim=True)) / 15
    assert bool(((k4[..., :32, :] - group).abs() <= step / 2 * (1 + 1e-5)).all())


def test_errors_order_by_bits():
    q, k, v = _kv()
    errors = {name: kvquant.attention_error(q, k, v, name) for name in kvquant.SCHEMES}
    assert errors["auto"] == 0
    assert errors["int8_per_token_head"] < errors["fp8_per_token_head"] < errors["int4_per_token_head"]
    assert errors["kivi4"] < errors["kivi2"]


def test_bytes_per_token_against_the_memory_module():
    spec = models.get("llama-2-13b")
    assert kvquant.kv_bytes_per_token(spec, "auto") == memory.kv_bytes_per_token(spec, "fp16")
    assert kvquant.kv_bytes_per_token(spec, "fp8") == memory.kv_bytes_per_token(spec, "fp8")
    heads = 2 * spec.n_layers * spec.n_kv_heads
    assert kvquant.kv_bytes_per_token(spec, "int8_per_token_head") == memory.kv_bytes_per_token(spec, "int8") \
        + 4 * heads
    assert kvquant.kv_bytes_per_token(spec, "int4_per_token_head") == memory.kv_bytes_per_token(spec, "int4") \
        + 4 * heads
    # KIVI-2: 2 bits a number plus an FP16 scale and zero point per group of 32
    assert kvquant.kv_bytes_per_token(spec, "kivi2") == heads * spec.head_dim * (2 + 1) // 8


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = smallmodel.load("tiny-llama")
    return model, smallmodel.encode(tokenizer, smallmodel.heldout_text())


def test_the_cache_changes_perplexity_as_little_as_its_bits_suggest(tiny):
    model, ids = tiny
    ppl = {name: smallmodel.perplexity(model, ids, max_windows=8, cache=partial(kvquant.quantized_cache, name))
           for name in ("auto", "fp8", "int4_per_token_head", "kivi2")}
    assert ppl["auto"] == pytest.approx(smallmodel.perplexity(model, ids, max_windows=8), rel=1e-5)
    assert abs(ppl["fp8"] / ppl["auto"] - 1) < 0.01
    assert ppl["auto"] < ppl["int4_per_token_head"] < ppl["kivi2"]


def test_generation_reads_the_quantized_cache(tiny):
    model, ids = tiny
    prompt = ids[:20].unsqueeze(0)
    keyword = smallmodel.cache_keyword(model)
    cache = kvquant.quantized_cache("kivi2")
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True, **{keyword: cache})
        step = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **{keyword: cache})
    assert step.logits.shape[1] == 1 and cache.get_seq_length() == 21


def test_bad_cache_argument_is_refused(tiny):
    model, ids = tiny
    with pytest.raises(TypeError, match="cache must be a function"):
        smallmodel.perplexity(model, ids, max_windows=1, cache=kvquant.quantized_cache("fp8"))


def _generate(model, ids, name, prompt=6, steps=38):
    """Greedy generation of ``steps`` tokens after ``prompt`` with a quantized cache: every read attention made
    (layer, keys and values read) with the 16-bit keys and values the cache held then."""
    cache = kvquant.quantized_cache(name)
    reads, update = [], cache.update

    def recording(keys, values, layer_idx, *args, **kwargs):
        read_keys, read_values = update(keys, values, layer_idx, *args, **kwargs)
        layer = cache.layers[layer_idx]
        reads.append((layer_idx, read_keys.clone(), read_values.clone(), layer.keys.clone(), layer.values.clone()))
        return read_keys, read_values

    cache.update = recording
    keyword = smallmodel.cache_keyword(model)
    with torch.no_grad():
        out = model(input_ids=ids[:prompt].unsqueeze(0), use_cache=True, **{keyword: cache})
        for _ in range(steps):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), use_cache=True, **{keyword: cache})
    return reads, cache


@pytest.mark.parametrize("name", list(kvquant.SCHEMES))
def test_each_read_during_generation_is_the_whole_cache_quantized(tiny, name):
    model, ids = tiny
    reads, _ = _generate(model, ids, name)
    arrived = {}    # int4: each token quantized as it arrived, by itself
    for layer, read_keys, read_values, keys, values in reads:
        whole_keys, whole_values = kvquant.fake_quantize_kv(keys, values, name)
        if name != "int4_per_token_head":
            assert torch.equal(read_keys, whole_keys) and torch.equal(read_values, whole_values)
            continue
        seen = arrived.get(layer, (keys[..., :0, :], values[..., :0, :]))
        start = seen[0].shape[-2]
        new_keys, new_values = kvquant.fake_quantize_kv(keys[..., start:, :], values[..., start:, :], name)
        arrived[layer] = (torch.cat([seen[0], new_keys], -2), torch.cat([seen[1], new_values], -2))
        assert torch.equal(read_keys, arrived[layer][0]) and torch.equal(read_values, arrived[layer][1])
        if start == 0:      # the prompt, rotated in one product like the whole cache: bit for bit
            assert torch.equal(read_keys, whole_keys) and torch.equal(read_values, whole_values)
    if name == "int4_per_token_head":
        # a token rotated alone and the same token rotated among 44 differ only by float32 rounding
        keys = reads[-1][3]
        h = kvquant.hadamard(keys.shape[-1])
        alone = torch.cat([keys[..., t:t + 1, :] @ h for t in range(keys.shape[-2])], -2)
        assert torch.allclose(alone, keys @ h, rtol=0, atol=1e-5 * float(keys.abs().max()))


def test_generation_quantizes_each_token_once_and_kivi_keys_once_per_full_group(tiny, monkeypatch):
    model, ids = tiny
    quantize, counted = kvquant.fake_quantize_kv, []

    def counting(keys, values, name, **scales):
        counted.append((name, keys.shape[-2], values.shape[-2]))
        return quantize(keys, values, name, **scales)

    monkeypatch.setattr(kvquant, "fake_quantize_kv", counting)
    layers, tokens = model.config.num_hidden_layers, 6 + 38
    for name in ("fp8", "int4_per_token_head", "kivi2"):
        counted.clear()
        _generate(model, ids, name)
        assert len(counted) == layers * 39                       # one call per layer per forward
        assert sum(v for _, _, v in counted) == layers * tokens    # every value once
        full_groups = tokens - tokens % 32 if name == "kivi2" else tokens
        assert sum(k for _, k, _ in counted) == layers * full_groups


def test_a_cropped_cache_requantizes_what_is_left(tiny):
    model, ids = tiny
    _, cache = _generate(model, ids, "kivi4", steps=30)        # 36 tokens: one full key group
    cache.crop(-16)                                             # 20 left: none in a full group
    keys, values = cache.layers[0].keys, cache.layers[0].values
    k, v = torch.randn_like(keys[..., :1, :]), torch.randn_like(values[..., :1, :])
    read_keys, read_values = cache.update(k, v, 0)
    expected = kvquant.fake_quantize_kv(torch.cat([keys, k], -2), torch.cat([values, v], -2), "kivi4")
    assert torch.equal(read_keys, expected[0]) and torch.equal(read_values, expected[1])


def test_a_layers_quantized_cache_refuses_bad_scales_and_schemes():
    with pytest.raises(ValueError, match="k_scale"):
        kvquant.QuantizedKV("fp8", k_scale=0.0)
    with pytest.raises(TypeError, match="v_scale"):
        kvquant.QuantizedKV("fp8", v_scale="1")
    with pytest.raises(ValueError, match="scheme must be one of"):
        kvquant.QuantizedKV("fp4")


def test_fp8_attention_without_rounding_is_causal_softmax_attention():
    q, k, v = _kv(1)
    exact = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(kvquant.fp8_attention(q, k, v, round_probabilities=False), exact, atol=1e-6)
    # the queries are the last positions: a decode query sees every key
    last = kvquant.fp8_attention(q[..., -1:, :], k, v, round_probabilities=False)
    assert torch.allclose(last, exact[..., -1:, :], atol=1e-6)


def test_fp8_attention_rounds_the_probabilities_times_256_to_e4m3_and_divides_by_the_exact_sum():
    q, k, v = _kv(2)
    scores = (q @ k.transpose(-1, -2) / 8).masked_fill(~torch.ones(64, 64, dtype=torch.bool).tril(), -torch.inf)
    exps = torch.exp(scores - scores.amax(-1, keepdim=True)) * 256
    expected = quant.fake_quantize_fp8(exps, 1.0) @ v / exps.sum(-1, keepdim=True)
    out = kvquant.fp8_attention(q, k, v)
    assert torch.allclose(out, expected, atol=1e-6)
    exact = kvquant.fp8_attention(q, k, v, round_probabilities=False)
    # E4M3 keeps 3 fraction bits: each probability moves by at most 2^-4 of itself (or below the
    # smallest subnormal, 2^-10 of 256), so the output by at most that share of sum(p |v|)
    bound = (2.0**-4 * exps + 2.0**-10) @ v.abs() / exps.sum(-1, keepdim=True)
    assert torch.all((out - exact).abs() <= bound + 1e-6) and not torch.equal(out, exact)
    # probabilities on the grid are kept: one key, or keys whose weights are powers of two
    one = kvquant.fp8_attention(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    assert torch.allclose(one, v[..., :1, :], atol=1e-6)


def test_fp8_attention_refuses_what_it_cannot_read():
    q, k, v = _kv()
    with pytest.raises(ValueError, match="batch x heads x tokens x head_dim"):
        kvquant.fp8_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="the same heads"):
        kvquant.fp8_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        kvquant.fp8_attention(q, k, v, torch.zeros(64, 64))
    with pytest.raises(ValueError, match=r"mask must end in \(queries, keys\) = \(64, 64\)"):
        kvquant.fp8_attention(q, k, v, torch.ones(64, 63, dtype=torch.bool))
    with pytest.raises(TypeError, match="round_probabilities must be True or False"):
        kvquant.fp8_attention(q, k, v, round_probabilities=1)
    with pytest.raises(ValueError, match="scale"):
        kvquant.fp8_attention(q, k, v, scale=0.0)


def test_fa3_fp8_casts_each_layers_queries_rounds_probabilities_and_restores_the_model(tiny, monkeypatch):
    model, ids = tiny
    batch = ids[:64].unsqueeze(0)
    seen = []
    real = kvquant.fp8_attention

    def record(query, *args, **kwargs):
        seen.append((query, kwargs["round_probabilities"]))
        return real(query, *args, **kwargs)

    with torch.no_grad():
        plain = model(input_ids=batch).logits
        scales = [0.01 * (i + 1) for i in range(len(model.model.layers))]
        monkeypatch.setattr(kvquant, "fp8_attention", record)
        with kvquant.fa3_fp8(model, scales):
            rounded = model(input_ids=batch).logits
        with kvquant.fa3_fp8(model, round_probabilities=False):
            queries_only = model(input_ids=batch).logits
        monkeypatch.undo()
        after = model(input_ids=batch).logits
    layers = len(scales)
    assert [p for _, p in seen] == [True] * layers + [False] * layers
    for layer, (query, _) in enumerate(seen[:layers]):   # on its layer's E4M3 grid: casting again changes nothing
        assert torch.equal(query, quant.fake_quantize_fp8(query, scales[layer]))
    assert not torch.equal(rounded, plain) and not torch.equal(rounded, queries_only)
    assert torch.equal(after, plain)
    assert model.config._attn_implementation == "sdpa"
    assert not hasattr(model.model.layers[0].self_attn, "fp8_q_scale")
    with pytest.raises(ValueError, match="one scale per layer"):
        with kvquant.fa3_fp8(model, [1.0]):
            pass
    with pytest.raises(TypeError, match="round_probabilities must be True or False"):
        with kvquant.fa3_fp8(model, round_probabilities="no"):
            pass


def test_fa3_fp8_without_rounding_is_the_models_attention_with_cast_queries(tiny):
    """The explicit attention that fa3_fp8 swaps in computes what SDPA computes, to float rounding."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    model, ids = tiny
    batch = ids[:128].view(2, 64)

    def cast_then_sdpa(module, query, *args, **kwargs):
        return sdpa_attention_forward(module, quant.fake_quantize_fp8(query, 1.0), *args, **kwargs)

    AttentionInterface.register("test_cast_then_sdpa", cast_then_sdpa)
    with torch.no_grad():
        with kvquant.fa3_fp8(model, round_probabilities=False):
            ours = model(input_ids=batch).logits
        model.set_attn_implementation("test_cast_then_sdpa")
        try:
            reference = model(input_ids=batch).logits
        finally:
            model.set_attn_implementation("sdpa")
    assert torch.allclose(ours, reference, atol=1e-4)

