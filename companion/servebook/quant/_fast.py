"""The speed machinery of the float paths: it changes no result, only the time one takes.

- CPU tensors are computed by the numpy kernels on their own memory (a view, no copy): the same
  IEEE operations as torch's, so the same bits, without the cost of torch's intra-op thread pool
  on small tensors.  Other devices, and bfloat16, use torch's operations, in place.
- The numpy kernels walk the tensor in blocks of rows that stay in the L2 cache across the five or
  six passes of the formula (multiply, round, clip, shift, ...), rounding in place into scratch
  buffers allocated once per call.
- numpy's own ufunc buffers are kept no longer than a run of elements sharing one scale (a row
  per channel, a group of 128 or more): longer ones make numpy copy the broadcast scales into them.
- Large outputs are allocated by numpy, whose allocations ask the kernel for huge pages.
- The blocks of a large tensor are shared among threads, one per CPU core (as torch's own kernels
  use its intra-op threads), each taking the next block when it is done with one: numpy releases
  the GIL inside each operation, and every element is computed by the same operations whichever
  thread runs it.

The arithmetic is the formula's, ``clip(round(x * (1 / s)), qmin - z, qmax - z)``, checked
bit for bit against PyTorch's fake-quantize kernels by the tests; codes are computed as
``clip(round(x * (1 / s)) + z, qmin, qmax)`` wherever the dtype makes that the same numbers.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from ..units import ceil_div
from ._kinds import exact_integers, is_tensor, torch_module
from .grid import Rounding

# Elements per block of the float kernels: a block of float32 (512 KiB) and its scratch stay in
# the L2 cache (2 MiB a core on today's server CPUs) across the passes, so the big tensor is read
# once and written once instead of once per pass.  Blocks half as large took 10 to 25% longer on
# a 4096 x 4096 matrix: the Python around each block's numpy calls costs about 15 us a block.
BLOCK_ELEMENTS = 1 << 17

# Runs of shared parameters below this many elements (groups of 64 and less) keep numpy's buffers.
SHORTEST_BUFFER = 128

_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
THREADS = max(1, min(_CORES, 8))
_pool: ThreadPoolExecutor | None = None


class _Blocks:
    """The row ranges ``[start, stop)`` of the blocks of ``n_rows`` rows, handed out one at a time to
    whichever thread asks next (a thread slowed by another program on its core takes fewer).

    ``stop()`` hands out no more: a thread that found an error ends the others' work early."""

    def __init__(self, n_rows: int, step: int):
        self._starts = iter(range(0, n_rows, step))
        self._n_rows, self._step = n_rows, step
        self._lock = threading.Lock()

    def __iter__(self):
        return self

    def __next__(self):
        with self._lock:
            start = next(self._starts)
        return start, min(start + self._step, self._n_rows)

    def stop(self) -> None:
        with self._lock:
            self._starts = iter(())


def _work_or_stop(work, blocks):
    try:
        work(blocks)
    except BaseException:
        blocks.stop()
        raise


def run_blocks(work, n_rows: int, step: int) -> None:
    """``work(blocks)`` on every thread (the calling one too), each iterating over the shared ``blocks``
    of ``step`` rows of ``n_rows`` and doing the ``(start, stop)`` ranges it draws.

    Small tensors (fewer than two blocks per thread) stay on the calling thread."""
    global _pool
    blocks = _Blocks(n_rows, step)
    if THREADS == 1 or ceil_div(n_rows, step) < 2 * THREADS:
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


def round_inplace(v, rounding, scratch=None):
    """Round ``v`` in place (numpy array or tensor); ``scratch`` is a buffer shaped like ``v``."""
    if is_tensor(v):
        if rounding is Rounding.HALF_EVEN:
            return v.round_()
        down = torch_module().floor(v)
        v.sub_(down).ge_(0.5)          # v is now 1.0 where frac(v) >= 1/2, else 0.0
        return v.add_(down)
    if rounding is Rounding.HALF_EVEN:
        return np.rint(v, out=v)
    down = np.floor(v, out=scratch)
    np.subtract(v, down, out=v)
    np.greater_equal(v, 0.5, out=v, casting="unsafe")
    return np.add(v, down, out=v)


def _rows(param, rows):
    return param if param.shape[0] == 1 else param[rows]


