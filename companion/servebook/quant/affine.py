"""The affine quantizer's three steps, as separate pure functions (torchao's names)::

    scale, zero_point = choose_qparams_affine(r_min, r_max, bits)      # the grid
    q = quantize_affine(r, scale, zero_point, qmin, qmax)              # snap to it
    r_hat = dequantize_affine(q, scale, zero_point)                    # read it back

with ``s = (r_max - r_min) / (qmax - qmin)``, ``z = clip(qmin + round(-r_min / s), qmin, qmax)``,
``q = clip(round(r / s) + z, qmin, qmax)`` and ``r_hat = s * (q - z)``; ``fake_quantize_affine``
is ``dequantize_affine(quantize_affine(r))`` in one pass.

Each checks its arguments, then takes the path the numbers' kind names: exact scalars go to
:mod:`~servebook.quant.exact`; floats, numpy arrays and torch tensors are computed here as
``round(r * (1 / s))``, PyTorch's arithmetic, by the kernels of :mod:`~servebook.quant._fast`.

16-bit inputs (float16, bfloat16) are computed in float32, as PyTorch's fake-quantize kernels
compute them: the range is exact in float32, the scale is a float32 number (a float16 scale
would round ``1 / s`` and miss the nearest code; it could not hold a step below 2^-24 or above
65504), and only a fake-quantized result is rounded back to the input's dtype.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from numbers import Integral

import numpy as np

from ..checks import flag, member, number, positive, whole
from . import _fast, exact
from ._kinds import as_float_array, exact_integers, is_16_bit, is_integer_array, is_tensor, shape, torch_module
from .grid import (
    CODE_LIMITS,
    DEFAULT_EPS,
    Mapping,
    Rounding,
    check_range,
    check_zero_point_range,
    qrange,
    rounding_function,
)

__all__ = ["choose_qparams_affine", "quantize_affine", "dequantize_affine", "fake_quantize_affine"]


def _real(value, name) -> float:
    """A scalar in any spelling (``"0.1"``, ``Decimal``, ``Fraction``, float) as a finite float."""
    return number(name, exact.to_fraction(value, name) if isinstance(value, (str, Decimal)) else value)


# --------------------------------------------------------------------------- choosing the grid


def choose_qparams_affine(min_val, max_val, bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC, *,
                          eps=DEFAULT_EPS, rounding: Rounding | str = Rounding.HALF_UP,
                          include_zero: bool = False, exact_constant: bool = True):
    """Scale and zero point for the real range ``[min_val, max_val]`` (elementwise over arrays of ranges).

    - ``ASYMMETRIC``: ``s = (r_max - r_min) / (qmax - qmin)``, ``z = clip(qmin + round(-r_min / s), qmin, qmax)``.
    - ``SYMMETRIC``: ``s = max(|r_min|, |r_max|) / qmax``, ``z = 0``.

    ``eps`` floors the scale, ``s = max(s, eps)``, so a flat range never divides by zero.
    ``exact_constant`` (default on) stores a flat range ``r_min == r_max == c`` exactly instead:
    ``s = |c|`` and ``z`` chosen so that ``c`` is one code away from ``z`` (``s = 1, z = 0`` for
    ``c = 0``); switch it off to see the bare epsilon floor of the book's hand calculation.
    ``include_zero`` widens the range to contain 0 first, as PyTorch's observers and ONNX Runtime
    do; it makes real 0 a code exactly and keeps ``z`` inside ``[qmin, qmax]``.  Without it, a
    range that does not contain 0 clips ``z`` and every value beyond the clipped grid saturates.

    Scalars in the exact path (Fraction, Decimal, int, decimal str) give ``(Fraction, int)``;
    Python floats give ``(float, int)``; numpy arrays and scalars give arrays (scalars) of their
    float dtype and ``int32``; torch tensors give tensors of the same dtype and ``torch.int32``.
    """
    mapping = member("mapping", mapping, Mapping)
    rounding = member("rounding", rounding, Rounding)
    qmin, qmax = qrange(bits, mapping)
    include_zero, exact_constant = flag("include_zero", include_zero), flag("exact_constant", exact_constant)
    if exact.is_exact(min_val) and exact.is_exact(max_val):
        return exact.choose(exact.to_fraction(min_val, "min_val"), exact.to_fraction(max_val, "max_val"),
                            qmin, qmax, mapping, exact.to_fraction(eps, "eps"), rounding, include_zero,
                            exact_constant)
    eps = positive("eps", _real(eps, "eps"))
    if is_tensor(min_val) or is_tensor(max_val):
        return _choose_torch(min_val, max_val, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant)
    python_scalars = type(min_val) in (float, int) and type(max_val) in (float, int)
    lo = as_float_array(min_val, "min_val")
    hi = as_float_array(max_val, "max_val")
    dtype = np.result_type(lo.dtype, hi.dtype)
    if is_16_bit(dtype):
        dtype = np.dtype(np.float32)
    scale, zero_point = _choose_arrays(np, lo.astype(dtype), hi.astype(dtype), qmin, qmax, mapping, eps,
                                       rounding, include_zero, exact_constant)
    if python_scalars:
        return float(scale), int(zero_point)
    # numpy in, numpy out: 0-d ranges give numpy scalars that keep the dtype (np.float32 stays float32)
    return np.asarray(scale, dtype=dtype)[()], np.asarray(zero_point).astype(np.int32)[()]


def _choose_arrays(xp, lo, hi, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant):
    """Shared by numpy (``xp = np``) and torch; ``lo``/``hi`` are float arrays of one dtype."""
    finite = bool(xp.isfinite(lo).all()) and bool(xp.isfinite(hi).all())
    check_range(finite, finite and bool((lo <= hi).all()))
    rnd = rounding_function(rounding)
    if include_zero:
        lo, hi = lo.clip(max=0), hi.clip(min=0)
    with np.errstate(over="ignore", invalid="ignore"):   # an overflowing range is refused just below
        if mapping is Mapping.SYMMETRIC:
            scale = (xp.maximum(-lo, hi) / qmax).clip(min=eps)
            zero_point = xp.zeros_like(scale)
        else:
            scale = ((hi - lo) / (qmax - qmin)).clip(min=eps)
            zero_point = (qmin + rnd(-lo / scale)).clip(qmin, qmax)
    if not bool(xp.isfinite(scale).all()):
        raise ValueError(f"min_val and max_val span more than {lo.dtype} holds: the scale "
                         f"(max_val - min_val) / {qmax - qmin} overflows to inf")
    if exact_constant:
        # a flat range at a subnormal value keeps the eps floor: 1/|c| would overflow the dtype
        tiny = (np.finfo if xp is np else xp.finfo)(lo.dtype).tiny
        flat = (lo == hi) & ((lo == 0) | (xp.abs(lo) >= tiny))
        if bool(flat.any()):
            one = xp.ones_like(scale)
            scale = xp.where(flat, xp.where(lo == 0, one, xp.abs(lo)), scale)
            if mapping is Mapping.ASYMMETRIC:
                zero_point = xp.where(flat & (lo < 0), one * (qmin + 1), xp.where(flat, one * qmin, zero_point))
    return scale, zero_point


def _choose_torch(min_val, max_val, qmin, qmax, mapping, eps, rounding, include_zero, exact_constant):
    torch = torch_module()
    ref = min_val if is_tensor(min_val) else max_val
    lo = torch.as_tensor(min_val, device=ref.device)
    hi = torch.as_tensor(max_val, device=ref.device)
    dtype = torch.promote_types(lo.dtype, hi.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if is_16_bit(dtype):
        dtype = torch.float32
    scale, zero_point = _choose_arrays(torch, lo.to(dtype), hi.to(dtype), qmin, qmax, mapping, eps, rounding,
                                       include_zero, exact_constant)
    return scale, zero_point.to(torch.int32)


# --------------------------------------------------------------------------- applying it


def _check_qrange(qmin, qmax):
    qmin, qmax = whole("qmin", qmin, *CODE_LIMITS), whole("qmax", qmax, *CODE_LIMITS)
    if not qmin < qmax:
        raise ValueError(f"qmin must be smaller than qmax, got qmin={qmin}, qmax={qmax}")
    return qmin, qmax


def _broadcastable(param, x_shape, name):
    """``param`` with ``len(x_shape)`` dims (ones prepended), checked to broadcast to ``x_shape`` without growing it."""
    param_shape = shape(param)
    if len(param_shape) > len(x_shape):
        raise ValueError(f"{name} of shape {param_shape} has more dimensions than x of shape {x_shape}")
    padded = (1,) * (len(x_shape) - len(param_shape)) + param_shape
    if any(p not in (1, s) for p, s in zip(padded, x_shape, strict=True)):
        raise ValueError(f"{name} of shape {param_shape} does not broadcast against x of shape {x_shape}")
    return param.reshape(padded)


def _float_params(x, scale, zero_point):
    """``scale``, ``1 / scale`` and ``zero_point`` in ``x``'s kind, dtype and rank, checked."""
    if is_tensor(x):
        torch = torch_module()
        scale = torch.as_tensor(float(scale) if isinstance(scale, (Fraction, Decimal, str)) else scale,
                                device=x.device).to(x.dtype)
        zero_point = torch.as_tensor(zero_point, device=x.device)
        if zero_point.is_floating_point() and not bool((zero_point == torch.round(zero_point)).all()):
            raise ValueError("zero_point must hold integers")
        if zero_point.dtype == torch.bool or zero_point.is_complex():
            raise TypeError(f"zero_point must hold integers, got {zero_point.dtype}")
        zero_point = zero_point.to(x.dtype)
        if not (bool(torch.isfinite(scale).all()) and bool((scale > 0).all())):
            raise ValueError("scale must be positive and finite (a zero scale divides by zero: floor it with eps)")
        inv_scale = 1.0 / scale
        if not bool(torch.isfinite(inv_scale).all()):
            raise ValueError(f"scale is too small: 1 / scale overflows {x.dtype}")
    else:
        scale = np.asarray(_real(scale, "scale") if isinstance(scale, (Fraction, Decimal, str)) else scale)
        if scale.dtype.kind not in "fiu":
            raise TypeError(f"scale must hold real numbers, got dtype {scale.dtype}")
        zero_point = np.asarray(zero_point)
        if zero_point.dtype.kind not in "fiu":
            raise TypeError(f"zero_point must hold integers, got dtype {zero_point.dtype}")
        if zero_point.dtype.kind == "f" and not bool((zero_point == np.rint(zero_point)).all()):
            raise ValueError("zero_point must hold integers")
        scale = scale.astype(x.dtype, copy=False)
        zero_point = zero_point.astype(x.dtype)
        if not (bool(np.isfinite(scale).all()) and bool((scale > 0).all())):
            raise ValueError("scale must be positive and finite (a zero scale divides by zero: floor it with eps)")
        with np.errstate(over="ignore"):
            inv_scale = np.divide(1, scale, dtype=x.dtype)
        if not bool(np.isfinite(inv_scale).all()):
            raise ValueError(f"scale is too small: 1 / scale overflows {x.dtype}")
    x_shape = tuple(x.shape)
    return (_broadcastable(scale, x_shape, "scale"), _broadcastable(inv_scale, x_shape, "scale"),
            _broadcastable(zero_point, x_shape, "zero_point"))


