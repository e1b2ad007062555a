"""FP8: eight-bit floats, scaled into range and saturated, as vLLM's scaled FP8 quantization does::

    s = max(amax / fp8_max, min_scale)            # per tensor, per channel or per token
    q = fp8(clamp(x * (1 / s), -fp8_max, fp8_max))
    x_hat = s * float(q)

Two formats, both torch dtypes (``torch.float8_e4m3fn``, ``torch.float8_e5m2``) and, for numpy
arrays, ``ml_dtypes``' (an optional package): the cast itself is theirs, round to nearest even,
never hand-written bit manipulation.

- **E4M3** (4 exponent bits, 3 mantissa bits, "fn": finite, no infinity): largest 448, smallest
  normal 2^-6, subnormals down to 2^-9.  What weights, activations and KV caches use.
- **E5M2** (5 exponent bits, 2 mantissa bits, IEEE-style inf and NaN): largest 57344, a wider
  range with half the precision.  What gradients use; vLLM accepts it for the KV cache.

Both have a relative step: between 2^e and 2^(e+1) there are 8 (E4M3) or 4 (E5M2) values, so
the rounding error is about 2^-4 (E4M3) or 2^-3 (E5M2) of the value, not of the range as on an
integer grid.

Saturation is done here, before the cast, for both formats, because the raw casts disagree.
``float8_e5m2`` has an infinity, and every library casts a value from 61440 up (where rounding
reaches 2^16) to ``inf``.  ``float8_e4m3fn`` has none: torch 2.13 saturates finite overflow and
``inf`` to 448 (``c10/util/Float8_e4m3fn.h``), while ``ml_dtypes`` turns anything above 464 into
NaN (464 itself, halfway to NaN's code, rounds to the even 448).  Clamped first, an outlier
becomes the largest finite code in every library.

Computed in float32 whatever the input's dtype, like the integer quantizer.
"""

from __future__ import annotations

import enum

import numpy as np

from ..checks import member, positive
from ._kinds import as_float_array, is_tensor, torch_module

__all__ = ["FP8Format", "fp8_max", "fp8_values", "choose_fp8_scale", "quantize_fp8", "dequantize_fp8",
           "fake_quantize_fp8"]


class FP8Format(enum.Enum):
    """The two FP8 formats (OCP FP8) of NVIDIA's Ada, Hopper and Blackwell tensor cores."""

    #: 4 exponent bits, 3 mantissa bits, finite only: max 448
    E4M3 = "e4m3"
    #: 5 exponent bits, 2 mantissa bits, with inf and NaN: max 57344
    E5M2 = "e5m2"


_TORCH_NAMES = {FP8Format.E4M3: "float8_e4m3fn", FP8Format.E5M2: "float8_e5m2"}
_MAXIMA = {FP8Format.E4M3: 448.0, FP8Format.E5M2: 57344.0}


def fp8_max(fmt: FP8Format | str = FP8Format.E4M3) -> float:
    """The largest finite value: 448 (E4M3) or 57344 (E5M2)."""
    return _MAXIMA[member("fmt", fmt, FP8Format)]


def _numpy_dtype(fmt: FP8Format):
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("FP8 on numpy arrays needs the ml_dtypes package (pip install ml_dtypes); "
                        "or pass a torch tensor") from None
    return getattr(ml_dtypes, _TORCH_NAMES[fmt])


def _torch_dtype(fmt: FP8Format):
    return getattr(torch_module(), _TORCH_NAMES[fmt])


def fp8_values(fmt: FP8Format | str = FP8Format.E4M3) -> np.ndarray:
    """Every finite non-negative value of the format, ascending (float64): the FP8 grid."""
    fmt = member("fmt", fmt, FP8Format)
    torch = torch_module()
    if torch is None:
        import torch
    every = torch.arange(256, dtype=torch.int16).to(torch.uint8).view(_torch_dtype(fmt)).double().numpy()
    return np.unique(every[np.isfinite(every) & (every >= 0)])


def min_scale(fmt: FP8Format) -> float:
    """The floor on a dynamic scale, ``1 / (fp8_max * 512)``, vLLM's: an all-zero slice keeps a usable scale."""
    return 1.0 / (fp8_max(fmt) * 512.0)


def _kept_dims(axis, ndim) -> tuple[int, ...]:
    """The dimensions that keep their own scale (``axis``: None, an int or a tuple of ints)."""
    if axis is None:
        return ()
    axes = (axis,) if not isinstance(axis, tuple) else axis
    kept = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim:
            raise ValueError(f"axis must be None, or ints in {-ndim}..{ndim - 1} for a {ndim}-d tensor, "
                             f"got {axis!r}")
        kept.append(int(a) % ndim)
    if len(set(kept)) != len(kept):
        raise ValueError(f"axis names a dimension twice: {axis!r}")
    return tuple(sorted(kept))


