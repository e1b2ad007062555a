"""The fused W4A16 kernel in Triton: INT4 codes dequantized in registers, multiplied with 16-bit activations.

This module imports Triton; :mod:`servebook.kernels.w4a16` imports it only when the kernel runs.
"""

import triton
import triton.language as tl


@triton.jit
def w4a16_kernel(x_ptr, codes_ptr, scales_ptr, zeros_ptr, bias_ptr, out_ptr,
                 M, N, K, groups, group_size,
                 stride_xm, stride_cn, stride_sn, stride_om, stride_split,
                 ZERO_POINTS: tl.constexpr, BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """out[m, n] = sum over groups g of s[n, g] * sum over k in g of x[m, k] * (q[n, k] - z[n, g]).

    One program owns a BLOCK_M x BLOCK_N tile of the output and walks K in steps
    of BLOCK_K inputs (every SPLIT_K-th step: the programs beside it along axis
    2 take the others, and the launcher adds their partial sums in a fixed
    order).  A step reads BLOCK_K / 2 packed bytes per output feature; byte j
    holds code 2j in its low nibble and code 2j + 1 in its high nibble, so the
    even inputs meet the low nibbles and the odd inputs the high ones.  The
    codes become 16-bit numbers only in registers, on their way into the dot
    product: the dequantized weight is never written to memory.
    """
    pid_m, pid_n, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)            # tokens
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)            # output features
    row_in, col_in = rows < M, cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):
        pairs = start // 2 + tl.arange(0, BLOCK_K // 2)       # byte j of a row: inputs 2j and 2j + 1
        x_at = x_ptr + rows[:, None] * stride_xm + 2 * pairs[None, :]
        x_even = tl.load(x_at, mask=row_in[:, None] & (2 * pairs < K)[None, :], other=0.0)
        x_odd = tl.load(x_at + 1, mask=row_in[:, None] & (2 * pairs + 1 < K)[None, :], other=0.0)
        packed = tl.load(codes_ptr + cols[None, :] * stride_cn + pairs[:, None],
                         mask=col_in[None, :] & (2 * pairs < K)[:, None], other=0)
        # BLOCK_K divides the group size, so the whole step lies in one group: one scale per column.
        group = start // group_size
        if ZERO_POINTS:
            at = cols * groups + group                        # zero points: packed like the codes, flattened
            z = (tl.load(zeros_ptr + at // 2, mask=col_in, other=0) >> ((at % 2) * 4)) & 0xF
        else:
            z = tl.full((BLOCK_N,), 8, tl.uint8)              # symmetric codes are stored offset by 8
        z = z.to(x_even.dtype)[None, :]
        low = (packed & 0xF).to(x_even.dtype) - z             # q - z: whole numbers, exact in 16 bits
        high = (packed >> 4).to(x_even.dtype) - z
        step = tl.dot(x_even, low, tl.dot(x_odd, high))       # 16-bit products, FP32 sums
        s = tl.load(scales_ptr + cols * stride_sn + group, mask=col_in, other=0.0).to(tl.float32)
        acc += step * s[None, :]                              # the group's scale, once per output
    if BIAS:
        if pid_k == 0:   # added once, by the first of the programs that share this tile
            acc += tl.load(bias_ptr + cols, mask=col_in, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + pid_k * stride_split + rows[:, None] * stride_om + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_in[:, None] & col_in[None, :])
