"""The fused W4A16 kernel measured alone, layer by layer, against the memory it must read.

For each linear-layer shape of a model and each number of tokens, three ways
to multiply: servebook.kernels' fused kernel, servebook.qmodel's
dequantize-then-matmul, and FP16 ``torch.matmul`` on an FP16 weight.  Each
time becomes a bandwidth (the bytes the path must move over its time), set
beside a device-to-device copy measured in the same run and the datasheet's
bandwidth.  Three things keep the numbers honest:

- every call reads its own copy of the weight, with enough copies to overflow
  the L2 cache four times, so no call finds its weight in cache;
- on CUDA the fused kernel and ``torch.matmul`` are replayed from a CUDA graph,
  so a 2-microsecond kernel is not billed the 20 microseconds Python takes to
  launch it; dequantize-then-matmul checks its codes on the host, which a graph
  cannot capture, so it is timed as launched (``"timing": "eager"``);
- the fused result is compared with dequantize-then-matmul's on every shape.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import gpus, kernels
from ..checks import whole
from ..models import ModelSpec
from ..units import GiB, MiB, ceil_div
from .device import Device, cuda_graph, cuda_seconds, require_torch
from .load import linear_shapes

LAYER_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # linear_shapes' order
PATHS = ("fused", "unfused", "fp16")
BYTES_BASIS = {
    "fused": "servebook.kernels.fused_bytes: the packed codes, FP16 scales and INT4 zero points read once, "
             "the FP16 activations read and the FP16 output written",
    "unfused": "servebook.kernels.unfused_bytes: the fused bytes plus the FP16 weight written and read back "
               "(a lower bound: qmodel also moves its unpacked codes and FP32 intermediates)",
    "fp16": "the FP16 weight and activations read, the FP16 output written",
}


def layer_shapes(spec: ModelSpec) -> dict[tuple[int, int], list[str]]:
    """Each distinct (out, in) of one block's linear layers, with the layers that have it."""
    shapes: dict[tuple[int, int], list[str]] = {}
    for name, shape in zip(LAYER_NAMES, linear_shapes(spec), strict=True):
        shapes.setdefault(shape, []).append(name)
    return shapes


def _captured(run: Callable[[], Any], device: Device) -> Callable[[], Any] | None:
    """``run`` recorded in a CUDA graph, as the graph's replay; None where the capture is refused."""
    try:
        return cuda_graph(run, device).replay
    except RuntimeError:   # something in the calls waits on the host: time them as launched instead
        return None


def _seconds_per_call(calls: Sequence[Callable[[], Any]], device: Device, repeats: int,
                      graph: bool) -> tuple[float, str]:
    """Median over ``repeats`` of the time to run every call once, divided by the number of calls; and how
    the calls were timed (``"cuda-graph"`` where ``graph`` asks and the capture succeeds, else ``"eager"``).

    On CUDA, after one untimed round (compilation, allocation); a CPU run checks the code, not the times.
    """
    run = lambda: [call() for call in calls]                 # noqa: E731
    timing = "eager"
    if device.kind == "cuda":
        run()                                               # warm-up: compilation, allocation
        replay = _captured(run, device) if graph else None
        if replay is not None:
            run, timing = replay, "cuda-graph"
    times = []
    for _ in range(repeats):
        if device.kind == "cuda":
            times.append(cuda_seconds(run, device))
        else:
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
    return statistics.median(times) / len(calls), timing


def copy_bandwidth(device: Device, n_bytes: int = GiB, repeats: int = 10) -> dict[str, Any]:
    """Bytes per second of a device-to-device copy of ``n_bytes``: read once and written once, so 2 x n_bytes."""
    torch = require_torch()
    n_bytes = whole("n_bytes", n_bytes, MiB)
    source = torch.empty(n_bytes, dtype=torch.uint8, device=device.torch_device).fill_(1)
    target = torch.empty_like(source)
    seconds, _ = _seconds_per_call([lambda: target.copy_(source)], device, whole("repeats", repeats), graph=False)
    return {"bytes": n_bytes, "seconds": seconds, "bytes_per_s": 2 * n_bytes / seconds,
            "basis": "torch.Tensor.copy_ between two device buffers: each byte read once and written once"}


def _l2_bytes(device: Device) -> int:
    if device.kind != "cuda":
        return 0
    return int(getattr(require_torch().cuda.get_device_properties(device.index), "L2_cache_size", 64 * MiB))


