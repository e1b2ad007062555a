"""The lab measures what the formulas predict: on the CPU path, bytes exactly; bad input is skipped cleanly."""

import copy
import importlib.util
import json
import math
import sys
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from servebook import gpus, lab, memory, qmodel, roofline, smallmodel  # noqa: E402
from servebook.models import ModelSpec  # noqa: E402

# A Llama-style shape with grouped-query attention and tied embeddings, small enough for milliseconds per step;
# widths divisible by 128 so the W8A16/W4A16 variants can use the book's group size.
TOY = ModelSpec("toy-gqa", n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, vocab_size=512,
                intermediate_size=768, tied_embeddings=True, max_seq_len=512)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # the test machine's cores are shared
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def cpu():
    return lab.detect_device("cpu")


@pytest.fixture(scope="module")
def toy(cpu):
    return lab.load_random(TOY, cpu, "fp32")


@pytest.fixture(scope="module")
def project(cpu):
    try:
        return lab.load_project(cpu, "fp32")
    except lab.ModelUnavailable as reason:
        pytest.skip(str(reason))


# --- bytes: measured equals predicted -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("batch, prompt_len, steps", [(1, 7, 1), (3, 16, 4)])
def test_kv_cache_tensors_are_exactly_the_formula(cpu, dtype, batch, prompt_len, steps):
    model = lab.load_random(TOY, cpu, dtype)
    g = lab.measure_generation(model.module, cpu, batch, prompt_len, decode_steps=steps, repeats=1)
    assert g.kv_bytes_after_prefill == memory.kv_cache_bytes(TOY, prompt_len, batch, dtype)
    assert g.kv_bytes_after_decode == memory.kv_cache_bytes(TOY, prompt_len + steps, batch, dtype)
    # GQA: 2 KV heads of 64, not 4 query heads: the cache is half what d_model would say.
    assert g.kv_bytes_after_prefill * 2 == 2 * batch * prompt_len * TOY.n_layers * TOY.d_model * (
        4 if dtype == "fp32" else 2)


def test_weight_bytes_are_exactly_the_formula_with_tied_embeddings_counted_once(toy):
    assert lab.weight_bytes_of(toy.module) == memory.weight_bytes(TOY.count_params(), "fp32")
    assert toy.predicted_weight_bytes == lab.weight_bytes_of(toy.module)
    assert lab.other_buffer_bytes(toy.module) > 0  # rotary frequencies: on the device, not weights


def test_reduced_llama_2_7b_keeps_head_dim_and_is_measured_exactly(cpu):
    model = lab.load_random("llama-2-7b", cpu, "fp32", reduce=16)
    assert model.spec.head_dim == 128 and model.spec.n_layers == 2 and model.reduced_from == "llama-2-7b"
    assert model.spec.attention == "MHA"
    assert lab.weight_bytes_of(model.module) == model.predicted_weight_bytes
    g = lab.measure_generation(model.module, cpu, 2, 8, decode_steps=1, repeats=1)
    assert g.kv_bytes_after_decode == memory.kv_cache_bytes(model.spec, 9, 2, "fp32")


def test_reduced_spec_keeps_the_gqa_group():
    small = lab.reduced_spec("llama-3-8b", 8)
    assert small.group_size == 4 and small.n_kv_heads == 1 and small.head_dim == 128
    assert small.n_params == small.count_params()
    with pytest.raises(ValueError, match="factor"):
        lab.reduced_spec("llama-3-8b", 0)


@pytest.mark.parametrize("variant", ["w8a16", "w4a16"])
def test_quantized_weight_bytes_are_exactly_the_formula(toy, cpu, variant):
    quantized = lab.quantize(toy, variant, cpu, group_size=128)
    assert lab.weight_bytes_of(quantized.module) == quantized.predicted_weight_bytes
    assert quantized.predicted_weight_bytes < toy.predicted_weight_bytes
    g = lab.measure_generation(quantized.module, cpu, 2, 8, decode_steps=2, repeats=1)
    assert g.kv_bytes_after_decode == memory.kv_cache_bytes(TOY, 10, 2, "fp32")  # weights shrink, KV does not


