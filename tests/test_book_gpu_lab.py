"""What the GPU-lab chapter says about a run (servebook.book.gpu_lab): its tables are the lab's, its sentences
follow the run (CPU or GPU, with or without vLLM and the kernel section), and it says when no GPU run exists."""

import copy

import pytest

from servebook import lab
from servebook.book import gpu_lab
from test_gpu_run import kernel_section


@pytest.fixture(scope="module")
def cpu_run():
    return lab.latest_recorded("cpu")


def _cells(table) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.data.splitlines()[2:]]


def test_the_page_tables_are_the_labs_rows_with_models_and_quantities_named(cpu_run):
    shown = gpu_lab.byte_rows(cpu_run)
    page, labs = _cells(gpu_lab.results_table(shown)), lab.table({"rows": shown})
    assert [row[3:] for row in page] == [[r[c] for c in ("B", "S", "predicted", "measured", "ratio")] for r in labs]
    assert {row[0] for row in page} == {"Llama-2-7B/8", "tiny-llama"}  # registry ids read as display names
    assert {row[2] for row in page} == {"weights", "KV cache"}
    ppl = _cells(gpu_lab.results_table(cpu_run["rows"], ["perplexity"]))
    assert [row[6] for row in ppl] == [r["measured"] for r in lab.table(cpu_run, ["perplexity"])]


def test_byte_rows_hold_every_weight_and_the_largest_cache_of_each_model(cpu_run):
    shown = gpu_lab.byte_rows(cpu_run)
    weights = [r for r in cpu_run["rows"] if r["quantity"] == "weight_bytes"]
    caches = [r for r in shown if r["quantity"] == "kv_bytes"]
    assert [r for r in shown if r["quantity"] == "weight_bytes"] == weights
    assert len(caches) == len({(r["model"], r["variant"]) for r in weights})
    for cache in caches:
        same = [r for r in cpu_run["rows"] if r["quantity"] == "kv_bytes"
                and (r["model"], r["variant"]) == (cache["model"], cache["variant"])]
        assert cache["batch"] * cache["seq_len"] == max(r["batch"] * r["seq_len"] for r in same)


def test_a_cpu_run_says_what_it_cannot_show(cpu_run):
    assert "That is a CPU, at reduced size" in gpu_lab.provenance_sentence(cpu_run, measured_now=False)
    assert gpu_lab.provenance_sentence(cpu_run, measured_now=False).startswith(
        "**The results in this chapter were recorded on CPU")
    assert gpu_lab.overhead_sentence(cpu_run).startswith("A CPU has no allocator statistics")
    assert "is not in `servebook.roofline`'s GPU table" in gpu_lab.time_sentence(cpu_run)
    assert gpu_lab.vllm_rows(cpu_run) == [] and gpu_lab.vllm_sentence(cpu_run).startswith("*In this run:")


def test_the_decode_slowdown_compares_w4a16_with_its_float_model_at_one_shape(cpu_run):
    decode = {(r["model"], r["variant"], r["batch"], r["seq_len"]): r["measured"] for r in cpu_run["rows"]
              if r["quantity"] == "decode_s"}
    model, _, b, s = max((k for k in decode if k[1] == "w4a16"), key=lambda k: k[2] * k[3])
    float_variant = next(v for v in lab.FLOAT_VARIANTS if (model, v, b, s) in decode)
    ratio = decode[(model, "w4a16", b, s)] / decode[(model, float_variant, b, s)]
    assert f"took {ratio:.1f} times as long as the {float_variant.upper()} one (batch {b}" in \
        gpu_lab.decode_slowdown(cpu_run)


def test_no_recorded_gpu_run_is_said_plainly(cpu_run):
    recorded = gpu_lab.gpu_recorded()
    note = gpu_lab.recorded_gpu_note(measured_now=False)
    assert (note == "") == recorded
    if not recorded:
        assert note.startswith("No GPU run is recorded yet")
        assert gpu_lab.kernel_run(cpu_run) is None
        assert gpu_lab.kernel_sentence(None).startswith("No recorded GPU run has timed the kernel yet")
    assert gpu_lab.recorded_gpu_note(measured_now=True) == ""


def test_a_gpu_run_gets_its_overhead_vllm_and_kernel_rows(cpu_run):
    run = copy.deepcopy(cpu_run)
    run["device"] = {**run["device"], "kind": "cuda", "name": "NVIDIA H200"}
    model = run["rows"][0]
    run["rows"] += [{**model, "quantity": "allocated_bytes", "ratio": 1.0004},
                    {**model, "quantity": "peak_bytes", "batch": 8, "ratio": 1.7}]
    run["vllm"] = {"status": "measured", "kv_memory_bytes": 4 * 2**30,
                   "comparison": {"gpu_blocks": {"vllm": 21_845, "servebook": 21_845, "ratio": 1.0}}}
    run["versions"] = {**run["versions"], "vllm": "0.11.0"}
    fused = kernel_section()["rows"][0]
    run["kernel"] = kernel_section([fused, {**fused, "path": "unfused", "seconds": 9e-6},
                                    {**fused, "path": "fp16", "seconds": 4e-6}])
    assert "reached 1.70 times the KV cache" in gpu_lab.overhead_sentence(run)
    assert gpu_lab.vllm_rows(run) == [["gpu_blocks", "21,845", "21,845", "1.0000"]]
    assert gpu_lab.kernel_run(run) is run
    assert gpu_lab.kernel_rows(run) == [["q_proj", "64 x 64", "1.0 us", "9.0 us", "4.0 us", "2 GB/s", "80%", "60%"]]
    assert gpu_lab.kernel_sentence(run).startswith("On NVIDIA H200")