def _random_layers(n: int, k: int, group_size: int, copies: int, device: Device):
    """``copies`` W4A16 layers of (n x k) with random codes, scales and zero points (any byte is a valid pair)."""
    from .. import qmodel
    from ..quant import Mapping

    torch = require_torch()
    layers = []
    for _ in range(copies):
        layer = qmodel.QuantizedLinear(k, n, 4, Mapping.ASYMMETRIC, "group", group_size)
        layer.qweight = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device.torch_device)
        layer.scales = (torch.rand(n, k // group_size, device=device.torch_device) * 1e-3 + 1e-4).half()
        layer.qzeros = torch.randint(0, 256, (ceil_div(n * (k // group_size), 2),), dtype=torch.uint8,
                                     device=device.torch_device)
        layers.append(layer)
    return layers


def _time_paths(layers, weights16, x, device: Device, repeats: int):
    """(seconds per call, how it was timed) of each path on ``x``, and the fused result's largest error
    relative to the unfused one."""
    torch = require_torch()
    with torch.inference_mode():
        with kernels.use_fused(False):
            reference = layers[0](x).float()
            unfused = _seconds_per_call([lambda layer=layer: layer(x) for layer in layers], device, repeats,
                                        graph=False)
        error = (kernels.w4a16_linear(layers[0], x).float() - reference).abs().max() / reference.abs().max()
        fused = _seconds_per_call([lambda layer=layer: kernels.w4a16_linear(layer, x) for layer in layers],
                                  device, repeats, graph=True)
        fp16 = _seconds_per_call([lambda w=w: torch.matmul(x, w.T) for w in weights16], device, repeats, graph=True)
    return {"fused": fused, "unfused": unfused, "fp16": fp16}, float(error)


def _rows_for_shape(n, k, batches, group_size, device, repeats, peaks) -> tuple[list[dict], float]:
    """Rows of one layer shape at every batch, and the fused result's largest error against dequantize-then-matmul."""
    torch = require_torch()
    l2 = _l2_bytes(device)
    w4_copies = max(1, ceil_div(4 * l2, kernels.fused_bytes(1, n, k, group_size))) if l2 else 1
    w16_copies = max(1, ceil_div(4 * l2, 2 * n * k)) if l2 else 1
    layers = _random_layers(n, k, group_size, w4_copies, device)
    weights16 = [torch.randn(n, k, device=device.torch_device, dtype=torch.float16) * 0.02 for _ in range(w16_copies)]
    rows, worst = [], 0.0
    for m in batches:
        x = torch.randn(m, k, device=device.torch_device, dtype=torch.float16)
        timed, error = _time_paths(layers, weights16, x, device, repeats)
        worst = max(worst, error)
        moved = {"fused": kernels.fused_bytes(m, n, k, group_size), "fp16": 2 * (n * k + m * k + m * n),
                 "unfused": kernels.unfused_bytes(m, n, k, group_size)}
        tiles = kernels.choose_tiles(m, n, k, group_size, _sm_count(device))
        rows += [_row(n, k, m, path, *timed[path], moved[path], peaks, tiles if path == "fused" else None)
                 for path in PATHS]
    return rows, worst


def _sm_count(device: Device) -> int:
    if device.kind != "cuda":
        return 4
    return require_torch().cuda.get_device_properties(device.index).multi_processor_count


def _row(n, k, m, path, seconds, timing, moved, peaks, tiles) -> dict[str, Any]:
    copy, gpu = peaks
    rate, flops = moved / seconds, 2 * m * n * k / seconds
    return {"n": n, "k": k, "m": m, "path": path, "timing": timing, "seconds": seconds, "bytes": moved,
            "bytes_per_s": rate, "fraction_of_copy": rate / copy,
            "fraction_of_datasheet": None if gpu is None else rate / gpu.bandwidth,
            "flops_per_s": flops, "fraction_of_fp16_peak": None if gpu is None else flops / gpu.fp16_flops,
            "tiles": None if tiles is None else {f: getattr(tiles, f) for f in tiles.__dataclass_fields__}}


def check_kernel(device: Device, tolerance: float = 2e-3) -> dict[str, float]:
    """The fused kernel against dequantize-then-matmul on ``device``, before anything is timed.

    Groups of 32, 64, 128 and per channel, decode and prefill sizes, odd sizes among them; returns the largest
    relative difference per case and raises ``RuntimeError`` naming the cases over ``tolerance``.
    """
    from .. import qmodel
    from ..quant import Mapping

    torch = require_torch()
    generator = torch.Generator(device=device.torch_device).manual_seed(0)
    errors = {}
    for group_size, m, n, k in ((32, 1, 96, 160), (64, 17, 200, 192), (128, 130, 256, 384), (None, 5, 130, 256)):
        granularity, groups = ("group", k // group_size) if group_size else ("channel", 1)
        layer = qmodel.QuantizedLinear(k, n, 4, Mapping.ASYMMETRIC, granularity, group_size)
        layer.qweight = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device.torch_device,
                                      generator=generator)
        shape = (n, groups) if group_size else (n,)
        layer.scales = (torch.rand(shape, device=device.torch_device, generator=generator) * 1e-2 + 1e-3).half()
        layer.qzeros = torch.randint(0, 256, (ceil_div(n * groups, 2),), dtype=torch.uint8,
                                     device=device.torch_device, generator=generator)
        x = torch.randn(m, k, device=device.torch_device, generator=generator).half()
        with torch.inference_mode(), kernels.use_fused(False):
            reference = layer(x).float()
        fused = kernels.w4a16_linear(layer, x).float()
        errors[f"g{group_size or 'channel'} {m}x{n}x{k}"] = float((fused - reference).abs().max()
                                                                  / reference.abs().max())
    wrong = {case: error for case, error in errors.items() if error > tolerance}
    if wrong:
        raise RuntimeError(f"the fused kernel disagrees with dequantize-then-matmul on {device.describe()}: {wrong}")
    return errors


def measure_kernel(spec: ModelSpec, device: Device, batches: Sequence[int] = (1, 16, 64, 512, 4096),
                   group_size: int = 128, repeats: int = 10, copy_bytes: int | None = None,
                   log: Callable[[str], None] = print) -> dict[str, Any]:
    """The kernel section of a results document: the copy bandwidth, and a row per shape, batch and path.

    ``copy_bytes``: the size of the copy (default 1 GiB on CUDA, far beyond any cache; 64 MiB on a CPU).
    """
    batches = [whole("batches", b) for b in batches]
    started = time.perf_counter()
    copy = copy_bandwidth(device, copy_bytes or (GiB if device.kind == "cuda" else 64 * MiB), repeats)
    gpu = None if device.roofline_gpu is None else gpus.get(device.roofline_gpu)
    rows, errors, shapes = [], {}, layer_shapes(spec)
    for (n, k), names in shapes.items():
        log(f"kernel: {n} x {k} ({', '.join(names)}) at {len(batches)} batch sizes")
        shape_rows, errors[f"{n}x{k}"] = _rows_for_shape(n, k, batches, group_size, device, repeats,
                                                         (copy["bytes_per_s"], gpu))
        rows += [{"layers": names, **row} for row in shape_rows]
    return {"model": spec.name, "group_size": group_size, "dtype": "fp16", "copy": copy, "bytes_basis": BYTES_BASIS,
            "datasheet_bytes_per_s": None if gpu is None else gpu.bandwidth,
            "datasheet_fp16_flops": None if gpu is None else gpu.fp16_flops, "l2_bytes": _l2_bytes(device) or None,
            "max_relative_error": errors, "rows": rows, "seconds": round(time.perf_counter() - started, 2)}


def kernel_table(section: dict[str, Any]) -> list[dict[str, str]]:
    """Rows for display (:func:`~servebook.lab.format_table`): each shape, batch and path, its time and bandwidth."""
    def share(value):
        return "-" if value is None else f"{value:.0%}"

    return [{"layers": ", ".join(r["layers"]), "N x K": f"{r['n']} x {r['k']}", "M": str(r["m"]), "path": r["path"],
             "timing": r["timing"], "time": f"{r['seconds'] * 1e6:,.1f} us", "GB/s": f"{r['bytes_per_s'] / 1e9:,.0f}",
             "of copy": share(r["fraction_of_copy"]), "of HBM": share(r["fraction_of_datasheet"]),
             "of FP16 peak": share(r["fraction_of_fp16_peak"])} for r in section["rows"]]