def _check_zero_point_exact(zero_point, dtype, qmin: int, qmax: int) -> None:
    """The codes are computed in ``x``'s float ``dtype``: a code range wider than the integers it holds
    exactly (2**24 in float32, 2**53 in float64) needs a zero point it holds, or the codes shift silently."""
    exact = exact_integers(dtype)
    if max(-qmin, qmax) <= exact:
        return  # every zero point in [qmin, qmax] is exact (the range check follows)
    given = np.asarray(zero_point.cpu() if is_tensor(zero_point) else zero_point).ravel()
    if given.dtype.kind not in "iuf":
        return  # not numbers: refused by the checks of the parameters
    held = given.astype(dtype)
    if any(int(a) != int(b) for a, b in zip(held.tolist(), given.tolist(), strict=True)):
        raise ValueError(f"zero_point: codes from {qmin} to {qmax} are computed in {np.dtype(dtype).name}, "
                         f"which holds integers exactly only up to {exact:,}, and a zero "
                         "point is not one of them; use a zero point it holds, or x in float64")


def _affine(x, scale, zero_point, qmin, qmax, rounding, fake):
    """The float and torch paths of quantize (``fake=False``: codes) and fake-quantize (``fake=True``)."""
    python_scalar = np.ndim(x) == 0 and not isinstance(x, np.ndarray) and not is_tensor(x)
    x = as_float_array(x, "x")
    if is_16_bit(x.dtype):   # float32 arithmetic, as torch's kernels; only the snapped values come back 16-bit
        wide = x.float() if is_tensor(x) else x.astype(np.float32)
        out = _affine(wide, scale, zero_point, qmin, qmax, rounding, fake)
        if not fake:
            return out
        return out.to(x.dtype) if is_tensor(x) else out.astype(x.dtype)
    wide = x.dtype == (torch_module().float64 if is_tensor(x) else np.float64)
    _check_zero_point_exact(zero_point, np.float64 if wide else np.float32, qmin, qmax)
    if is_tensor(x):
        views = _fast.numpy_views(x, scale, zero_point)
        if views is None:   # not on the CPU, or a dtype numpy lacks: torch's own operations
            scale, inv_scale, zero_point = _float_params(x, scale, zero_point)
            if zero_point.numel():
                check_zero_point_range(float(zero_point.min()), float(zero_point.max()), qmin, qmax)
            return _fast.affine_torch(x, scale, inv_scale, zero_point, qmin, qmax, rounding, fake)
        return _fast.to_tensor(_affine(*views, qmin, qmax, rounding, fake), like=x)
    scale, inv_scale, zero_point = _float_params(x, scale, zero_point)
    if zero_point.size:
        check_zero_point_range(zero_point.min(), zero_point.max(), qmin, qmax)
    out = np.empty(x.shape, dtype=x.dtype if fake else _fast.code_dtype(qmin, qmax))
    _fast.affine_numpy(x, scale, inv_scale, zero_point, qmin, qmax, rounding, out)
    if python_scalar:
        return float(out) if fake else int(out)
    return out


