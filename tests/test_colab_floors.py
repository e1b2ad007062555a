"""The dependency floors hold on a current Colab runtime, so a notebook's install cell upgrades nothing.

The versions are the ones Colab publishes for its runtime image (tests/data/colab-pip-freeze.txt
says where from and when).  The install cell installs ``servebook[torch]``: the core dependencies
and the ``torch`` extra must each be present on the image at a version the floor accepts.
"""

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from tools import notebooks

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FREEZE = ROOT / "tests" / "data" / "colab-pip-freeze.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = re.search(r"\[([^\]]+)\]", notebooks.install_spec("0" * 40)).group(1).split(",")


def colab_versions() -> dict[str, Version]:
    found = {}
    for line in FREEZE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            found[canonicalize_name(name)] = Version(version)
    return found


COLAB = colab_versions()
INSTALLED = [Requirement(r) for r in PROJECT["dependencies"]] + [
    Requirement(r) for extra in EXTRAS for r in PROJECT["optional-dependencies"][extra]]


def test_the_list_is_dated_and_sourced():
    head = FREEZE.read_text().split("\n\n")[0]
    assert re.search(r"Read on \d{4}-\d{2}-\d{2}", head) and "googlecolab/backend-info" in head
    assert len(COLAB) > 500  # the whole image, not a hand-picked few


@pytest.mark.parametrize("requirement", INSTALLED, ids=str)
def test_colab_already_satisfies_what_the_install_cell_installs(requirement):
    name = canonicalize_name(requirement.name)
    assert name in COLAB, f"{requirement.name} is not on the Colab image: the install cell would add it"
    assert requirement.specifier.contains(COLAB[name], prereleases=True), (
        f"{requirement}: Colab ships {COLAB[name]}, so installing servebook would change it (and restart)")


def test_the_python_floor_admits_colabs_python():
    # cp312 wheels in the published list: the runtime's Python is 3.12.
    assert Version("3.12") in SpecifierSet(PROJECT["requires-python"])


def test_ipywidgets_7_is_accepted():
    floor = next(r for r in INSTALLED if r.name == "ipywidgets")
    assert floor.specifier.contains("7.7.1") and COLAB["ipywidgets"] < Version("8")


def test_the_build_backend_understands_the_spdx_licence():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    setuptools = next(Requirement(r) for r in build if r.startswith("setuptools"))
    assert PROJECT["license"] == "MIT"
    assert setuptools.specifier.contains("77") and not setuptools.specifier.contains("76.9")
