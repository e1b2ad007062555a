"""servebook: the companion package of the book *Serving LLMs, by the numbers*.

Every number and figure in the book is computed here.  Modules, from facts up:

- ``units``, ``models``: byte units and dtypes; real model shapes.
- ``memory``: KV-cache and weight bytes, batches and capacity plans.
- ``quant``, ``paging``, ``batching``, ``roofline``: one module per idea.
- ``figures``, ``widgets``, ``build``: what readers see, and how the book is built.
"""

__version__ = "0.1.0"
