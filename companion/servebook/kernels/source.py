"""The kernel's source text, for a page to show, read from the package without importing Triton."""

from __future__ import annotations

import ast
import importlib.resources

from ..checks import choice

__all__ = ["kernel_source"]

_MODULE = "triton_w4a16.py"


def kernel_source(name: str = "w4a16_kernel") -> str:
    """The text of function ``name`` in the Triton module, decorator included, as the file has it."""
    text = (importlib.resources.files("servebook.kernels") / _MODULE).read_text(encoding="utf-8")
    functions = {node.name: node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}
    node = functions[choice("name", name, tuple(functions))]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return "\n".join(text.splitlines()[first - 1:node.end_lineno]) + "\n"
