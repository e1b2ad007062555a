"""The GPU run's script and the lab's GPU-only measurements, checked on a CPU: the dry run writes a valid
document, the new sections have a schema, and what cannot run here is skipped with its reason."""

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from servebook import kernels, lab

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_section(rows=None):
    row = {"layers": ["q_proj"], "n": 64, "k": 64, "m": 1, "path": "fused", "timing": "cuda-graph",
           "seconds": 1e-6, "bytes": 2_240, "bytes_per_s": 2.24e9, "fraction_of_copy": 0.8,
           "fraction_of_datasheet": 0.6, "flops_per_s": 8.2e9, "fraction_of_fp16_peak": 1e-5,
           "tiles": {"block_m": 16}}
    return {"model": "llama-2-7b", "group_size": 32, "dtype": "fp16", "datasheet_bytes_per_s": 4.8e12,
            "copy": {"bytes": 2**30, "seconds": 5e-4, "bytes_per_s": 4.3e12, "basis": "copy_"},
            "max_relative_error": {"64x64": 1e-3}, "rows": [row] if rows is None else rows}


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script measures it; this is the dry run")
def test_the_gpu_script_refuses_a_machine_without_one(tmp_path, capsys):
    assert _script("gpu_run").main(["--out", str(tmp_path / "r.json")]) == 2
    assert "there is none here (use --cpu-smoke for a dry run)" in capsys.readouterr().out
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the benchmark runs")
def test_the_microbenchmark_says_it_needs_cuda_and_exits_cleanly(capsys):
    assert _script("bench_w4a16").main([]) == 0
    assert "needs a CUDA GPU and Triton" in capsys.readouterr().out


def test_the_schema_holds_the_kernel_section_and_checks_its_rows():
    results = copy.deepcopy(lab.latest_recorded("cpu"))
    lab.validate({**results, "kernel": kernel_section()})
    bad = kernel_section()
    bad["rows"][0]["path"] = "cublas"
    with pytest.raises(ValueError, match="lab results do not match the schema at kernel/rows/0/path"):
        lab.validate({**results, "kernel": bad})


def test_without_jsonschema_the_rows_are_still_checked():
    results = copy.deepcopy(lab.latest_recorded("cpu"))
    row = next(r for r in results["rows"] if r["predicted"])
    row["ratio"] = row["ratio"] * 2
    with pytest.raises(ValueError, match="is not measured / predicted"):
        lab.validate(results, schema=False)
    with pytest.raises(TypeError, match="schema must be True or False"):
        lab.validate(results, schema="no")


def test_the_new_settings_are_checked_and_default_off():
    config = lab.LabConfig()
    assert not (config.quantize_random or config.unfused or config.decode_graph or config.kernel_benchmark)
    with pytest.raises(TypeError, match="unfused must be True or False"):
        lab.LabConfig(unfused="yes")
    with pytest.raises(ValueError, match="kernel_batches must be >= 1"):
        lab.LabConfig(kernel_batches=(1, 0))


def test_a_cpu_takes_the_dequantize_path_and_has_no_cuda_graph():
    cpu = lab.Device("cpu", "CPU")
    small = lab.load_random("llama-3.2-1b", cpu, "fp32", reduce=16)   # one block, groups of 128 divide it
    w4 = lab.quantize(small, "w4a16", cpu, group_size=128)
    assert w4.kernel == "dequantize-matmul" and "(dequantize, then matmul)" in w4.note
    assert lab.kernel_path(w4.module, cpu, "fp16") == "dequantize-matmul"   # a CPU, whatever the dtype
    with pytest.raises(lab.MeasurementSkipped, match="a CUDA graph needs a CUDA device"):
        lab.graphed_decode(small.module, cpu, 1, 8)


def test_the_fused_kernels_bound_dequantizes_once_per_tile_of_tokens():
    fused, unfused = lab.fused_scheme(128), lab.qmodel_scheme("w4a16", 128)
    assert fused.dequant_tile_tokens == kernels.choose_tiles(4096, 4096, 4096, 128).block_m == 128
    assert (fused.weight_dtype, fused.group_size) == (unfused.weight_dtype, unfused.group_size) == ("int4", 128)
    assert unfused.dequant_tile_tokens > 10**9        # dequantize-then-matmul: once per forward


@pytest.mark.slow
@pytest.mark.skipif(not kernels.triton_available(), reason="the dry run times the kernel in Triton's interpreter")
def test_the_cpu_dry_run_of_the_gpu_script_writes_a_valid_document(tmp_path):
    out = tmp_path / "smoke.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_run.py"), "--cpu-smoke", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    lab.validate(results)
    kernel = results["kernel"]
    shapes = {(r["n"], r["k"]) for r in kernel["rows"]}
    assert shapes == set(lab.layer_shapes(lab.reduced_spec("llama-3.2-1b", 8)))
    assert {r["path"] for r in kernel["rows"]} == {"fused", "unfused", "fp16"}
    assert max(kernel["max_relative_error"].values()) < 2e-3       # the kernel agrees with dequantize-then-matmul
    assert {(m["variant"], m["kernel"]) for m in results["models"]} == {("fp32", None), ("w4a16", "dequantize-matmul")}
    assert sum("a CUDA graph needs a CUDA device" in s["reason"] for s in results["skipped"]) == 2
    assert results["config"]["quantize_random"] and results["config"]["kernel_benchmark"]


def test_the_gpu_script_imports_nothing_only_the_book_needs():
    # The GPU machine has torch, triton and transformers, but neither ipywidgets nor jsonschema.
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('gpu_run', sys.argv[1]); "
            "run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run); run._servebook(); "
            "import servebook.kernels, servebook.qmodel, servebook.smallmodel, servebook.lab.graph; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('ipywidgets', 'jsonschema', 'matplotlib', 'IPython', 'jupytext', 'nbclient')))")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks" / "gpu_run.py")], capture_output=True,
                          text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_a_failing_kernel_benchmark_is_skipped_and_the_run_kept(monkeypatch):
    from servebook.lab import run as lab_run

    def fails(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(lab_run, "measure_kernel", fails)
    monkeypatch.setattr(lab_run.kernels, "triton_available", lambda: True)
    run = lab.Run(lab.LabConfig(kernel_benchmark=True), lab.Device("cpu", "CPU"), log=lambda _: None)
    assert run.measure_kernel() is None
    assert run.skipped == [{"what": "the fused kernel alone",
                            "reason": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"}]