def test_project_model_bytes_and_quantized_outputs_close(project, cpu):
    assert lab.weight_bytes_of(project.module) == project.predicted_weight_bytes
    ids = torch.tensor([project.tokenizer("def f(x):\n    return x + 1\n")["input_ids"]])
    with torch.inference_mode():
        reference = project.module(input_ids=ids).logits
    for variant, min_cosine in (("w8a16", 0.9999), ("w4a16", 0.995)):
        quantized = lab.quantize(project, variant, cpu)
        assert lab.weight_bytes_of(quantized.module) == quantized.predicted_weight_bytes
        with torch.inference_mode():
            logits = quantized.module(input_ids=ids).logits
        cosine = torch.nn.functional.cosine_similarity(logits.flatten(), reference.flatten(), dim=0).item()
        agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
        assert cosine > min_cosine, f"{variant}: logits cosine {cosine:.4f}"
        assert agree > 0.8, f"{variant}: next-token choices agree on only {agree:.0%}"


# --- time: synchronised, and predicted only where the device is known ------------------------------------------


def test_timed_synchronises_before_and_after():
    calls = []

    class Recording(lab.Device):
        def synchronize(self):
            calls.append("sync")

    seconds, result = lab.timed(lambda: calls.append("work") or 42, Recording("cuda", "fake"))
    assert calls == ["sync", "work", "sync"] and result == 42 and seconds >= 0


@pytest.mark.parametrize("name, key", [
    ("Tesla T4", "t4"), ("NVIDIA L4", "l4"), ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
    ("NVIDIA A100-SXM4-40GB", None), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", None),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None), ("NVIDIA GeForce RTX 4090", None),
])
def test_gpu_names_map_to_the_roofline_table_or_to_no_prediction(name, key):
    assert lab.roofline_gpu_for(name) == key
    assert key is None or gpus.get(key).name == key  # every name the lab maps to is a key of servebook.gpus


def test_time_predictions_are_the_roofline_bounds_on_a_known_gpu_and_absent_on_the_cpu(toy, cpu):
    fp16 = copy.copy(toy)
    fp16.variant = fp16.dtype = "fp16"
    t4 = lab.Device("cuda", "Tesla T4", roofline_gpu="t4")
    prefill, decode, basis = lab.time_predictions(fp16, t4, 4, 64)
    assert prefill.time == roofline.bound(roofline.prefill_step(toy.spec, 4, 64, "W16A16", "fp16"), "t4").time
    assert decode.time == roofline.bound(roofline.decode_step(toy.spec, 4, 64, "W16A16", "fp16"), "t4").time
    assert "t4" in basis
    assert lab.time_predictions(fp16, cpu, 4, 64)[:2] == (None, None)
    assert "no prediction" in lab.time_predictions(fp16, cpu, 4, 64)[2]


# --- the results document ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(cpu):
    config = lab.LabConfig.for_device(cpu, hub_model="no-such-org/no-such-model", project_model=False,
                                      random_models=("llama-2-7b",), reduce=16, batches=(1, 2), prompt_lens=(8,),
                                      decode_steps=2, repeats=1, variants=())
    return lab.run_lab(config, cpu, log=lambda _: None)


def test_a_run_validates_and_its_bytes_match_exactly(small_run, tmp_path):
    lab.validate(small_run)
    byte_rows = [r for r in small_run["rows"] if r["unit"] == "B"]
    assert byte_rows and all(r["measured"] == r["predicted"] and r["ratio"] == 1.0 for r in byte_rows)
    time_rows = [r for r in small_run["rows"] if r["unit"] == "s"]
    assert time_rows and all(r["predicted"] is None and "no prediction" in r["basis"] for r in time_rows)
    assert small_run["device"]["kind"] == "cpu" and small_run["versions"]["torch"] == torch.__version__
    path = lab.write_results(small_run, tmp_path / "run.json")
    assert lab.latest_recorded(directory=tmp_path) == json.loads(path.read_text())


def test_the_offline_hub_model_is_skipped_with_a_reason(small_run):
    (entry,) = [s for s in small_run["skipped"] if s["what"] == "no-such-org/no-such-model"]
    assert "no-such-org/no-such-model" in entry["reason"] and "goes on" in entry["reason"]


