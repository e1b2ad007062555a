"""servebook: the companion package of the book *Serving LLMs, by the numbers*.

Every number and figure in the book is computed here.  Modules, from facts up
(a module imports only modules on its own line or below):

- ``units``, ``models``, ``gpus``, ``checks``: byte units and dtypes; real model shapes; GPU
  datasheets; argument checks.
- ``memory``, ``quant``, ``paging``, ``roofline``: one module per idea (KV and weight bytes,
  the quantizer, the paged allocator, FLOPs and bytes of a step).
- ``batching`` (a scheduler simulator on ``paging``), ``gptq``, ``awq``, ``qmodel``
  (quantized torch models), ``smallmodel`` (the book's trained model), ``advisor`` (which lever),
  ``lab`` (measuring a real model against the formulas).
- ``cli``: the ``servebook`` command line, on the modules above.
- ``book``: what only the book needs (scenarios, formatting, figures, widgets).

The version is the installed distribution's, so ``pyproject.toml`` holds it once.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("servebook")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