def _block_rows(x):
    row_elements = int(np.prod(x.shape[1:], dtype=np.int64)) if x.ndim > 1 else 1
    return max(1, BLOCK_ELEMENTS // max(row_elements, 1))


def _at_least_1d(*arrays):
    return [a.reshape((1,) + a.shape) if a.ndim == 0 else a for a in arrays]


def _constant_run(shape, params):
    """How many consecutive elements of an array of ``shape`` share one value of every ``param``."""
    run = 1
    for axis in range(1, len(shape) + 1):
        if any(p.ndim >= axis and p.shape[-axis] != 1 for p in params):
            break
        run *= shape[-axis]
    return run


@contextmanager
def _buffers_of(run):
    """numpy's ufunc buffers no longer than ``run``, the elements that share one set of parameters.

    A buffer longer than a run makes numpy fill it across several runs, copying the broadcast
    parameters and the operands into it: two to three times the work of the operation itself.
    Runs shorter than ``SHORTEST_BUFFER`` keep numpy's buffers: the cost of so many short buffers
    then outweighs the copies.  The buffer size is the calling thread's own setting; it changes
    the time, never a result."""
    old = np.getbufsize()
    size = old if run < SHORTEST_BUFFER else min(old, run - run % 16)
    if size == old:
        yield
        return
    np.setbufsize(size)
    try:
        yield
    finally:
        np.setbufsize(old)


def _check_finite_block(block):
    # checked block by block, while the block is in the cache, instead of in one more pass
    if not np.isfinite(block).all():
        raise ValueError("x must be finite: it holds NaN or inf")


def _codes_shifted_exactly(dtype, qmin, qmax):
    """Whether ``clip(r + z, qmin, qmax)`` is, bit for bit, ``clip(r, qmin - z, qmax - z) + z`` in ``dtype``.

    True when every integer of ``[qmin, qmax]`` and every difference of two of them is exact
    in ``dtype``: beyond that range rounding is monotonic, so a code outside it still saturates."""
    return max(-qmin, qmax, qmax - qmin) <= exact_integers(dtype)


def affine_numpy(x, scale, inv_scale, zero_point, qmin, qmax, rounding, out):
    """Fill ``out`` with codes (integer ``out``) or snapped values (float ``out``), block by block."""
    if x.ndim == 0 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    fake = out.dtype == x.dtype
    step = _block_rows(x) if x.ndim else 1
    x_blocks, out_blocks, scale, inv_scale, zero_point = _at_least_1d(x, out, scale, inv_scale, zero_point)
    # clip(round(x/s) + z, qmin, qmax) - z == clip(round(x/s), qmin - z, qmax - z): integers, so exact
    low, high = qmin - zero_point, qmax - zero_point
    # codes: a shift by z, then a clip to one range for all, costs less than a clip to a range per row
    shift_first = not fake and _codes_shifted_exactly(x.dtype, qmin, qmax)
    code_range = np.array([qmin, qmax], dtype=x.dtype)
    run = _constant_run(x_blocks.shape, (scale, zero_point))

    def work(blocks):
        values = np.empty((min(step, len(x_blocks)),) + x_blocks.shape[1:], dtype=x.dtype)
        scratch = np.empty_like(values) if rounding is Rounding.HALF_UP else None
        with _buffers_of(run):
            for rows in itertools.starmap(slice, blocks):
                xb = x_blocks[rows]
                v = out_blocks[rows] if fake else values[:len(xb)]
                np.multiply(xb, _rows(inv_scale, rows), out=v)
                _check_finite_block(xb)
                if scratch is None:
                    np.rint(v, out=v)
                else:
                    round_inplace(v, rounding, scratch[:len(xb)])
                if shift_first:
                    np.add(v, _rows(zero_point, rows), out=v)
                    v.clip(code_range[0], code_range[1], out=v)   # np.clip's own wrappers cost as much
                else:
                    v.clip(_rows(low, rows), _rows(high, rows), out=v)
                if fake:
                    np.multiply(v, _rows(scale, rows), out=v)
                elif shift_first:   # integers in [qmin, qmax]: the cast is exact
                    np.copyto(out_blocks[rows], v, casting="unsafe")
                else:
                    np.add(v, _rows(zero_point, rows), out=out_blocks[rows], casting="unsafe")

    run_blocks(work, x_blocks.shape[0], step)
    return out


def dequantize_numpy(codes, scale, zero_point, out):
    """Fill ``out`` with ``s * (q - z)``, block by block."""
    out_blocks, code_blocks, scale, zero_point = _at_least_1d(out, codes, scale, zero_point)
    step = _block_rows(out_blocks)
    run = _constant_run(out_blocks.shape, (scale, zero_point))

    def work(blocks):
        with _buffers_of(run):
            for rows in itertools.starmap(slice, blocks):
                v = out_blocks[rows]
                np.copyto(v, code_blocks[rows], casting="unsafe")
                np.subtract(v, _rows(zero_point, rows), out=v)
                np.multiply(v, _rows(scale, rows), out=v)

    run_blocks(work, out_blocks.shape[0], step)
    return out


def value_range(array) -> tuple[int, int]:
    """``(min, max)`` of a non-empty integer array as ints, block by block on the threads."""
    if not array.flags.c_contiguous:
        return int(array.min()), int(array.max())
    flat = array.reshape(-1)
    lows, highs = [], []

    def work(blocks):
        for start, stop in blocks:
            lows.append(flat[start:stop].min())
            highs.append(flat[start:stop].max())

    run_blocks(work, flat.size, 4 * BLOCK_ELEMENTS)
    return int(min(lows)), int(max(highs))


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
