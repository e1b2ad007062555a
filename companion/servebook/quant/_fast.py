"""The speed machinery of the float paths: it changes no result, only the time one takes.

- CPU tensors are computed on their own memory (a numpy view, no copy) by compiled loops
  (:mod:`servebook.quant._loops`, numba): one pass over the elements for the whole formula, in
  the same IEEE operations as torch's kernels, so the same bits.  A chain of numpy operations
  makes a pass per operation (multiply, round, clip, shift, ...) and, on groups of 128, spends
  more time broadcasting the scales than computing.  Other devices use torch's operations, in place.
- Large outputs are allocated by numpy, whose allocations ask the kernel for huge pages.
- The elements of a large tensor are cut into blocks shared among threads, one per CPU core (as
  torch's own kernels use its intra-op threads), each taking the next block when it is done with
  one: the loops release the GIL, and every element is computed by the same operations whichever
  thread runs it.

The arithmetic is the formula's, ``clip(round(x * (1 / s)), qmin - z, qmax - z)``, then times
``s`` (fake-quantized values) or plus ``z`` (codes), checked bit for bit against PyTorch's
fake-quantize kernels by the tests.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..units import ceil_div
from ._kinds import is_tensor, torch_module
from .grid import Rounding

# Elements per block: enough that calling the compiled loop (a few microseconds) is nothing
# beside the block's work, few enough that a thread slowed by another program leaves the others
# blocks to take (128 blocks in a 4096 x 4096 matrix).
BLOCK_ELEMENTS = 1 << 17

_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
THREADS = max(1, min(_CORES, 8))
_pool: ThreadPoolExecutor | None = None


class _Blocks:
    """The ranges ``[start, stop)`` of the blocks of ``step`` of ``n`` indices, handed out one at a time to
    whichever thread asks next (a thread slowed by another program on its core takes fewer).

    ``stop()`` hands out no more: a thread that found an error ends the others' work early."""

    def __init__(self, n: int, step: int):
        self._starts = iter(range(0, n, step))
        self._n, self._step = n, step
        self._lock = threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            start = next(self._starts)
        return start, min(start + self._step, self._n)

    def stop(self) -> None:
        with self._lock:
            self._starts = iter(())


def _work_or_stop(work, blocks):
    try:
        work(blocks)
    except BaseException:
        blocks.stop()
        raise


def run_blocks(work, n: int, step: int) -> None:
    """``work(blocks)`` on every thread (the calling one too), each iterating over the shared ``blocks``
    of ``step`` of ``n`` indices (elements) and doing the ``(start, stop)`` ranges it draws.

    Small tensors (fewer than two blocks per thread) stay on the calling thread."""
    global _pool
    blocks = _Blocks(n, step)
    if THREADS == 1 or ceil_div(n, step) < 2 * THREADS:
        work(blocks)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="servebook-quant")
    helpers = [_pool.submit(_work_or_stop, work, blocks) for _ in range(THREADS - 1)]
    try:
        _work_or_stop(work, blocks)
    finally:   # the helpers write into the caller's output: wait for them whatever happens here
        errors = [helper.exception() for helper in helpers]
    for error in errors:
        if error is not None:
            raise error


def code_dtype(qmin, qmax, torch_backend=False):
    """The smallest integer dtype holding [qmin, qmax] (torch lacks full uint16 support: int32 there)."""
    if torch_backend:
        torch = torch_module()
        candidates = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
        return next(d for d in candidates if torch.iinfo(d).min <= qmin and qmax <= torch.iinfo(d).max)
    candidates = (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64)
    return next(d for d in candidates if np.iinfo(d).min <= qmin and qmax <= np.iinfo(d).max)


def round_inplace(v, rounding):
    """Round the tensor ``v`` in place, as the compiled loops round."""
    if rounding is Rounding.HALF_EVEN:
        return v.round_()
    down = torch_module().floor(v)
    v.sub_(down).ge_(0.5)          # v is now 1.0 where frac(v) >= 1/2, else 0.0
    return v.add_(down)


def _compiled():
    """The compiled loops, imported (and numba with them) when a tensor is first quantized, not with servebook."""
    from . import _loops
    return _loops


def layout(shape, params):
    """``(period, run, flat)``: the parameters of an array of ``shape`` as the compiled loops read them.

    ``params`` broadcast against ``shape`` (padded with leading ones).  ``run`` consecutive
    elements share one value of every parameter (the trailing axes where all of them are 1);
    run ``i`` takes parameter set ``i % period``: the leading axes where all of them are 1
    repeat the cycle, and ``flat`` holds each parameter laid out over the axes in between
    (broadcast there where it is 1), one value per set.
    """
    shape = tuple(shape)
    params = [np.asarray(p).reshape((1,) * (len(shape) - np.ndim(p)) + np.shape(p)) for p in params]
    stop = len(shape)
    while stop and all(p.shape[stop - 1] == 1 for p in params):
        stop -= 1
    start = 0
    while start < stop and all(p.shape[start] == 1 for p in params):
        start += 1
    cycle = shape[start:stop]
    flat = [np.ascontiguousarray(np.broadcast_to(p.reshape(p.shape[start:stop]), cycle)).reshape(-1) for p in params]
    run = int(np.prod(shape[stop:], dtype=np.int64))
    return int(np.prod(cycle, dtype=np.int64)), run, flat