@pytest.mark.parametrize("damage, where", [
    (lambda r: r.pop("device"), "device"),
    (lambda r: r["rows"][0].update(quantity="joules"), "rows/0/quantity"),
    (lambda r: r["rows"][0].update(measured=-1), "rows/0/measured"),
    (lambda r: r["rows"][0].update(ratio=r["rows"][0]["ratio"] * 2), "ratio"),
    (lambda r: r["rows"][0].update(model="ghost"), "not in the models list"),
    (lambda r: r["rows"][0].update(unit="s"), "rows/0"),
    (lambda r: r.update(schema_version=99), "schema_version"),
])
def test_validation_names_what_is_wrong(small_run, damage, where):
    broken = copy.deepcopy(small_run)
    damage(broken)
    with pytest.raises(ValueError, match=where):
        lab.validate(broken)


def test_recorded_runs_validate_and_the_latest_says_where_and_when():
    runs = lab.recorded_runs()
    assert runs, "commit at least one recorded run under servebook/data/lab"
    latest = lab.latest_recorded()
    assert latest["device"]["name"] and latest["date"][:4].isdigit()
    if any(r["device"]["kind"] == "cuda" for r in runs):
        assert latest["device"]["kind"] == "cuda"
    for run in runs:
        exact = [r for r in run["rows"] if r["quantity"] in ("weight_bytes", "kv_bytes")]
        assert all(r["measured"] == r["predicted"] for r in exact), "weights and KV bytes are exact on every run"


def test_tables_and_provenance_say_what_was_measured_where(small_run):
    rows = lab.table(small_run)
    assert len(rows) == len(small_run["rows"])
    text = lab.format_table(rows)
    assert "kv_bytes" in text and "MiB" in text and "1.000" in text
    markdown = lab.markdown_table(rows).splitlines()
    assert len(markdown) == len(rows) + 2 and markdown[1].startswith("|:--|")
    sentence = lab.provenance(small_run)
    assert small_run["device"]["name"] in sentence and small_run["date"][:10] in sentence
    assert torch.__version__ in sentence


# --- bad input ----------------------------------------------------------------------------------------------------


def test_unknown_hub_model_offline_fails_fast_with_a_clear_message(cpu):
    with pytest.raises(lab.ModelUnavailable, match="no-such-org/no-such-model.*local cache"):
        lab.load_hub("no-such-org/no-such-model", cpu, online=False)
    with pytest.raises(TypeError, match="Hub model id"):
        lab.load_hub("", cpu)


def test_a_batch_that_does_not_fit_is_skipped_by_the_formula(toy, cpu):
    with pytest.raises(lab.MeasurementSkipped, match="more than the"):
        lab.check_fits(toy, batch=64, prompt_len=4096, decode_steps=8, budget=memory.kv_cache_bytes(TOY, 4096, 1))
    lab.check_fits(toy, batch=1, prompt_len=8, decode_steps=8, budget=memory.kv_cache_bytes(TOY, 16, 1, "fp32"))


def test_an_out_of_memory_error_becomes_a_clean_skip(cpu):
    class Exhausted(torch.nn.Module):
        config = type("Config", (), {"vocab_size": 16})()

        def forward(self, input_ids, use_cache=True, cache=None):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    with pytest.raises(lab.MeasurementSkipped, match="batch 8 x 32 tokens ran out of memory"):
        lab.measure_generation(Exhausted(), cpu, 8, 32)


def test_a_run_skips_what_does_not_fit_and_carries_on(cpu):
    config = lab.LabConfig.for_device(cpu, hub_model=None, project_model=False, random_models=("llama-2-7b",),
                                      reduce=16, batches=(1, 512), prompt_lens=(8,), decode_steps=1, repeats=1,
                                      memory_budget=16 * 1024**2, vllm=False)
    results = lab.run_lab(config, cpu, log=lambda _: None)
    assert any("batch 512" in s["what"] and "free" in s["reason"] for s in results["skipped"])
    assert any(r["batch"] == 1 and r["quantity"] == "kv_bytes" for r in results["rows"])


@pytest.mark.parametrize("overrides, message", [
    ({"dtype": "fp8"}, "dtype"), ({"variants": ("w3a16",)}, "variants"), ({"batches": ()}, "batches"),
    ({"batches": (0,)}, "batches"), ({"random_models": ("gpt-9",)}, "unknown model"),
    ({"quant_method": "magic"}, "quant_method"), ({"repeats": 1.5}, "repeats"),
])
def test_bad_configuration_is_refused_by_name(overrides, message):
    with pytest.raises((TypeError, ValueError), match=message):
        lab.LabConfig(**overrides)


