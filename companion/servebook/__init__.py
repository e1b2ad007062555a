"""servebook: the companion package of the book *Serving LLMs, by the numbers*.

Every number and figure in the book is computed here.  Modules, from facts up
(a module imports only modules on its own line or below):

- ``units``, ``models``, ``checks``: byte units and dtypes; real model shapes; argument checks.
- ``memory``, ``quant``, ``paging``, ``roofline``: one module per idea (KV and weight bytes,
  the quantizer, the paged allocator, FLOPs and bytes of a step).
- ``batching`` (a scheduler simulator on ``paging``), ``gptq``, ``awq``, ``qmodel``
  (quantized torch models), ``smallmodel`` (the book's trained model), ``advisor`` (which lever),
  ``lab`` (measuring a real model against the formulas).
- ``figures``, ``widgets``, ``build``, ``preview``: what readers see, and how the book is built.
"""

__version__ = "0.1.0"
