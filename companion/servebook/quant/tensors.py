"""Whole tensors: observe a tensor's range, choose its grid (:class:`QParams`), apply it, measure the error.

One grid per tensor, one per channel (an index along ``axis``), or one per group of
``group_size`` consecutive elements along ``axis``; each grid is
:func:`~servebook.quant.choose_qparams_affine`'s on that slice's range, and applying it is
:func:`~servebook.quant.quantize_affine` with the parameters broadcast over the slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks import choice, member, whole
from ..checks import group_size as check_group_size
from . import _fast, exact
from ._kinds import all_finite, as_float_array, is_integer_array, is_tensor, shape, size, torch_module
from .affine import choose_qparams_affine, dequantize_affine, dequantized, fake_quantize_affine, quantize_affine
from .grid import DEFAULT_EPS, Mapping, Rounding, qrange

__all__ = ["QParams", "WEIGHT_GRANULARITIES", "choose_qparams", "weight_granularity", "weight_qparams",
           "quantize", "dequantize", "fake_quantize", "quantization_error", "relative_error", "error_bound"]


@dataclass(frozen=True, eq=False)
class QParams:
    """The grid of one quantized tensor: scale and zero point, and how they map onto it.

    - per tensor (``axis is None``, ``group_size is None``): scalar ``scale``, ``zero_point``;
    - per channel (``axis`` set, ``group_size is None``): one pair per index along ``axis``
      (PyTorch's ``ch_axis``), shape ``(x.shape[axis],)``;
    - group-wise (``group_size`` set): ``axis`` is cut into groups of ``group_size`` consecutive
      elements; the parameters have ``x``'s shape with ``x.shape[axis]`` replaced by the number of
      groups.  For a weight ``W`` of shape ``(out_features, in_features)`` and ``axis=-1``:
      ``(out_features, in_features // group_size)``.
    """

    scale: Any
    zero_point: Any
    bits: int
    mapping: Mapping = Mapping.ASYMMETRIC
    axis: int | None = None
    group_size: int | None = None

    @property
    def qmin(self) -> int:
        return qrange(self.bits, self.mapping)[0]

    @property
    def qmax(self) -> int:
        return qrange(self.bits, self.mapping)[1]

    @property
    def granularity(self) -> str:
        if self.group_size is not None:
            return "group"
        return "tensor" if self.axis is None else "channel"


def _checked(qparams) -> QParams:
    if not isinstance(qparams, QParams):
        raise TypeError(f"qparams must be a QParams, got {type(qparams).__name__}")
    return qparams


def _normalize_axis(axis, ndim, name="axis"):
    try:
        return whole(name, axis, -ndim, ndim - 1) % ndim
    except ValueError:
        raise ValueError(f"{name} must be in {-ndim}..{ndim - 1} for a {ndim}-d tensor, got {axis}") from None


def _grouped_shape(x_shape, axis, group_size):
    return x_shape[:axis] + (x_shape[axis] // group_size, group_size) + x_shape[axis + 1:]


def _reduce_min_max(x, dims):
    if is_tensor(x):
        if len(dims) == x.ndim:
            return x.amin(), x.amax()
        return x.amin(dim=dims), x.amax(dim=dims)
    return x.min(axis=dims), x.max(axis=dims)


def choose_qparams(x, bits: int, mapping: Mapping | str = Mapping.ASYMMETRIC, *, axis: int | None = None,
                   group_size: int | None = None, eps=DEFAULT_EPS, rounding: Rounding | str = Rounding.HALF_UP,
                   include_zero: bool = False, exact_constant: bool = True) -> QParams:
    """Observe ``x``'s range and choose its :class:`QParams` (per tensor, per channel or group-wise).

    ``axis`` alone: per channel, one (scale, zero point) per index along ``axis``.
    ``group_size`` (``axis`` defaults to -1): groups of ``group_size`` consecutive elements along ``axis``.
    The other keywords are those of :func:`~servebook.quant.choose_qparams_affine`.
    """
    mapping = member("mapping", mapping, Mapping)
    x = as_float_array(x, "x")
    x_view = _fast.numpy_view(x)
    if x_view is not None:
        found = choose_qparams(x_view, bits, mapping, axis=axis, group_size=group_size, eps=eps, rounding=rounding,
                               include_zero=include_zero, exact_constant=exact_constant)
        scale = _fast.to_tensor(np.asarray(found.scale), like=x)
        zero_point = _fast.to_tensor(np.asarray(found.zero_point), like=x)
        return QParams(scale, zero_point, found.bits, found.mapping, found.axis, found.group_size)
    if x.ndim == 0 and (axis is not None or group_size is not None):
        raise ValueError("axis and group_size need a tensor with at least one dimension")
    if size(x) == 0:
        raise ValueError("x is empty: there is no range to observe")
    if group_size is not None:
        axis = _normalize_axis(-1 if axis is None else axis, x.ndim)
        group_size = check_group_size(group_size, x.shape[axis])
        grouped = x.reshape(_grouped_shape(tuple(x.shape), axis, group_size))
        lo, hi = _reduce_min_max(grouped, (axis + 1,))
    elif axis is not None:
        axis = _normalize_axis(axis, x.ndim)
        lo, hi = _reduce_min_max(x, tuple(d for d in range(x.ndim) if d != axis))
    else:
        lo, hi = _reduce_min_max(x, tuple(range(x.ndim)))
    if not (all_finite(lo) and all_finite(hi)):
        raise ValueError("x must be finite: it holds NaN or inf")
    scale, zero_point = choose_qparams_affine(lo, hi, bits, mapping, eps=eps, rounding=rounding,
                                              include_zero=include_zero, exact_constant=exact_constant)
    return QParams(scale, zero_point, int(bits), mapping, axis, group_size)


WEIGHT_GRANULARITIES = ("tensor", "channel")


def weight_granularity(group_size: int | str | None, *, allow_none: bool = True) -> tuple[str, int | None]:
    """``("group", g)``, ``("channel", None)`` or ``("tensor", None)`` from a weight quantizer's ``group_size``.

    A positive int (groups of that many input features), ``"channel"`` (one grid per output row),
    ``"tensor"`` (one grid for the whole matrix), or ``None`` (per channel; refused where
    ``allow_none`` is off, so that a caller can insist on a name).
    """
    if isinstance(group_size, str) or (group_size is None and not allow_none):
        return choice("group_size", group_size, WEIGHT_GRANULARITIES), None
    group_size = check_group_size(group_size, allow_none=allow_none)
    return ("channel", None) if group_size is None else ("group", group_size)


def weight_qparams(weight, bits: int, group_size: int | str | None = None,
                   mapping: Mapping | str = Mapping.ASYMMETRIC,
                   rounding: Rounding | str = Rounding.HALF_UP) -> QParams:
    """The grid of a weight matrix ``W`` (out x in) as weight-only quantizers (RTN, GPTQ, AWQ) choose it.

    - ``group_size`` an int: groups of ``group_size`` consecutive input features (``axis=-1``);
    - ``None`` or ``"channel"``: one grid per output row (``axis=0``);
    - ``"tensor"``: one grid for the whole matrix.

    Always ``include_zero=True``, as GPTQ's reference quantizer does (``xmin = min(x.min(), 0)``,
    ``xmax = max(x.max(), 0)``): the zero point then lies inside the code range and every weight
    is within ``s / 2`` of its grid.  Without it a group whose weights are all positive (or all
    negative) clips its zero point and saturates the weights at the far end of its range.
    ``rounding`` rounds the zero point, as it then rounds the codes: one convention per model.
    """
    kind, group_size = weight_granularity(group_size)
    if kind == "group":
        return choose_qparams(weight, bits, mapping, axis=-1, group_size=group_size, include_zero=True,
                              rounding=rounding)
    return choose_qparams(weight, bits, mapping, axis=0 if kind == "channel" else None, include_zero=True,
                          rounding=rounding)


def _params_view(x, qparams: QParams):
    """``x`` reshaped and ``scale``/``zero_point`` reshaped so that they broadcast, checked against each other."""
    x_shape = tuple(x.shape)
    scale, zero_point = qparams.scale, qparams.zero_point
    if qparams.group_size is None and qparams.axis is None:
        if shape(scale) != () or shape(zero_point) != ():
            raise ValueError("per-tensor qparams must hold one scale and one zero point")
        return x, scale, zero_point
    axis = _normalize_axis(qparams.axis, len(x_shape), "qparams.axis")
    if qparams.group_size is not None:
        group_size = check_group_size(qparams.group_size, x_shape[axis])
        expected = x_shape[:axis] + (x_shape[axis] // group_size,) + x_shape[axis + 1:]
        broadcast = expected[:axis + 1] + (1,) + expected[axis + 1:]
        x = x.reshape(_grouped_shape(x_shape, axis, group_size))
    else:
        expected = (x_shape[axis],)
        broadcast = (x_shape[axis],) + (1,) * (len(x_shape) - axis - 1)
    if shape(scale) != expected or shape(zero_point) != expected:
        raise ValueError(f"qparams hold scale of shape {shape(scale)} and zero_point of shape "
                         f"{shape(zero_point)}; a tensor of shape {x_shape} needs {expected}")
    return x, scale.reshape(broadcast), zero_point.reshape(broadcast)


def _on_grid(affine, x, qparams, rounding):
    """``affine`` (:func:`quantize_affine` or :func:`fake_quantize_affine`) of ``x``, ``qparams`` broadcast over it."""
    qparams = _checked(qparams)
    x = as_float_array(x, "x")
    view, scale, zero_point = _params_view(x, qparams)
    return affine(view, scale, zero_point, qparams.qmin, qparams.qmax, rounding).reshape(x.shape)


def quantize(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """Integer codes of ``x`` on the grid ``qparams`` (same shape as ``x``)."""
    return _on_grid(quantize_affine, x, qparams, rounding)


def dequantize(codes, qparams: QParams, *, dtype=None):
    """Real values ``s * (q - z)`` of ``codes`` on the grid ``qparams``."""
    qparams = _checked(qparams)
    if not is_tensor(codes):
        codes = np.asarray(codes)
    if not is_integer_array(codes):   # refused, naming the dtype
        return dequantize_affine(codes, qparams.scale, qparams.zero_point, dtype=dtype)
    view, scale, zero_point = _params_view(codes, qparams)
    values, found = dequantized(view, scale, zero_point, dtype)   # the codes' range, read in the same pass
    if found is None and size(codes):   # a device torch computes on: read apart
        found = int(codes.min()), int(codes.max())
    if found is not None and (found[0] < qparams.qmin or found[1] > qparams.qmax):
        raise ValueError(f"codes must lie in [{qparams.qmin}, {qparams.qmax}] for {qparams.bits} bits "
                         f"{qparams.mapping.name}, got values in [{found[0]}, {found[1]}]")
    return values.reshape(codes.shape)


def fake_quantize(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """``dequantize(quantize(x))``: ``x`` snapped to its grid, in ``x``'s float dtype."""
    return _on_grid(fake_quantize_affine, x, qparams, rounding)


def quantization_error(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP):
    """The measured error ``|x - fake_quantize(x)|``, elementwise."""
    x = as_float_array(x, "x")
    return abs(x - fake_quantize(x, qparams, rounding))


def relative_error(x, qparams: QParams, rounding: Rounding | str = Rounding.HALF_UP) -> float:
    """``||x - fake_quantize(x)|| / ||x||`` (Frobenius norm): the share of the tensor rounding loses."""
    x = as_float_array(x, "x")
    error = x - fake_quantize(x, qparams, rounding)
    if is_tensor(x):
        torch = torch_module()
        norm = torch.linalg.matrix_norm if x.ndim == 2 else torch.linalg.vector_norm
        return float(norm(error) / norm(x))
    return float(np.linalg.norm(np.asarray(error, dtype=np.float64)) / np.linalg.norm(np.asarray(x, dtype=np.float64)))


def error_bound(scale):
    """The worst rounding error of a value inside the grid's range: half a step, ``s / 2``.

    Values beyond the range saturate, and their error is unbounded (an outlier at ``r_max + 0.5``
    is off by 0.5 whatever ``s`` is).
    """
    if exact.is_exact(scale):
        return exact.positive_scale(scale) / 2
    values = as_float_array(scale, "scale")
    if not (all_finite(values) and bool((values > 0).all())):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    return scale / 2
