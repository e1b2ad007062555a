"""The web site's calculators: servebook's data, and ojs/calculators.js run with Node against servebook.

The JavaScript gets the numbers servebook writes and only multiplies, sums, caps and
floors them; here it must give servebook's bytes, batch sizes, longest sequences and
users exactly, on every model, several GPUs, every dtype, short and long contexts,
and budgets in both units.
"""

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from servebook import memory, models
from servebook.book import calculators, scenarios
from servebook.book.widgets import capacity, kv
from servebook.units import DTYPE_BYTES, GiB

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "ojs" / "calculators.js"
DATA = ROOT / "ojs" / calculators.FILE_NAME
NODE = shutil.which("node")

# Runs the module on each case read from stdin (a JSON list of [function, inputs]); BigInts come back as strings.
DRIVER = """
import {readFileSync} from "node:fs";
import {pathToFileURL} from "node:url";
const calculators = await import(pathToFileURL(process.argv[1]).href);
const data = JSON.parse(readFileSync(process.argv[2], "utf8"));
const cases = JSON.parse(readFileSync(0, "utf8"));
const plain = (key, value) => typeof value === "bigint" ? value.toString() : value;
const results = cases.map(([name, inputs]) => {
  try { return calculators[name](data, inputs); } catch (error) { return {error: error.message}; }
});
process.stdout.write(JSON.stringify(results, plain));
"""

needs_node = pytest.mark.skipif(NODE is None, reason="the JavaScript calculators are tested with Node")


