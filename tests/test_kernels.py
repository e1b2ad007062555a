"""The fused W4A16 kernel against dequantize-then-matmul: odd shapes, every grid, the packing's edge cases.

Without a GPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, numpy on the CPU), on
shapes small enough for seconds; with one, the same tests run the compiled kernel.  Where Triton is
not installed, the kernel tests skip and the dispatch tests check the fallback.
"""

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from servebook import kernels, memory, qmodel, quant
from servebook.kernels import Tiles, choose_tiles, fused_bytes, unfused_bytes, w4a16_matmul
from servebook.quant import Mapping, QParams

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")   # read when the kernel is first compiled, not before
DEVICE = "cuda" if ON_GPU else "cpu"
needs_triton = pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")


def layer_of(codes, zeros, scales, group_size, mapping=Mapping.ASYMMETRIC, bias=None):
    """A QuantizedLinear holding ``codes`` (N x K) on the grid (``zeros``, ``scales``): the book's packing."""
    n, k = codes.shape
    linear = nn.Linear(k, n, bias=bias is not None)
    if bias is not None:
        linear.bias.data = bias
    axis = 0 if group_size is None else -1
    qparams = QParams(scales, zeros, 4, mapping, axis=axis, group_size=group_size)
    return qmodel.QuantizedLinear.from_codes(linear, codes, qparams).to(DEVICE)


