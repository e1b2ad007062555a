"""The GPU table as data: every GPU with its datasheet, dense rates with their accumulation, memory, links, rules."""

import re
from pathlib import Path

import pytest

from servebook import gpus, roofline
from servebook.units import GB, MiB

ROOT = Path(__file__).resolve().parents[1]
BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(encoding="utf-8"), re.M))
NAMES = gpus.names()


def test_the_table_holds_the_gpus_readers_rent():
    assert len(NAMES) >= 12
    assert {"a100-40gb-sxm", "a100-80gb-sxm", "a10g", "l4", "l40s", "t4", "h100-sxm", "h100-pcie", "h200", "b200",
            "mi300x", "rtx-4090"} <= set(NAMES)
    assert NAMES[:6] == ["a100-80gb-sxm", "a100-40gb-sxm", "h100-sxm", "h200", "l4", "t4"]  # the first edition's
    assert roofline.GPUS is gpus.GPUS and roofline.gpu is gpus.get
    assert len({gpus.display_name(n) for n in NAMES}) == len(NAMES)
    assert gpus.display_name("a100-80gb-sxm") == "A100 80GB SXM"


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_is_the_datasheets(name):
    g, entry = gpus.get(name), gpus.record(name)
    assert g.source in BIB_KEYS and g.url.startswith("https://") and g.rule and g.display_name
    for precision in ("fp16", "int8", "fp8", "fp4"):
        printed = entry["rates"][precision]
        quoted = getattr(g, precision)
        if printed is None:
            assert quoted is None
            with pytest.raises(ValueError, match=f"no {precision.upper()} tensor cores"):
                g.peak(precision)
            continue
        assert quoted.dense == printed["printed"] * 1e12 / (2 if printed["sparse"] else 1) == g.peak(precision)
        assert printed["accumulate"] in ("fp32", "fp16", "int32")
    assert g.memory == entry["memory"]["bytes"] and entry["memory"]["basis"] in ("nvidia-smi", "rocm-smi", "vendor")
    assert g.bandwidth == entry["bandwidth"]["bytes_per_s"]
    if g.fp16.sparse:
        assert "sparsity" in g.notes


@pytest.mark.parametrize("name", NAMES)
def test_links_are_per_direction(name):
    g = gpus.get(name)
    assert g.pcie is not None and g.pcie.per_direction >= 16 * GB
    for link in (g.nvlink, g.pcie):
        if link is not None and link.printed_is == "both directions together":
            printed = float(re.match(r"[\d.]+", link.as_printed.replace(",", "")).group())
            unit = 1000 * GB if "TB/s" in link.as_printed else GB
            assert link.per_direction * 2 == printed * unit


def test_int8_is_twice_fp16_except_on_geforce():
    for name, g in gpus.GPUS.items():
        ratio = g.int8_ops / g.fp16_flops
        if name == "rtx-4090":
            assert ratio == pytest.approx(4, rel=0.01) and "half its FP16-accumulate figure" in g.rule
            assert g.fp16.value == 165.2 and g.fp16.accumulate == "fp32" and "330.3" in g.notes
        else:
            assert ratio == pytest.approx(2, rel=0.03)  # the L40S prints 362.05 and 733


def test_the_odd_cases_state_their_rule():
    a10g = gpus.get("a10g")
    assert "A10" in a10g.rule and "AWS" in a10g.rule and a10g.memory == 23_028 * MiB
    b200 = gpus.get("b200")
    assert "180" in b200.rule and "192" in b200.rule and b200.memory == 183_359 * MiB
    assert 179 < b200.memory / 2**30 < 180 and 192 < b200.memory / GB < 193  # both figures, one memory
    assert gpus.get("mi300x").memory_basis == "rocm-smi" and gpus.get("mi300x").memory == 192 * 2**30
    assert gpus.get("a100-80gb-sxm").fp8 is None and gpus.get("h100-sxm").fp4 is None
    assert gpus.get("b200").peak("fp4") == 2 * gpus.get("b200").peak("fp8") == 9e15


def test_the_first_editions_gpus_keep_their_numbers():
    a100 = gpus.get("a100-80gb-sxm")
    assert (a100.memory, a100.bandwidth, a100.fp16_flops, a100.int8_ops, a100.fp32_flops) == (
        81_920 * MiB, 2_039 * GB, 312e12, 624e12, 19.5e12)
    h100 = gpus.get("h100-sxm")
    assert (h100.fp16.value, h100.fp16.sparse, h100.memory) == (1979, True, 81_559 * MiB)