def run_node(cases: list) -> list:
    done = subprocess.run([NODE, "--input-type=module", "-e", DRIVER, str(MODULE), str(DATA)],
                          input=json.dumps(cases), capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


def number(value):
    return None if value is None else int(value)


# --------------------------------------------------------------------------- the data servebook writes


def test_the_committed_data_is_what_servebook_writes():
    # Rewritten by `python -m tools.build figures` (the site's pre-render step); commit it when it changes.
    assert DATA.read_text(encoding="utf-8") == calculators.data_text()


def test_the_data_holds_every_model_gpu_and_dtype_with_display_names():
    data = json.loads(calculators.data_text())
    assert [m["id"] for m in data["models"]] == models.names()
    assert [m["name"] for m in data["models"]] == [models.display_name(n) for n in models.names()]
    assert {g["name"] for g in data["gpus"]} >= {"A100 80GB SXM", "H200 SXM", "L4"}
    assert all(set(m["kv"]) == set(DTYPE_BYTES) for m in data["models"])


def test_each_layer_kind_carries_its_bytes_per_token_and_its_cap():
    entry = calculators.model_entry(models.get("gemma-2-9b"))
    assert entry["kv"]["fp16"] == [{"kind": "global", "layers": 21, "cap": None, "bytes_per_token": 172_032},
                                   {"kind": "sliding", "layers": 21, "cap": 4096, "bytes_per_token": 172_032}]
    scout = calculators.model_entry(models.get("llama-4-scout"))["kv"]["fp16"]
    assert [(k["kind"], k["layers"], k["cap"]) for k in scout] == [("global", 12, None), ("chunked", 36, 8192)]
    deepseek = calculators.model_entry(models.get("deepseek-v3"))["kv"]["bf16"]
    assert deepseek == [{"kind": "global", "layers": 61, "cap": None, "bytes_per_token": 70_272}]  # (512 + 64) x 61 x 2


def test_weights_are_the_planners_for_every_precision_and_group():
    spec = models.get("llama-2-13b")
    table = calculators.weight_table(spec)
    case = scenarios.CapacityCase(spec)
    assert table["fp16"] == {"none": case.weights("fp16")} and table["int8"] == {"none": case.weights("int8")}
    assert table["int4"] == {"none": case.weights("int4"), **{str(g): case.weights("int4", g) for g in (32, 64, 128)}}


def test_a_width_that_is_not_whole_bytes_is_refused_not_rounded():
    odd = models.ModelSpec("odd", n_layers=1, d_model=3, n_heads=1)  # K + V = 6 elements: 3 bytes in int4
    assert calculators.kv_layers(odd, "int4")[0]["bytes_per_token"] == 3
    latent = kv.custom_model(1, 8, 1, head_dim=8, kv_rank=3, rope_dim=2)  # MLA: 3 + 2 = 5 elements, 2.5 bytes
    with pytest.raises(ValueError, match="2.5 bytes per token, not a whole number"):
        calculators.kv_layers(latent, "int4")


def test_integers_javascript_cannot_carry_are_refused():
    with pytest.raises(ValueError, match=r"data.models\[0\].n_params = 9,007,199,254,740,992"):
        calculators.data_text({"models": [{"n_params": 2**53}]})
    assert calculators.data_text({"n": 2**53 - 1}).strip().endswith("}")


# --------------------------------------------------------------------------- the module, with Node

SEQ_LENS = (1, 1023, 4096, 4097, 131_072, 1_000_000)
BATCHES = (1, 8)
BUDGETS = ((40, "GiB"), (69.5, "GiB"), (0.1, "GB"), (141, "GB"))
KV_GRID = list(itertools.product(models.names(), DTYPE_BYTES, SEQ_LENS, BATCHES, BUDGETS))


@pytest.fixture(scope="module")
def kv_results():
    cases = [["kvNumbers", {"model": m, "dtype": d, "seq_len": s, "batch": b, "budget": v, "unit": u}]
             for m, d, s, b, (v, u) in KV_GRID]
    return run_node(cases)


@needs_node
def test_kv_bytes_batches_and_longest_sequences_are_servebooks(kv_results):
    assert len(kv_results) == len(KV_GRID) > 5000
    for (name, dtype, seq_len, batch, (value, unit)), got in zip(KV_GRID, kv_results, strict=True):
        budget = kv.budget_bytes(value, unit)
        per_request = memory.kv_cache_bytes(name, seq_len, dtype=dtype)
        expected = {"budget": budget, "perToken": memory.kv_bytes_per_token(name, dtype),
                    "perRequest": per_request, "total": memory.kv_cache_bytes(name, seq_len, batch, dtype),
                    "fits": memory.max_batch(budget, per_request),
                    "longest": memory.longest_seq_len(name, budget, batch, dtype)}
        assert {key: number(got[key]) for key in expected} == expected, (name, dtype, seq_len, batch, value, unit)


GPUS = ("a100-80gb-sxm", "h100-sxm", "h200", "l4", "mi300x", "custom")
PLANNED = [name for name in models.names() if models.get(name).n_params]
CAPACITY_GRID = list(itertools.product(PLANNED, GPUS, capacity.WEIGHT_DTYPES, ("none", "128", "32"), (4096, 131_072),
                                       ("fp16", "fp8"), ((4, "GiB"), (0, "GiB"), (2.5, "GB"))))


def planner_inputs(name, gpu, weights, group, seq_len, kv_dtype, overhead_unit):
    overhead, unit = overhead_unit
    return {"model": name, "gpu": gpu, "gpu_memory": 80, "weights": weights, "group": group, "overhead": overhead,
            "seq_len": seq_len, "kv_dtype": kv_dtype, "unit": unit}


@needs_node
def test_planned_users_are_servebooks_for_every_precision():
    results = run_node([["capacityNumbers", planner_inputs(*case)] for case in CAPACITY_GRID])
    assert len(results) == len(CAPACITY_GRID) > 5000
    for case, got in zip(CAPACITY_GRID, results, strict=True):
        name, gpu, weights, group, seq_len, kv_dtype, (overhead, unit) = case
        group_size = None if group == "none" else int(group)
        gpu_bytes = capacity.size_bytes("gpu_memory", 80, unit) if gpu == "custom" else None
        plan = scenarios.CapacityCase(name, gpu if gpu_bytes is None else "a100-80gb-sxm",
                                      capacity.size_bytes("overhead", overhead, unit), seq_len, kv_dtype,
                                      gpu_bytes=gpu_bytes)
        sizes = group_size if weights == "int4" else None
        assert (number(got["perUser"]), number(got["weights"]), number(got["overhead"])) == (
            plan.per_user, plan.weights(weights, sizes), plan.overhead), case
        assert {dtype: number(n) for dtype, n in got["users"].items()} == {
            dtype: plan.users(dtype, group_size if dtype == "int4" else None) for dtype in capacity.WEIGHT_DTYPES}, case


TEXT_CASES = [("llama-2-13b", 4096, 8, "fp16", 40, "GiB"), ("gemma-2-9b", 8192, 4, "fp16", 40, "GiB"),
              ("mistral-7b", 32_768, 4, "int8", 69.5, "GiB"), ("phi-3-mini", 4096, 2, "fp16", 0.1, "GB"),
              ("deepseek-v3", 1, 1, "bf16", 40, "GB"), ("llama-4-scout", 1_000_000, 1, "fp8", 141, "GB"),
              ("llama-2-7b", 10**8, 1000, "fp16", 40, "GiB")]


@needs_node
def test_the_calculator_shows_the_notebook_widgets_text():
    results = run_node([["kvText", {"model": m, "seq_len": s, "batch": b, "dtype": d, "budget": v, "unit": u}]
                        for m, s, b, d, v, u in TEXT_CASES])
    for (m, s, b, d, v, u), text in zip(TEXT_CASES, results, strict=True):
        assert text == kv.kv_calculator_text(m, s, batch=b, dtype=d, budget=v, budget_unit=u)


@needs_node
def test_the_planner_shows_the_notebook_widgets_text():
    cases = [planner_inputs("llama-2-13b", "a100-80gb-sxm", "fp16", "none", 4096, "fp16", (4, "GiB")),
             planner_inputs("llama-2-13b", "a100-80gb-sxm", "int4", "128", 4096, "fp16", (4, "GiB")),
             planner_inputs("mixtral-8x7b", "h200", "fp16", "none", 4096, "fp16", (4, "GiB")),
             planner_inputs("gemma-3-27b", "h200", "fp16", "none", 131_072, "fp16", (4, "GiB")),
             planner_inputs("llama-2-70b", "a100-80gb-sxm", "fp16", "none", 4096, "fp16", (4, "GiB")),
             planner_inputs("llama-2-13b", "custom", "int4", "none", 4096, "fp16", (0, "GB"))]
    results = run_node([["capacityText", inputs] for inputs in cases])
    for inputs, text in zip(cases, results, strict=True):
        group = None if inputs["group"] == "none" else int(inputs["group"])
        assert text == capacity.capacity_text(inputs["model"], inputs["gpu"], inputs["weights"], inputs["overhead"],
                                              inputs["seq_len"], inputs["kv_dtype"], inputs["unit"], group_size=group,
                                              gpu_memory=inputs["gpu_memory"])


@needs_node
def test_sizes_are_read_as_the_decimals_the_reader_typed():
    values = [40, 69.5, 0.1, 0.3, 1e-7, 1.5e21, 12.345678901234567, 2.675, 1 / 3]
    cases = [["kvNumbers", {"model": "gpt2", "dtype": "fp16", "seq_len": 1, "batch": 1, "budget": v, "unit": u}]
             for v in values for u in ("GiB", "GB")]
    got = [number(r["budget"]) for r in run_node(cases)]
    assert got == [kv.budget_bytes(v, u) for v in values for u in ("GiB", "GB")]


@needs_node
def test_bad_input_says_what_is_allowed():
    base = {"model": "llama-2-13b", "seq_len": 4096, "batch": 1, "dtype": "fp16", "budget": 40, "unit": "GiB"}
    bad = [base | {"seq_len": 0}, base | {"batch": 1.5}, base | {"budget": 0}, base | {"model": "gpt-5"}]
    texts = run_node([["kvText", inputs] for inputs in bad])
    assert texts == ["cannot compute: seq len S must be a whole number >= 1, got 0",
                     "cannot compute: batch B must be a whole number >= 1, got 1.5",
                     "cannot compute: budget (GiB) must be a finite number > 0, got 0",
                     "cannot compute: unknown model gpt-5"]
    plan = planner_inputs("llama-2-13b", "a100-80gb-sxm", "fp16", "none", 4096, "fp16", (80, "GiB"))
    assert run_node([["capacityText", plan]]) == [
        "cannot compute: overhead (80 GiB) must be smaller than the GPU's memory"]


def test_the_defaults_are_the_chapters_worked_examples():
    opening = calculators.defaults()
    assert opening["kv"] | {"batch": None} == {"model": "llama-2-13b", "seq_len": 4096, "batch": None, "dtype": "fp16",
                                               "budget": 40, "unit": "GiB"}
    assert (opening["capacity"]["overhead"], opening["capacity"]["gpu"]) == (4, "a100-80gb-sxm")
    assert GiB * opening["capacity"]["overhead"] == capacity.DEFAULT.overhead
