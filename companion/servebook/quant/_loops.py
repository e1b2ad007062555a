"""The quantizer's formulas as compiled loops (numba): one pass over a range of elements each.

A loop reads each element once and writes its result once, where the same formula as a chain
of numpy operations makes a pass per operation.  The elements ``[start, stop)`` of a flattened
C-contiguous array are walked in runs of ``run`` consecutive elements sharing one set of
parameters; run ``i`` uses parameter ``i % period`` (see :func:`servebook.quant._fast.layout`).

Every operation is an IEEE operation in the array's own dtype, as numpy's and torch's kernels
do them: the parameters come in that dtype, no Python number enters the arithmetic (numba would
widen float32 to float64 for it), and nothing is fused or reordered (no ``fastmath``).  The loops
release the GIL (``nogil``): :func:`servebook.quant._fast.run_blocks` shares the blocks of a
large tensor among its threads.  Compiled once per dtype signature and cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np


def _compiled(function):
    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError:   # nowhere writable to keep the cache: compiled anew in each process instead
        return numba.njit(nogil=True)(function)


@_compiled
def _rounded(v, half_up):
    """``round(v)``: half to even (``rint``), or half up as ``floor(v) + (frac(v) >= 1/2)``."""
    if half_up:
        down = np.floor(v)
        return down + (v - down >= 0.5)   # a bool added to a float keeps its dtype (0.5 is exact in it)
    return np.rint(v)


@_compiled
def _clipped(v, low, high):
    """``v`` clipped to ``[low, high]`` as numpy's ``clip`` does it: ``max`` keeps ``v`` only if it is greater,
    ``min`` only if it is smaller (so a -0.0 clipped at 0.0 comes out +0.0, the same bits as numpy's)."""
    v = v if v > low else low
    return v if v < high else high


@_compiled
def _finite(v):
    return v - v == v - v      # NaN - NaN and inf - inf are NaN, unequal to itself


@_compiled
def _snapped(v, inv, low, high, half_up):
    return _clipped(_rounded(v * inv, half_up), low, high)


@_compiled
def affine(x, inv_scale, low, high, last, fake, period, run, half_up, start, stop, out):
    """Over ``[start, stop)``: ``v = clip(round(x * inv_scale), low, high)``, then ``out = v * last``
    (``fake``: ``last`` is the scale, the snapped value) or ``out = v + last`` (``last`` is the zero
    point, the code, cast to ``out``'s integer dtype: exact, an integer in ``[qmin, qmax]``); whether
    ``x`` was finite there.

    ``low`` and ``high`` are ``qmin - z`` and ``qmax - z``: the snapped value
    ``s * (clip(round(x / s) + z, qmin, qmax) - z)`` without the two shifts, which cancel exactly,
    and the code with its clip before the shift, which keeps the code range exact where ``x``'s
    dtype does not hold every integer of it (32-bit codes in float32).
    """
    finite = True
    position = start
    while position < stop:
        end, p = _piece(position, stop, period, run)
        xs, ys = x[position:end], out[position:end]   # loops from 0 over slices: LLVM vectorizes them
        if run == 1:   # a parameter per element: the piece is a stretch of the cycle from p on
            inv, lo, hi, add = inv_scale[p:], low[p:], high[p:], last[p:]
            for k in range(xs.size):
                finite &= _finite(xs[k])
                v = _snapped(xs[k], inv[k], lo[k], hi[k], half_up)
                ys[k] = v * add[k] if fake else v + add[k]
        else:          # one run: one parameter for the piece
            inv, lo, hi, add = inv_scale[p], low[p], high[p], last[p]
            for k in range(xs.size):
                finite &= _finite(xs[k])
                v = _snapped(xs[k], inv, lo, hi, half_up)
                ys[k] = v * add if fake else v + add
        position = end
    return finite


@_compiled
def dequantize(q, scale, zero_point, period, run, start, stop, out):
    """``out = (q - z) * s`` over ``[start, stop)``, ``q`` first cast to ``out``'s float dtype; the lowest and
    highest code read there (``stop > start``)."""
    lowest = highest = q[start]
    position = start
    while position < stop:
        end, p = _piece(position, stop, period, run)
        qs, ys = q[position:end], out[position:end]
        for k in range(qs.size):
            lowest = min(lowest, qs[k])
            highest = max(highest, qs[k])
            ys[k] = qs[k]                     # the cast to out's dtype, as numpy's copyto makes it
        if run == 1:
            s, z = scale[p:], zero_point[p:]
            for k in range(ys.size):
                ys[k] = (ys[k] - z[k]) * s[k]
        else:
            s, z = scale[p], zero_point[p]
            for k in range(ys.size):
                ys[k] = (ys[k] - z) * s
        position = end
    return lowest, highest


@_compiled
def _piece(position, stop, period, run):
    """``(end, p)``: the next stretch ``[position, end)`` of ``[position, stop)`` and its first parameter set.

    One run when runs are longer than an element; otherwise as much of the cycle as is left
    (element ``e`` then takes set ``e % period``, the next ones the sets after it)."""
    if run == 1:
        p = position % period
        return min(position + period - p, stop), p
    i = position // run
    return min((i + 1) * run, stop), i % period
