# The book's two commands; each does all of its own set-up on a fresh clone:
#
#   make book   figures, the API reference, every page executed, the Colab notebooks, the site
#               (quarto render where Quarto is installed, an HTML preview elsewhere)
#   make test   the library, the book's structure, every page executed, the notebooks run from
#               a wheel of this checkout in a fresh environment
#
# Both run in .venv, the project's own environment, made and filled on first use and again when
# pyproject.toml changes.  torch is installed first, pinned, and only where the environment has
# none: the project's torch range admits that build, so an installed CPU torch stays as it is.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
READY := $(VENV)/.servebook-ready
PIP := $(PY) -m pip install --quiet --disable-pip-version-check

# The kernel the pages run in is the one installed in .venv, whatever a user-wide one says.
export JUPYTER_PREFER_ENV_PATH := 1
# numpy's AVX-512 loops (log10, power: what log-scale axes and np.logspace call) round some results
# differently in the last bit from the loops every x86-64 machine runs, which moves a few antialiased
# pixels of the committed PNGs; without them the build writes the same figures on every machine.
# (numpy >= 2.4 names the group X86_V4; older releases name each AVX-512 feature; unknown names are ignored.)
export NPY_DISABLE_CPU_FEATURES := X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL

.PHONY: book test

book: $(READY)
	$(PY) -m tools.build

test: $(READY)
	$(PY) -m pytest -n 2

$(READY): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) $(TORCH)
	$(PIP) -e ".[torch,book,kernels,dev]"
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 --display-name "Python 3" >/dev/null
	touch $@