def choose_fp8_scale(x, fmt: FP8Format | str = FP8Format.E4M3, *, axis=None, floor: float | None = None):
    """``s = max(amax / fp8_max, floor)``, float32, with ``x``'s rank (reduced dimensions of size 1).

    ``axis=None``: one scale per tensor; an int or a tuple: one per index along those dimensions
    (``axis=0`` of a weight, out x in: per output channel; ``axis=0`` of activations, tokens x
    hidden: per token; ``axis=(0, 1)`` of keys, tokens x heads x head_dim: per token and head).
    ``floor`` defaults to vLLM's ``1 / (fp8_max * 512)``.
    """
    fmt = member("fmt", fmt, FP8Format)
    floor = min_scale(fmt) if floor is None else positive("floor", floor)
    x = as_float_array(x, "x")
    if x.ndim == 0 or (x.numel() if is_tensor(x) else x.size) == 0:
        raise ValueError("x must be a non-empty tensor with at least one dimension")
    kept = _kept_dims(axis, x.ndim)
    reduced = tuple(d for d in range(x.ndim) if d not in kept)
    if is_tensor(x):
        amax = x.abs().float().amax(dim=reduced, keepdim=True) if reduced else x.abs().float()
        if not bool(amax.isfinite().all()):
            raise ValueError("x must be finite: it holds NaN or inf")
        return (amax / fp8_max(fmt)).clamp(min=floor)
    amax = np.abs(x).astype(np.float32).max(axis=reduced, keepdims=True) if reduced else np.abs(x).astype(np.float32)
    if not np.isfinite(amax).all():
        raise ValueError("x must be finite: it holds NaN or inf")
    return np.maximum(amax / np.float32(fp8_max(fmt)), np.float32(floor))


def _checked_scale(x, scale):
    """``scale`` as float32 in ``x``'s kind, positive, finite, broadcasting against ``x``."""
    if is_tensor(x):
        torch = torch_module()
        scale = torch.as_tensor(scale, device=x.device)
        if not scale.is_floating_point():
            raise TypeError(f"scale must hold real numbers, got {scale.dtype}")
        scale = scale.float()
        ok = bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
    else:
        scale = np.asarray(scale)
        if scale.dtype.kind not in "fiu":
            raise TypeError(f"scale must hold real numbers, got dtype {scale.dtype}")
        scale = scale.astype(np.float32)
        ok = bool(np.isfinite(scale).all()) and bool((scale > 0).all())
    if not ok:
        raise ValueError("scale must be positive and finite")
    if scale.ndim > x.ndim or any(s not in (1, n) for s, n in zip(scale.shape[::-1], x.shape[::-1],
                                                                    strict=False)):
        raise ValueError(f"scale of shape {tuple(scale.shape)} does not broadcast against x of shape "
                         f"{tuple(x.shape)}")
    return scale


def quantize_fp8(x, scale, fmt: FP8Format | str = FP8Format.E4M3):
    """FP8 codes ``fp8(clamp(x * (1 / s), -max, max))``: a ``torch.float8_*`` tensor, or an
    ``ml_dtypes`` array for numpy input.  Out-of-range values saturate at the largest finite value."""
    fmt = member("fmt", fmt, FP8Format)
    x = as_float_array(x, "x")
    scale = _checked_scale(x, scale)
    top = fp8_max(fmt)
    if is_tensor(x):
        if not bool(torch_module().isfinite(x).all()):
            raise ValueError("x must be finite: it holds NaN or inf")
        return (x.float() * (1.0 / scale)).clamp_(-top, top).to(_torch_dtype(fmt))
    if not np.isfinite(x).all():
        raise ValueError("x must be finite: it holds NaN or inf")
    wide = np.clip(x.astype(np.float32) * (np.float32(1) / scale), -top, top)
    return wide.astype(_numpy_dtype(fmt))


def dequantize_fp8(codes, scale, *, dtype=None):
    """``s * float(q)``, computed in float32 and returned in ``dtype`` (default float32)."""
    if is_tensor(codes):
        torch = torch_module()
        if codes.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise TypeError(f"codes must be a float8_e4m3fn or float8_e5m2 tensor, got {codes.dtype}")
        wide = codes.float()
        out = wide * _checked_scale(wide, scale)
        return out if dtype is None else out.to(dtype)
    codes = np.asarray(codes)
    if codes.dtype.name not in ("float8_e4m3fn", "float8_e5m2"):
        raise TypeError(f"codes must be an ml_dtypes float8_e4m3fn or float8_e5m2 array, got {codes.dtype}")
    wide = codes.astype(np.float32)
    out = wide * _checked_scale(wide, scale)
    return out if dtype is None else out.astype(dtype)


def fake_quantize_fp8(x, scale, fmt: FP8Format | str = FP8Format.E4M3):
    """``dequantize_fp8(quantize_fp8(x))`` in ``x``'s float dtype."""
    x = as_float_array(x, "x")
    return dequantize_fp8(quantize_fp8(x, scale, fmt), scale, dtype=x.dtype)
