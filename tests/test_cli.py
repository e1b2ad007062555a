"""The command line prints the library's numbers, and refuses what the library refuses, naming the known ids."""

import argparse
import io
import json
import re
import subprocess
import sys
from importlib import metadata

import pytest

from servebook import __version__, advisor, cli, gpus, memory, models
from servebook.book import scenarios
from servebook.models import ModelSpec
from servebook.units import GB, GiB

# The fields of meta-llama/Meta-Llama-3-8B's config.json that decide its memory.
LLAMA_3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
    "vocab_size": 128256,
}


def run(command: str) -> str:
    out = io.StringIO()
    assert cli.main(command.split(), out=out) == 0
    return out.getvalue()


def run_json(command: str):
    return json.loads(run(command + " --json"))


def refused(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(command.split())
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_kv_prints_the_bytes_of_the_library():
    answer = run_json("kv llama-3-8b --context 8192")
    assert answer["bytes_per_token"] == memory.kv_bytes_per_token("llama-3-8b")
    assert answer["bytes_per_request"] == memory.kv_cache_bytes("llama-3-8b", seq_len=8192) == GiB
    text = run("kv llama-3-8b --context 8192 --batch 3 --dtype int8")
    assert f"{memory.kv_cache_bytes('llama-3-8b', seq_len=8192, batch=3, dtype='int8'):,} B" in text
    assert f"{memory.kv_bytes_per_token('llama-3-8b', 'int8'):,} B" in text


def test_kv_reads_a_config_json_file_or_its_folder(tmp_path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_3_8B_CONFIG))
    spec = ModelSpec.from_hf_config(folder / "config.json")
    for where in (folder / "config.json", folder):
        answer = run_json(f"kv {where} --context 4096")
        assert answer["bytes_per_request"] == memory.kv_cache_bytes(spec, seq_len=4096)
    assert answer["bytes_per_token"] == memory.kv_bytes_per_token("llama-3-8b")  # the registry's shape


def library_plan(model: str, gpu: str, weights: str, context: int = 4096, overhead: int = 4 * GiB,
                 group_size: int | None = None) -> memory.CapacityPlan:
    spec = models.get(model)
    weight_bytes = memory.weight_bytes(spec.n_params, weights, group_size=group_size)
    return memory.capacity_plan(gpus.get(gpu).memory, weight_bytes, memory.kv_cache_bytes(spec, seq_len=context),
                                overhead=overhead)


@pytest.mark.parametrize("weights", ["fp16", "int8", "int4"])
def test_fit_counts_the_users_of_the_capacity_plan(weights):
    plan = library_plan("llama-2-13b", "a100-80gb-sxm", weights)
    answer = run_json(f"fit llama-2-13b --gpu a100-80gb-sxm --weights {weights}")
    assert answer["users"] == plan.requests
    assert answer["weights_bytes"] == plan.weights and answer["leftover_bytes"] == plan.leftover
    assert run(f"fit llama-2-13b --gpu a100-80gb-sxm --weights {weights}").startswith(
        f"Llama-2-13B on A100 80GB SXM: {plan.requests} users of 4,096 tokens")


def test_fit_takes_context_overhead_groups_and_a_memory_size():
    plan = library_plan("llama-3-8b", "l4", "int4", context=2048, overhead=2 * GB, group_size=128)
    answer = run_json("fit llama-3-8b --gpu l4 --weights int4 --group-size 128 --context 2048 --overhead 2GB")
    assert (answer["users"], answer["overhead_bytes"], answer["group_size"]) == (plan.requests, 2 * GB, 128)
    assert run_json("fit llama-2-13b --gpu a100-80gb-sxm --memory 40GiB")["gpu_bytes"] == 40 * GiB


def test_plan_shows_every_line_of_the_budget():
    plan = library_plan("llama-2-13b", "a100-80gb-sxm", "int4")
    text = run("plan llama-2-13b --gpu a100-80gb-sxm --weights int4")
    for amount in (plan.gpu, plan.weights, plan.overhead, plan.kv_pool, plan.per_request, plan.leftover):
        assert re.search(rf"  {amount / GiB:,.3f}  +{amount:,}$", text, re.M)
    assert re.search(rf"^users +{plan.requests}$", text, re.M)