def _flat(array):
    return np.ascontiguousarray(array).reshape(-1)


def affine_numpy(x, scale, inv_scale, zero_point, qmin, qmax, rounding, out):
    """Fill ``out`` with codes (integer ``out``) or snapped values (float ``out``), block by block on the threads.

    ``clip(round(x * (1 / s)), qmin - z, qmax - z)``, then times ``s`` or plus ``z``; ``x`` must be finite."""
    fake = out.dtype == x.dtype
    period, run, (inv_scale, low, high, last) = layout(
        x.shape, (inv_scale, qmin - zero_point, qmax - zero_point, scale if fake else zero_point))
    loop, values, results = _compiled().affine, _flat(x), out.reshape(-1)
    half_up = rounding is Rounding.HALF_UP

    def work(blocks):
        for start, stop in blocks:
            if not loop(values, inv_scale, low, high, last, fake, period, run, half_up, start, stop, results):
                raise ValueError("x must be finite: it holds NaN or inf")

    run_blocks(work, values.size, BLOCK_ELEMENTS)
    return out


def dequantize_numpy(codes, scale, zero_point, out):
    """Fill ``out`` with ``s * (q - z)``, block by block on the threads; return the lowest and highest code
    (``codes`` not empty)."""
    period, run, (scale, zero_point) = layout(out.shape, (scale, zero_point))
    values, results, loop = _flat(codes), out.reshape(-1), _compiled().dequantize
    ranges = []

    def work(blocks):
        for start, stop in blocks:
            ranges.append(loop(values, scale, zero_point, period, run, start, stop, results))

    run_blocks(work, values.size, BLOCK_ELEMENTS)   # codes is not empty: every block reads some
    return int(min(low for low, _ in ranges)), int(max(high for _, high in ranges))


def empty_like(x, dtype=None):
    """An empty tensor like ``x``.  On the CPU it is backed by numpy, whose large allocations ask
    the kernel for huge pages: first-touch page faults then cost a fraction of torch's own."""
    torch = torch_module()
    dtype = x.dtype if dtype is None else dtype
    if x.device.type == "cpu":
        try:
            np_dtype = torch.empty((), dtype=dtype).numpy().dtype
            return torch.from_numpy(np.empty(tuple(x.shape), dtype=np_dtype))
        except (TypeError, RuntimeError):
            pass
    return torch.empty(x.shape, dtype=dtype, device=x.device)


def affine_torch(x, scale, inv_scale, zero_point, qmin, qmax, rounding, fake):
    """Codes (``fake=False``) or snapped values (``fake=True``) of a tensor, with torch's operations in place."""
    torch = torch_module()
    low, high = torch.aminmax(x) if x.numel() else (torch.zeros(()), torch.zeros(()))
    if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
        raise ValueError("x must be finite: it holds NaN or inf")
    v = empty_like(x)
    torch.mul(x, inv_scale, out=v)
    round_inplace(v, rounding)
    torch.maximum(v, qmin - zero_point, out=v)
    torch.minimum(v, qmax - zero_point, out=v)
    if fake:
        return v.mul_(scale)
    return v.add_(zero_point).to(code_dtype(qmin, qmax, torch_backend=True))


def numpy_view(value):
    """A CPU tensor's memory as a numpy array (no copy); None for other devices and dtypes numpy lacks."""
    torch = torch_module()
    if not is_tensor(value) or value.device.type != "cpu" or value.dtype in (torch.bfloat16, torch.bool) \
            or value.is_complex() or value.is_quantized:
        return None
    try:
        return value.detach().resolve_conj().numpy()
    except (TypeError, RuntimeError):
        return None


def numpy_views(*values):
    """The tensors among ``values`` as numpy views (the rest as they are), or None if one has none."""
    converted = []
    for value in values:
        if is_tensor(value):
            view = numpy_view(value)
            if view is None:
                return None
            converted.append(view)
        else:
            converted.append(value)
    return converted


def to_tensor(array, like):
    """A numpy result as a tensor on ``like``'s device."""
    torch = torch_module()
    if array.dtype == np.uint16:  # torch's uint16 supports few operations
        array = array.astype(np.int32)
    return torch.from_numpy(np.asarray(array, order="C")).to(like.device)
