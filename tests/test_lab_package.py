"""The lab is a package of one module per concern, layered, importable without torch, and run from the command line."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servebook import lab
from servebook.lab import __main__ as cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "companion" / "servebook" / "lab"

# Every public name of the single-module servebook.lab, importable where it always was.
FIRST_EDITION_NAMES = (
    "SCHEMA_VERSION", "DEFAULT_HUB_MODEL", "FLOAT_VARIANTS", "QUANT_BITS", "QUANT_VARIANTS", "VARIANTS", "QUANTITIES",
    "ModelUnavailable", "MeasurementSkipped", "Device", "roofline_gpu_for", "detect_device", "environment",
    "LabModel", "torch_dtype", "llama_config", "reduced_spec", "load_random", "hub_reachable", "load_hub",
    "load_project", "linear_shapes", "quantized_weight_prediction", "quantize", "tensor_bytes", "weight_bytes_of",
    "other_buffer_bytes", "cache_tensors", "cache_bytes", "prefill_cache", "timed", "Generation",
    "measure_generation", "perplexity", "time_predictions", "generation_rows", "LabConfig", "check_fits", "Run",
    "run_lab", "parse_vllm_log", "servebook_vllm_prediction", "compare_vllm", "SCHEMA", "validate", "recorded_dir",
    "recorded_runs", "latest_recorded", "write_results", "table", "format_table", "markdown_table", "provenance",
)

# What each module of the package may import: its siblings below it (device <- load <- measure <- predict <- run;
# results and vllm beside) and, from servebook, only modules below the lab.
SIBLINGS = {
    "device": set(),
    "load": {"device"},
    "results": {"load"},
    "measure": {"device"},
    "predict": {"device", "load", "measure", "results"},
    "vllm": {"device"},
    "graph": {"device", "measure"},
    "kernel": {"device", "load"},
    "run": {"device", "load", "measure", "predict", "results", "vllm", "graph", "kernel"},
    "__main__": {"device", "load", "results", "run"},
    "__init__": {"device", "load", "measure", "predict", "results", "run", "vllm", "graph", "kernel"},
}
BELOW_THE_LAB = {"models", "memory", "roofline", "qmodel", "smallmodel", "quant", "checks", "units", "gpus", "hub",
                 "kernels", "__version__", "lab"}


def test_every_first_edition_name_is_still_exported():
    missing = [name for name in FIRST_EDITION_NAMES if not hasattr(lab, name)]
    assert not missing
    assert set(FIRST_EDITION_NAMES) <= set(lab.__all__)
    assert all(hasattr(lab, name) for name in lab.__all__)


def test_every_name_the_book_uses_is_exported():
    pages = [*ROOT.glob("chapters/*.qmd"), *ROOT.glob("exercises/*.qmd"), *ROOT.glob("benchmarks/*.py"),
             *(ROOT / "companion" / "servebook" / "book").rglob("*.py")]
    used = {name for page in pages for name in re.findall(r"(?<![\w./-])lab\.(\w+)", page.read_text())}
    assert {"run_lab", "latest_recorded", "timed"} <= used  # the scan finds what chapter 09 and its figures call
    assert sorted(used - set(lab.__all__)) == []


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(sibling modules, servebook modules) that a module of the package imports."""
    siblings, package = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                siblings.add(node.module)
            else:
                siblings.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 2:
            package.update([node.module] if node.module else [alias.name for alias in node.names])
    return siblings, package


@pytest.mark.parametrize("module", sorted(SIBLINGS))
def test_each_module_imports_only_what_lies_below_it(module):
    siblings, package = _imports(PACKAGE / f"{module}.py")
    assert siblings <= SIBLINGS[module], f"{module} imports {sorted(siblings - SIBLINGS[module])}"
    assert package <= BELOW_THE_LAB, f"{module} imports servebook.{sorted(package - BELOW_THE_LAB)}"


def test_the_package_lists_every_module_it_holds():
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(SIBLINGS)


def test_importing_the_lab_imports_neither_torch_nor_transformers():
    """The book's figures import the lab to draw recorded runs: that must work where torch is not installed."""
    code = "import sys, servebook.lab; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the command line ------------------------------------------------------------------------------------------


def test_the_command_line_parses_into_lab_settings():
    args = cli.argument_parser().parse_args(["--device", "cpu", "--hub-model", "none", "--random-models", "llama-3-8b",
                                    "mistral-7b", "--dtype", "bf16", "--batches", "1", "2", "--prompt-lens", "64",
                                    "--no-vllm", "--out", "run.json"])
    assert args.device == "cpu" and args.out == Path("run.json")
    assert cli.config_overrides(args) == {"hub_model": None, "vllm": False, "random_models": ("llama-3-8b",
                                          "mistral-7b"), "dtype": "bf16", "batches": (1, 2), "prompt_lens": (64,)}
    defaults = cli.config_overrides(cli.argument_parser().parse_args([]))
    assert defaults == {"hub_model": lab.DEFAULT_HUB_MODEL, "vllm": True}
    assert cli.config_overrides(cli.argument_parser().parse_args(["--random-models"]))["random_models"] == ()


@pytest.mark.parametrize("argv, message", [
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--batches", "0"], "batches must be >= 1, got 0"),
    (["--random-models", "gpt-9"], "unknown model 'gpt-9'"),
    (["--dtype", "fp8"], "invalid choice: 'fp8'"),
])
def test_the_command_line_refuses_bad_options_by_name(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cli, "run_lab", lambda *_: pytest.fail("a bad option must stop before the run"))
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--device", "cpu", *argv])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_the_command_line_writes_the_run_it_made(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    recorded = lab.latest_recorded()
    seen = {}

    def fake_run(config, device):
        seen.update(config=config, device=device)
        return recorded

    monkeypatch.setattr(cli, "run_lab", fake_run)
    out = tmp_path / "results.json"
    assert cli.main(["--device", "cpu", "--hub-model", "none", "--batches", "2", "--no-vllm", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == recorded
    config = seen["config"]
    assert seen["device"].kind == "cpu" and config.hub_model is None and config.vllm is False
    assert config.batches == (2,) and config.dtype == "fp32" and config.reduce == 8  # the CPU defaults, overridden
    printed = capsys.readouterr().out
    assert f"{len(recorded['rows'])} rows" in printed and str(out) in printed and "kv_bytes" in printed


def test_python_dash_m_runs_the_command_line():
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "servebook.lab", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m servebook.lab")
    assert lab.__doc__.split("\n\n")[0] in " ".join(done.stdout.split())