def test_devices_and_quantize_refuse_bad_names(toy, cpu):
    with pytest.raises(ValueError, match="device must be"):
        lab.detect_device("tpu")
    with pytest.raises(ValueError, match="variant"):
        lab.quantize(toy, "w2a16", cpu)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback where there is no GPU")
def test_asking_for_a_gpu_without_one_falls_back_to_the_cpu_with_a_message():
    said = []
    assert lab.detect_device("cuda", log=said.append).kind == "cpu"
    assert "No CUDA GPU" in said[0] and "Change runtime type" in said[0]


# --- vLLM ---------------------------------------------------------------------------------------------------------


def test_vllm_comparison_skips_cleanly_when_vllm_is_missing(cpu, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    said = []
    result = lab.compare_vllm("Qwen/Qwen2.5-0.5B", cpu, log=said.append)
    assert result["status"] == "skipped" and "vllm is not installed" in result["reason"] and said


def test_vllm_comparison_skips_on_a_cpu_even_where_vllm_is_installed(cpu, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    result = lab.compare_vllm("Qwen/Qwen2.5-0.5B", cpu, log=lambda _: None)
    assert result["status"] == "skipped" and "CUDA" in result["reason"]


def test_vllm_log_lines_are_read_in_both_engine_formats():
    v1 = ["Available KV cache memory: 4.80 GiB",
          "GPU KV cache size: 34,952 tokens, Maximum concurrency for 8,192 tokens per request: 4.27x"]
    assert lab.parse_vllm_log(v1) == {"available_kv_gib": 4.80, "kv_cache_tokens": 34_952, "max_model_len": 8192,
                                      "max_concurrency": 4.27}
    v0 = ["# GPU blocks: 2184, # CPU blocks: 512", "Maximum concurrency for 4096 tokens per request: 8.53x"]
    assert lab.parse_vllm_log(v0) == {"gpu_blocks": 2184, "max_model_len": 4096, "max_concurrency": 8.53}


def test_servebook_predicts_vllm_blocks_by_floor_from_the_same_memory():
    spec = ModelSpec.from_hf_config({"num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
                                     "num_key_value_heads": 2, "head_dim": 64})
    kv_memory = round(4.80 * 1024**3)
    predicted = lab.servebook_vllm_prediction(spec, kv_memory, max_model_len=8192, block_size=16)
    per_block = 16 * memory.kv_bytes_per_token(spec)
    assert predicted["gpu_blocks"] * per_block <= kv_memory < (predicted["gpu_blocks"] + 1) * per_block
    assert predicted["kv_cache_tokens"] == 16 * predicted["gpu_blocks"]
    assert math.isclose(predicted["max_concurrency"], predicted["gpu_blocks"] / 512)
    assert predicted["requests_that_fit"] == math.floor(predicted["max_concurrency"])


def test_cache_tensors_are_read_in_every_layout():
    k, v = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)
    assert lab.cache_bytes(((k, v), (k, v))) == 4 * k.numel() * 4
    legacy = type("Legacy", (), {"key_cache": [k], "value_cache": [v]})()
    assert lab.cache_bytes(legacy) == 2 * k.numel() * 4
    with pytest.raises(ValueError, match="no cache"):
        lab.cache_tensors(None)
    with pytest.raises(TypeError, match="tensors of a int"):
        lab.cache_tensors(3)


# --- the GPU path, exercised on the CPU with CUDA's bookkeeping faked ---------------------------------------------


class FakeT4(lab.Device):
    """A "CUDA" device whose tensors live on the CPU: runs every GPU-only branch of the lab without a GPU."""

    @property
    def torch_device(self):
        return torch.device("cpu")

    def synchronize(self):
        pass


def test_the_cuda_path_adds_allocator_peak_and_roofline_rows(monkeypatch):
    allocated = iter(range(0, 10**12, 4096))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_: next(allocated))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_: 10**12)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *_: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (10 * 1024**3, 15 * 1024**3))
    device = FakeT4("cuda", "Tesla T4", total_memory=15 * 1024**3, roofline_gpu=lab.roofline_gpu_for("Tesla T4"))
    config = lab.LabConfig.for_device(device, hub_model=None, random_models=("llama-2-7b",), batches=(1, 2),
                                      prompt_lens=(8,), decode_steps=1, repeats=1, variants=("w4a16",),
                                      perplexity_tokens=256, vllm=False)
    assert config.dtype == "fp16" and config.reduce == 1
    config.reduce = 16  # the real 7B shape is for a real GPU
    results = lab.run_lab(config, device, log=lambda _: None)
    quantities = {r["quantity"] for r in results["rows"]}
    assert {"allocated_bytes", "peak_bytes", "prefill_s", "decode_s", "perplexity"} <= quantities
    timed = [r for r in results["rows"] if r["unit"] in ("s", "tokens/s")]
    assert timed and all(r["predicted"] and "t4" in r["basis"] for r in timed)
    assert all(r["ratio"] >= 1 for r in timed if r["unit"] == "s"), "nothing runs faster than its roofline"
    exact = [r for r in results["rows"] if r["quantity"] in ("weight_bytes", "kv_bytes")]
    assert all(r["measured"] == r["predicted"] for r in exact)
    assert results["device"]["kind"] == "cuda" and results["note"].startswith("measured on a GPU")