def random_layer(n, k, group_size, mapping=Mapping.ASYMMETRIC, seed=0, bias=False):
    g = torch.Generator().manual_seed(seed)
    low, high = quant.qrange(4, mapping)
    grid = (n,) if group_size is None else (n, k // group_size)
    zeros = (torch.randint(0, 16, grid, generator=g) if mapping is Mapping.ASYMMETRIC
             else torch.zeros(grid, dtype=torch.int64))
    scales = torch.rand(grid, generator=g) * 0.02 + 0.001
    codes = torch.randint(low, high + 1, (n, k), generator=g)
    return layer_of(codes, zeros, scales, group_size, mapping, torch.randn(n, generator=g) if bias else None)


def activations(m, k, dtype=torch.float16, seed=1):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def assert_matches_reference(out, x, w_hat, bias=None):
    """Within one rounding of the output to x's dtype, of the weight to FP16 (the reference rounds W_hat,
    the kernel scales each group's sum instead) and of FP32 summation, of the exact product."""
    exact = x.double() @ w_hat.double().T + (0 if bias is None else bias.double())
    rounding = 2.0**-10 if x.dtype == torch.float16 else 2.0**-7
    bound = rounding * exact.abs() + 2.0**-10 * (x.double().abs() @ w_hat.double().abs().T) + 2.0**-20
    assert out.dtype == x.dtype and out.shape == exact.shape
    assert ((out.double() - exact).abs() <= bound).all()


@needs_triton
@pytest.mark.parametrize(("m", "n", "k", "group_size", "mapping"), [
    (5, 96, 96, 32, Mapping.ASYMMETRIC),          # K and N three groups; M a third of a block
    (17, 64, 192, 64, Mapping.SYMMETRIC),         # M one past a block of 16
    (3, 48, 384, 128, Mapping.ASYMMETRIC),        # N three blocks of 16, K three groups of 128
    (1, 40, 80, None, Mapping.ASYMMETRIC),        # per channel: one grid per output row
    (70, 32, 64, 32, Mapping.ASYMMETRIC),         # a prefill tile (M > 64), mostly masked
])
def test_the_kernel_matches_dequantize_then_matmul(m, n, k, group_size, mapping):
    layer = random_layer(n, k, group_size, mapping)
    x = activations(m, k)
    assert_matches_reference(kernels.w4a16_linear(layer, x), x, layer.dequantized_weight(torch.float16))


@needs_triton
@pytest.mark.parametrize("group_size", [32, None])
def test_the_dequantized_weight_is_the_reference_to_the_bit_at_both_ends_of_the_codes(group_size):
    # x = I reads W_hat back one column per row: a single product per output, so nothing is summed or rounded
    # but W_hat itself.  Codes 0 and 15 against zero points 0 and 15 give the extremes +-15 s.
    n, k = 32, 64
    codes = torch.tensor([0, 15] * (k // 2)).repeat(n, 1)
    codes[::2] = 15 - codes[::2]
    grid = (n,) if group_size is None else (n, k // group_size)
    zeros = torch.zeros(grid, dtype=torch.int64)
    zeros[1::2] = 15
    scales = torch.full(grid, 2.0**-6) * torch.arange(1, n + 1).reshape(n, *([1] * (len(grid) - 1)))
    layer = layer_of(codes, zeros, scales, group_size)
    eye = torch.eye(k, dtype=torch.float16, device=DEVICE)
    out = kernels.w4a16_linear(layer, eye)
    w_hat = layer.dequantized_weight(torch.float16)
    assert torch.equal(out, w_hat.T)
    assert w_hat.float().abs().amax(1).tolist() == [15 * float(s) for s in layer.scales.float().reshape(n, -1)[:, 0]]


@needs_triton
def test_an_odd_number_of_input_features_reads_the_padded_last_byte_as_nothing():
    # pack_int4 pads an odd row with a 0 code; per channel (one group per row) any K is allowed.
    n, k, g = 24, 33, torch.Generator().manual_seed(3)
    codes, zeros = torch.randint(0, 16, (n, k), generator=g), torch.randint(0, 16, (n,), generator=g)
    scales = (torch.rand(n, generator=g) * 0.05 + 0.01).half()
    packed = quant.pack_int4(codes.to(torch.uint8))
    assert packed.shape == (n, 17)
    w_hat = (scales.float()[:, None] * (codes - zeros[:, None]).float()).half().to(DEVICE)
    x = activations(7, k)
    out = w4a16_matmul(x, packed.to(DEVICE), scales.to(DEVICE), quant.pack_int4(zeros.to(torch.uint8)).to(DEVICE))
    assert_matches_reference(out, x, w_hat)


@needs_triton
def test_split_k_bias_and_a_batch_of_sequences():
    layer = random_layer(48, 128, 32, bias=True)
    w_hat = layer.dequantized_weight(torch.float16)
    x = activations(6, 128)
    for split_k in (1, 4):
        out = kernels.w4a16_linear(layer, x) if split_k == 1 else w4a16_matmul(
            x, layer.qweight, layer.scales, layer.qzeros, group_size=32, bias=layer.bias,
            tiles=Tiles(16, 16, 32, split_k=split_k))
        assert_matches_reference(out, x, w_hat, layer.bias)
    x3 = activations(2 * 3, 128).reshape(2, 3, 128)
    out3 = kernels.w4a16_linear(layer, x3)
    assert out3.shape == (2, 3, 48)
    assert torch.equal(out3.reshape(6, 48), kernels.w4a16_linear(layer, x3.reshape(6, 128)))


@needs_triton
@pytest.mark.skipif(not ON_GPU, reason="Triton's interpreter multiplies bf16 bit patterns in tl.dot "
                    "(triton-lang/triton#11584, not supported as of 3.9)")
def test_bf16_activations():
    layer = random_layer(48, 128, 32)
    x = activations(6, 128, torch.bfloat16)
    assert_matches_reference(kernels.w4a16_linear(layer, x), x, layer.dequantized_weight(torch.float16))


@needs_triton
def test_the_kernel_and_the_layer_agree_where_the_layer_falls_back():
    # On a CPU the layer itself dequantizes (the fallback); the kernel must give the same numbers.
    layer = random_layer(32, 64, 32)
    x = activations(4, 64)
    assert not kernels.fused_applies(layer, x) or ON_GPU
    with kernels.use_fused(False):
        unfused = layer(x.float()).to(x.dtype) if not ON_GPU else layer(x)
    assert torch.allclose(kernels.w4a16_linear(layer, x).float(), unfused.float(), rtol=2e-3, atol=1e-3)


def test_the_operands_are_checked_against_the_packing():
    layer = random_layer(16, 64, 32)
    x = torch.zeros(2, 64, dtype=torch.float16, device=DEVICE)
    args = (layer.qweight, layer.scales, layer.qzeros)
    with pytest.raises(ValueError, match=r"x.dtype must be one of"):
        w4a16_matmul(x.float(), *args, group_size=32)
    with pytest.raises(ValueError, match=r"packed must have shape \(out_features, ceil\(62 / 2\)\)"):
        w4a16_matmul(x[:, :62], *args, group_size=32)
    with pytest.raises(ValueError, match=r"scales must have shape \(16, 4\)"):
        w4a16_matmul(x, *args, group_size=16)
    with pytest.raises(ValueError, match=r"group_size 48 must divide the length 64"):
        w4a16_matmul(x, *args, group_size=48)
    with pytest.raises(ValueError, match=r"zeros must hold 32 zero points packed two per byte \(16 bytes\)"):
        w4a16_matmul(x, layer.qweight, layer.scales, layer.qzeros[:8], group_size=32)
    with pytest.raises(ValueError, match=r"bias must be a tensor of shape \(16,\)"):
        w4a16_matmul(x, *args, group_size=32, bias=torch.zeros(3))
    with pytest.raises(TypeError, match=r"tiles must be a Tiles or None"):
        w4a16_matmul(x, *args, group_size=32, tiles=(16, 16, 32))
    with pytest.raises(ValueError, match=r"in_features must be even to pack two INT4 codes per byte"):
        random_layer(16, 33, None)   # the layer refuses an odd row; the kernel reads one (test above)


def test_a_cpu_without_the_interpreter_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    layer = random_layer(16, 32, 32).cpu()
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        w4a16_matmul(torch.zeros(1, 32, dtype=torch.float16), layer.qweight, layer.scales, layer.qzeros,
                     group_size=32)


def test_decode_tiles_split_k_and_prefill_tiles_do_not():
    decode = choose_tiles(1, 4096, 4096, 128, sm_count=132)
    assert (decode.block_m, decode.block_n, decode.block_k) == (16, 64, 128)
    assert decode.split_k == 8 and 4096 // (decode.block_k * decode.split_k) == 4   # four steps of K each
    prefill = choose_tiles(2048, 4096, 11008, 128)
    assert (prefill.block_m, prefill.block_n, prefill.split_k) == (128, 128, 1)
    for m in (1, 16, 17, 64, 65, 4096):
        for group_size in (32, 64, 128, None):
            tiles = choose_tiles(m, 11008, 4096, group_size)
            assert (group_size or 4096) % tiles.block_k == 0 and tiles.block_m >= min(m, 16)
    assert choose_tiles(1, 256, 64, 32).split_k == 1     # two steps of K: nothing to split
    with pytest.raises(ValueError, match="group_size must be a multiple of 32 for the fused kernel, got 16"):
        choose_tiles(1, 64, 64, 16)
    with pytest.raises(ValueError, match="block_k must be a power of two"):
        Tiles(16, 16, 48)
    with pytest.raises(ValueError, match="block_k must be >= 32"):
        Tiles(16, 16, 16)
    with pytest.raises(ValueError, match="block_n must be >= 16"):
        Tiles(16, 8, 32)


def test_the_fused_kernel_moves_a_fraction_of_the_bytes_of_dequantize_then_matmul():
    m, n, k = 1, 4096, 4096   # Llama-2-7B's q_proj at batch 1
    stored = memory.weight_bytes(n * k, "int4", group_size=128)    # codes, FP16 scales, INT4 zero points
    assert fused_bytes(m, n, k, 128) == stored + 2 * m * k + 2 * m * n
    assert unfused_bytes(m, n, k, 128) == fused_bytes(m, n, k, 128) + 2 * 2 * n * k
    assert unfused_bytes(m, n, k, 128) / fused_bytes(m, n, k, 128) > 8
    assert fused_bytes(m, n, k, None, zero_points=False) == n * k // 2 + 2 * n + 2 * m * k + 2 * m * n


def test_the_layer_falls_back_off_cuda_and_when_asked():
    layer = random_layer(16, 64, 32).cpu()
    x = torch.randn(2, 64, dtype=torch.float16)
    assert not kernels.fused_applies(layer, x)        # a CPU tensor: dequantize, then matmul
    with kernels.use_fused(False):
        assert not kernels.fused_applies(layer, x.to(DEVICE))
    with pytest.raises(TypeError, match="enabled must be True or False"):
        with kernels.use_fused("no"):
            pass
    reference = nn.functional.linear(x.float(), layer.dequantized_weight(torch.float32))
    assert torch.equal(layer(x.float()), reference)


@pytest.mark.parametrize(("capability", "fused"), [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_the_fused_kernel_needs_compute_capability_8(monkeypatch, capability, fused):
    from servebook.kernels import dispatch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability)
    assert dispatch.capable.__wrapped__(0) is fused  # a T4 (7.5) dequantizes, then multiplies


def test_importing_the_package_imports_no_triton_and_shows_the_kernel():
    code = ("import sys; from servebook import kernels, qmodel; text = kernels.kernel_source(); "
            "assert text.startswith('@triton.jit') and 'tl.dot' in text, text[:80]; "
            "assert not any(m == 'triton' or m.startswith('triton.') for m in sys.modules), 'triton imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@needs_triton
@pytest.mark.skipif(ON_GPU, reason="the interpreter is the CPU's way to run the kernel")
def test_the_interpreter_runs_the_kernel_when_triton_was_imported_first():
    # transformers imports Triton when it is installed, so a page may set TRITON_INTERPRET only afterwards.
    code = ("import triton.language; import os, torch; os.environ['TRITON_INTERPRET'] = '1'; "
            "from servebook import kernels, quant; "
            "packed = quant.pack_int4(torch.full((16, 32), 3, dtype=torch.uint8)); "
            "out = kernels.w4a16_matmul(torch.ones(1, 32, dtype=torch.float16), packed, torch.ones(16).half()); "
            "assert torch.equal(out, torch.full((1, 16), 32 * (3 - 8), dtype=torch.float16)), out")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # unset while Triton is imported
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