def test_advise_ranks_the_levers_as_the_advisor_does():
    case = scenarios.LEVER_SCENARIOS["A"]
    w = case.workload
    command = (f"advise {case.model} --gpu {case.gpu} --prompt {w.prompt_len} --output {w.output_len} "
               f"--batch {w.batch} --max-len {w.max_len} --goal {w.goal}")
    advice = advisor.advise(case.model, case.gpu, w)
    assert run_json(command)["ranking"] == json.loads(json.dumps(advice.rows()))
    text = run(command)
    table = text.split("\n\n")[1].splitlines()[2:]
    assert [line.split()[0] for line in table[1:]] == [
        str(rank) for rank in range(1, len(advice.ranking) + 1)]
    for line, result in zip(table[1:], advice.ranking, strict=True):
        assert result.lever in line and f"{round(result.served.throughput):,}" in line
    assert all(len(line) <= cli.WIDTH for line in text.splitlines())


def test_the_listings_follow_the_registries():
    assert [row["id"] for row in run_json("models")] == models.names()
    assert [row["id"] for row in run_json("gpus")] == gpus.names()
    listed = run("gpus").splitlines()[2:]
    assert [line.split()[0] for line in listed] == gpus.names()


@pytest.mark.parametrize("command, kind, known", [
    ("kv llama-9 --context 10", "model", models.names),
    ("fit llama-2-13b --gpu a100", "GPU", gpus.names),
    ("advise llama-2-13b --gpu b900 --prompt 1 --output 1", "GPU", gpus.names),
])
def test_unknown_ids_are_refused_with_the_known_ones(command, kind, known, capsys):
    message = refused(command, capsys)
    assert f"unknown {kind}" in message and all(name in message for name in known())


def test_questions_the_library_refuses_are_errors_naming_the_argument(capsys):
    assert "context must be >= 1" in refused("kv llama-3-8b --context 0", capsys)
    assert "exceed the GPU" in refused("fit llama-2-70b --gpu t4", capsys)
    assert "goal must be one of" in refused("advise llama-2-13b --gpu h200 --prompt 1 --output 1 --goal fast", capsys)
    assert "needs a unit" in refused("fit llama-2-13b --gpu h200 --overhead 4", capsys)
    assert "no such config.json" in refused("kv missing/config.json --context 1", capsys)


@pytest.mark.parametrize("text, expected", [("4GiB", 4 * GiB), ("80 GB", 80 * GB), ("0", 0), ("1.5GiB", 3 * GiB // 2),
                                            ("0.5KiB", 512), ("4096B", 4096)])
def test_sizes_are_read_with_their_unit(text, expected):
    assert cli.size(text) == expected


@pytest.mark.parametrize("text", ["4", "four GiB", "4 parsecs", "-1GiB"])
def test_sizes_without_a_known_unit_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        cli.size(text)


def test_transcript_shows_the_command_and_what_it_prints():
    shown = cli.transcript("kv llama-3-8b --context 8192")
    assert shown.splitlines()[0] == "$ servebook kv llama-3-8b --context 8192"
    assert f"{GiB:,} B" in shown
    assert "unknown model" in cli.transcript("kv nope --context 1")


def test_the_console_script_and_python_m_run_the_same_main():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts") if e.name == "servebook"}
    assert scripts == {"servebook": "servebook.cli:main"}
    done = subprocess.run([sys.executable, "-m", "servebook", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"servebook {__version__}"


def test_a_transcript_fits_the_page_and_types_the_command_it_ran():
    command = "advise llama-2-13b --gpu a100-80gb-sxm --prompt 30 --output 30 --batch 1000 --max-len 2048"
    lines = cli.transcript(command).splitlines()
    assert max(len(line) for line in lines) <= cli.WIDTH
    typed = " ".join(line.removesuffix(" \\").strip() for line in lines[:2])
    assert lines[0].endswith(" \\") and typed == f"$ servebook {command}"
    error = cli.transcript("fit llama-2-13b --gpu a100").splitlines()
    assert max(len(line) for line in error) <= cli.WIDTH and "rtx-4090" in error[-1]