# --- the bounds count only the work the lab's steps do --------------------------------------------------------------


def test_the_prefill_bound_leaves_out_logits_the_lab_never_computes(toy):
    fp16 = copy.copy(toy)
    fp16.variant = fp16.dtype = "fp16"
    t4 = lab.Device("cuda", "Tesla T4", roofline_gpu="t4")
    full, _, _ = lab.time_predictions(fp16, t4, 4, 64)
    kept, decode, _ = lab.time_predictions(fp16, t4, 4, 64, last_logits_only=True)
    head = TOY.vocab_size * TOY.d_model
    assert full.step.matmul_flops - kept.step.matmul_flops == 2 * head * (4 * 64 - 4)
    assert kept.time <= full.time
    assert decode.step == roofline.decode_step(toy.spec, 4, 64, "W16A16", "fp16")  # one token: nothing to leave out


def test_the_quantized_bound_dequantizes_once_per_step_as_qmodel_does(toy, cpu):
    w4 = lab.quantize(toy, "w4a16", cpu, group_size=128)
    w4.dtype = "fp16"
    t4 = lab.Device("cuda", "Tesla T4", roofline_gpu="t4")
    for tokens in (1, 64, 4096):
        prefill, _, _ = lab.time_predictions(w4, t4, 1, tokens)
        assert prefill.step.dequant_flops == 2 * roofline.matmul_params(toy.spec)
        assert prefill.step.weight_bytes == memory.weight_bytes(roofline.matmul_params(toy.spec), "int4", 128)


def test_a_random_model_too_big_for_the_budget_is_refused_before_it_is_built(cpu):
    with pytest.raises(lab.MeasurementSkipped, match="GiB of weights do not fit"):
        lab.load_random("llama-2-7b", cpu, "fp16", budget=1024**3)
    with pytest.raises(ValueError, match="factor"):
        lab.load_random(TOY, cpu, "fp32", reduce=0)


def _prefill_bound_by_the_first_edition_formula(model, device, batch, prompt_len):
    """The lab's first prefill bound: roofline's all-token step, minus the LM head on all but each last token."""
    if model.variant == "fp16":
        scheme = roofline.scheme("W16A16")
    else:
        scheme = roofline.Scheme(model.variant.upper(), f"int{lab.QUANT_BITS[model.variant]}", "fp16",
                                 group_size=model.group_size, dequant_flops_per_weight=2,
                                 dequant_tile_tokens=sys.maxsize)
    step = roofline.prefill_step(model.spec, batch, prompt_len, scheme, model.dtype)
    unused = 2 * model.spec.vocab_size * model.spec.d_model * (step.tokens - step.batch)
    return roofline.bound(replace(step, matmul_flops=step.matmul_flops - unused), device.roofline_gpu)


