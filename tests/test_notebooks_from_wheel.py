"""Each chapter's notebook runs top to bottom from an empty folder, installing only the wheel of this checkout.

This is Colab, reproduced on this machine: a fresh virtual environment stands for the runtime, its
preinstalled packages (torch, numpy, matplotlib, ipywidgets, ipykernel, ...) are the ones of the
environment running the tests, servebook left out, and the kernel starts in an empty folder, so no
file of the repository can be read.  The notebook is the one the build publishes, run as it is; its
install cell installs the wheel because ``SERVEBOOK_INSTALL`` names it, with pip barred from any
package index, so the run also shows that the install needs nothing the runtime lacks.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nbformat
import pytest
from tools import notebooks, pages

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [p for p in pages.book_outline(ROOT) if p.path.startswith("chapters/")]
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "companion")

pytestmark = pytest.mark.slow


def build_wheel(out: Path) -> Path:
    """The wheel of the checkout as it is (uncommitted changes included), built outside the tree."""
    source = out / "source"
    source.mkdir(parents=True)
    for name in PACKAGE_FILES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(source)], check=True)
    return next(out.glob("servebook-*.whl"))


def runtime(folder: Path) -> Path:
    """A fresh environment whose preinstalled packages are this one's, but servebook; its python.

    Without a pip of its own: pip and setuptools are the image's too, as on Colab.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    image = folder / "image"
    image.mkdir()
    for installed in {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}:
        for entry in installed.iterdir():
            if not entry.name.lower().startswith(("servebook", "__editable__", "_servebook")) \
                    and entry.suffix != ".pth" and not (image / entry.name).exists():
                (image / entry.name).symlink_to(entry)
    python = folder / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "runtime-image.pth").write_text(f"{image}\n")
    return python


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A kernel manager factory for the fresh runtime, and its python."""
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    folder = tmp_path_factory.mktemp("colab")
    wheel = build_wheel(folder / "dist")
    python = runtime(folder)
    kernels = folder / "kernels"
    (kernels / "colab").mkdir(parents=True)
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Colab, reproduced", "language": "python",
            "env": {notebooks.INSTALL_VARIABLE: f"servebook[torch] @ {wheel.as_uri()}", "PIP_NO_INDEX": "1",
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""}}
    (kernels / "colab" / "kernel.json").write_text(json.dumps(spec))

    def kernel():
        return KernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))

    return kernel, python


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.xdist_group(p.path.removesuffix(".qmd")), id=p.path)
                                  for p in CHAPTERS])
def test_the_chapters_notebook_runs_with_only_the_wheel(page, colab, tmp_path, executed):
    import nbclient

    kernel, python = colab
    empty = tmp_path / "content"  # Colab's /content: nothing of the repository in it
    empty.mkdir()
    result = executed(ROOT / page.path)  # the notebook holds the values the page printed
    path = notebooks.write_notebooks(ROOT, [result], tmp_path / "notebooks", commit="0" * 40)[0]
    notebook = nbformat.read(path, as_version=4)
    assert os.environ.get(notebooks.INSTALL_VARIABLE) is None  # the published default, replaced in the kernel
    nbclient.NotebookClient(notebook, km=kernel(), timeout=600, resources={"metadata": {"path": str(empty)}}
                            ).execute()
    errors = [o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    where = subprocess.run([str(python), "-c", "import servebook; print(servebook.__file__)"], cwd=empty,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(python.parent.parent)), f"servebook came from {where}, not the wheel"
    assert not any((empty / name).exists() for name in ("chapters", "tools", "companion", "figures"))
