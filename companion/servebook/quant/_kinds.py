"""What kind of numbers a value holds: the question every function of the quantizer dispatches on.

torch is optional.  A value is a tensor only if torch is already imported (whoever made the
tensor imported it), so the quantizer never imports torch itself.
"""

from __future__ import annotations

import sys

import numpy as np


def torch_module():
    """The torch module if something imported it, else None."""
    return sys.modules.get("torch")


def is_tensor(x) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def as_float_array(x, name):
    """``x`` as a floating numpy array, or a torch tensor as it is (integers become floats)."""
    if is_tensor(x):
        if not (x.is_floating_point()):
            if x.dtype == torch_module().bool or x.is_complex():
                raise TypeError(f"{name} must hold real numbers, got a {x.dtype} tensor")
            x = x.to(torch_module().get_default_dtype())
        return x
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number or an array, got a bool")
    array = np.asarray(x)
    if array.dtype.kind in "iu":
        array = array.astype(np.float64)
    elif array.dtype.kind != "f":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return array


def is_16_bit(dtype) -> bool:
    """float16 or bfloat16 (numpy or torch): a dtype the quantizer computes in float32, as torch does."""
    torch = torch_module()
    if torch is not None and isinstance(dtype, torch.dtype):
        return dtype in (torch.float16, torch.bfloat16)
    return np.dtype(dtype) == np.float16


def exact_integers(dtype) -> int:
    """The largest n such that every integer of [-n, n] is exact in the float ``dtype`` (2**24 in float32)."""
    return 2 ** (np.finfo(dtype).nmant + 1)


def size(x) -> int:
    return x.numel() if is_tensor(x) else np.size(x)


def shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))


def is_integer_array(x) -> bool:
    if is_tensor(x):
        return not (x.is_floating_point() or x.is_complex() or x.dtype == torch_module().bool)
    return np.asarray(x).dtype.kind in "iu"


def all_finite(x) -> bool:
    if is_tensor(x):
        return bool(torch_module().isfinite(x).all())
    return bool(np.isfinite(x).all())