def quantize_affine(x, scale, zero_point, qmin: int, qmax: int, rounding: Rounding | str = Rounding.HALF_UP):
    """Integer codes ``q = clip(round(x / s) + z, qmin, qmax)``; ``scale``/``zero_point`` broadcast against ``x``.

    Saturates, never wraps.  ``zero_point`` is a code and must lie in ``[qmin, qmax]`` (ValueError
    otherwise, as in PyTorch's fake-quantize).  Exact scalars and floats give an ``int``; numpy arrays and torch
    tensors give the smallest integer dtype that holds ``[qmin, qmax]``.  The float paths compute
    ``round(x * (1 / s))``, PyTorch's arithmetic (see :mod:`servebook.quant` for what that does at ties).
    """
    qmin, qmax = _check_qrange(qmin, qmax)
    rounding = member("rounding", rounding, Rounding)
    if exact.is_exact(x) and exact.is_exact(scale):
        return exact.quantize(x, scale, zero_point, qmin, qmax, rounding)
    return _affine(x, scale, zero_point, qmin, qmax, rounding, fake=False)


def fake_quantize_affine(x, scale, zero_point, qmin: int, qmax: int, rounding: Rounding | str = Rounding.HALF_UP):
    """``dequantize(quantize(x))`` in one pass, in ``x``'s float dtype: ``s * (clip(round(x/s) + z) - z)``.

    Bit for bit what ``torch.fake_quantize_per_tensor_affine`` / ``..._per_channel_affine`` return
    for float32 input with ``Rounding.HALF_EVEN`` and the same scale and zero point.
    """
    qmin, qmax = _check_qrange(qmin, qmax)
    rounding = member("rounding", rounding, Rounding)
    if exact.is_exact(x) and exact.is_exact(scale):
        return exact.dequantize(exact.quantize(x, scale, zero_point, qmin, qmax, rounding), scale, zero_point)
    return _affine(x, scale, zero_point, qmin, qmax, rounding, fake=True)