@pytest.mark.parametrize("variant", ["fp16", "w8a16", "w4a16"])
def test_the_last_token_prefill_bound_is_the_one_the_first_edition_computed(toy, cpu, variant):
    model = copy.copy(toy) if variant == "fp16" else lab.quantize(toy, variant, cpu, group_size=128)
    model.dtype = "fp16"
    model.variant = variant
    t4 = lab.Device("cuda", "Tesla T4", roofline_gpu="t4")
    for batch, prompt_len in ((1, 1), (4, 64), (32, 1024)):
        kept, _, _ = lab.time_predictions(model, t4, batch, prompt_len, last_logits_only=True)
        before = _prefill_bound_by_the_first_edition_formula(model, t4, batch, prompt_len)
        assert kept.step == before.step and kept.time == before.time


def test_one_scheme_describes_qmodel_s_dequantize_once_layers(toy, cpu):
    scheme = lab.qmodel_scheme("w4a16", 128)
    assert (scheme.name, scheme.weight_dtype, scheme.matmul_precision, scheme.group_size) == ("W4A16", "int4", "fp16",
                                                                                              128)
    assert scheme.dequant_flops_per_weight == 2 and scheme.dequant_tile_tokens > 10**15  # once, whatever the tokens
    assert lab.qmodel_scheme("w8a16", 64).weight_dtype == "int8"
    w4 = lab.quantize(toy, "w4a16", cpu, group_size=128)
    w4.dtype = "fp16"
    prefill, decode, _ = lab.time_predictions(w4, lab.Device("cuda", "Tesla T4", roofline_gpu="t4"), 2, 16)
    assert prefill.step.scheme == decode.step.scheme == scheme
    with pytest.raises(ValueError, match="variant must be one of"):
        lab.qmodel_scheme("fp16", 128)
    with pytest.raises(ValueError, match="group_size must be positive"):
        lab.qmodel_scheme("w4a16", 0)


def test_the_lab_names_the_quantization_methods_qmodel_has():
    assert lab.QUANT_METHODS == qmodel.METHODS


@pytest.mark.parametrize("version, keyword", [("4.40.2", "torch_dtype"), ("4.55.4", "torch_dtype"),
                                               ("4.56.0", "dtype"), ("4.57.0.dev0", "dtype"), ("5.0.0rc1", "dtype")])
def test_one_function_picks_the_dtype_keyword_of_this_transformers(version, keyword, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(transformers, "__version__", version)
    assert smallmodel.dtype_keyword() == keyword


@pytest.mark.parametrize("call, error, message", [
    (lambda: lab.torch_dtype("fp8"), ValueError, "dtype must be one of 'fp32', 'fp16', 'bf16', got 'fp8'"),
    (lambda: lab.reduced_spec("llama-3-8b", 2.0), TypeError, "factor must be a whole number"),
    (lambda: lab.LabConfig(variants="w4a16"), TypeError, "variants must be a list of names"),
    (lambda: lab.LabConfig(project_model="yes"), TypeError, "project_model must be True or False"),
    (lambda: lab.LabConfig(vllm=1), TypeError, "vllm must be True or False"),
    (lambda: lab.LabConfig(seed=-1), ValueError, "seed must be >= 0"),
    (lambda: lab.LabConfig(memory_budget=0), ValueError, "memory_budget must be > 0 bytes"),
    (lambda: lab.latest_recorded(prefer="gpu"), ValueError, "prefer must be one of 'cuda', 'cpu', 'any'"),
    (lambda: lab.hub_reachable(timeout=0), ValueError, "timeout must be a finite number > 0"),
    (lambda: lab.quantized_weight_prediction(TOY, "w2a16", 128, "fp32"), ValueError, "variant must be one of"),
])
def test_arguments_are_checked_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_quantize_and_the_timers_refuse_bad_arguments_by_name(toy, cpu):
    with pytest.raises(ValueError, match="method must be one of 'rtn', 'gptq', 'awq', got 'magic'"):
        lab.quantize(toy, "w4a16", cpu, method="magic")
    with pytest.raises(TypeError, match="last_logits_only must be True or False"):
        lab.time_predictions(toy, cpu, 1, 8, last_logits_only="yes")
    with pytest.raises(ValueError, match="seed must be >= 0"):
        lab.measure_generation(toy.module, cpu, 1, 8, seed=-1)
    for share in (0, 1.5):
        with pytest.raises(ValueError, match=r"gpu_memory_utilization must be in \(0, 1\]"):
            lab.compare_vllm("Qwen/Qwen2.5-0.5B", cpu, log=lambda _: None, gpu_memory_utilization=share)
