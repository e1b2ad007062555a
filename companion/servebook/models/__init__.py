"""Model shapes: what each layer stores and computes, and the real models the book uses.

- :mod:`.spec`: :class:`ModelSpec` and its parts (:class:`MLA`, :class:`MoE`,
  :class:`Norms`, :class:`Biases`; layer kinds global, sliding, chunked);
- :mod:`.hf` and :mod:`.families`: :func:`from_hf_config`, one reader per ``model_type``;
- :mod:`.params`: parameter counts, total and active per token;
- :mod:`.registry`: the registry, one transcribed ``config.json`` per model.
"""

from .hf import from_hf_config
from .params import active_params, count_params
from .registry import REGISTRY, display_name, get, names, record, resolve
from .spec import CHUNKED, GLOBAL, LAYER_KINDS, MLA, SLIDING, Biases, ModelSpec, MoE, Norms

__all__ = ["ModelSpec", "MLA", "MoE", "Norms", "Biases", "GLOBAL", "SLIDING", "CHUNKED", "LAYER_KINDS",
           "from_hf_config", "count_params", "active_params", "REGISTRY", "get", "resolve", "names",
           "display_name", "record"]