def dequantize_affine(codes, scale, zero_point, *, dtype=None):
    """Real values ``r_hat = s * (q - z)``, broadcasting ``scale``/``zero_point`` against ``codes``.

    Exact scalars give a ``Fraction``.  Arrays give ``dtype`` if named, else the dtype of a floating
    ``scale`` array (float64 for a Python float); tensors likewise (torch's default dtype otherwise).
    """
    if isinstance(codes, Integral) and exact.is_exact(codes) and exact.is_exact(scale):
        return exact.dequantize(codes, scale, zero_point)
    return dequantized(codes, scale, zero_point, dtype)[0]


def dequantized(codes, scale, zero_point, dtype=None):
    """:func:`dequantize_affine` of integer arrays or tensors, and the lowest and highest code.

    The range is found in the same pass, so that a caller checking the codes reads them once; it is
    ``None`` where no such pass ran (empty codes, or a tensor on a device torch computes on)."""
    if is_tensor(codes):
        return _dequantize_tensor(codes, scale, zero_point, dtype)
    python_scalar = np.ndim(codes) == 0 and not isinstance(codes, np.ndarray)
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
    if dtype is None:
        scale_dtype = np.asarray(scale).dtype if not isinstance(scale, (Fraction, Decimal, str)) else None
        dtype = scale_dtype if scale_dtype is not None and scale_dtype.kind == "f" else np.float64
    if is_16_bit(dtype):     # s * (q - z) in float32, rounded once to the 16-bit dtype
        wide, found = dequantized(codes, scale, zero_point, np.float32)
        return (float(wide) if python_scalar else wide.astype(dtype)), found
    out = np.empty(codes.shape, dtype=dtype)
    scale, _, zero_point = _float_params(out, scale, zero_point)
    found = _fast.dequantize_numpy(codes, scale, zero_point, out) if codes.size else None
    return (float(out) if python_scalar else out), found


def _dequantize_tensor(codes, scale, zero_point, dtype):
    torch = torch_module()
    if not is_integer_array(codes):
        raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
    if dtype is None:
        dtype = scale.dtype if is_tensor(scale) and scale.is_floating_point() else torch.get_default_dtype()
    views = _fast.numpy_views(codes, scale, zero_point, torch.empty(0, dtype=dtype))
    if views is not None:
        codes_view, scale, zero_point, like_dtype = views
        values, found = dequantized(codes_view, scale, zero_point, like_dtype.dtype)
        return _fast.to_tensor(values, like=codes), found
    if is_16_bit(dtype):
        values, found = _dequantize_tensor(codes, scale, zero_point, torch.float32)
        return values.to(dtype), found
    out = _fast.empty_like(codes, dtype)
    scale, _, zero_point = _float_params(out, scale, zero_point)
    return out.copy_(codes).sub_(zero_point).mul_(scale), None
