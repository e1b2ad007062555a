"""The fused W4A16 kernel in Triton: INT4 codes dequantized in registers.

This module imports Triton; :mod:`servebook.kernels.w4a16` imports it only
when the kernel first runs.  Its lines fit the book's page, which prints it.
"""

import triton
import triton.language as tl


@triton.jit
def w4a16_kernel(x_ptr, codes_ptr, scales_ptr, zeros_ptr, bias_ptr,
                 out_ptr, M, N, K, groups, group_size,
                 stride_xm, stride_cn, stride_sn, stride_om, stride_split,
                 ZERO_POINTS: tl.constexpr, BIAS: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of out[m, n] = sum over groups G of
    s[n, G] * sum over k in G of x[m, k] * (q[n, k] - z[n, G]).

    K is walked in steps of BLOCK_K, every SPLIT_K-th step (the programs
    beside this one on axis 2 take the others; the launcher adds their
    sums in a fixed order).  W_hat is never written to memory.
    """
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)   # tokens
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)   # output features
    row_in, col_in = rows < M, cols < N
    # tl.full, not tl.zeros: a builtin, which Triton's interpreter runs
    # even where Triton was imported before TRITON_INTERPRET was set
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for start in range(pid_k * BLOCK_K, K, SPLIT_K * BLOCK_K):
        # byte j of a row holds the codes of inputs 2j (low nibble) and
        # 2j + 1 (high nibble): even inputs meet low nibbles, odd ones high
        pairs = start // 2 + tl.arange(0, BLOCK_K // 2)
        even_in = (2 * pairs < K)[None, :]
        odd_in = (2 * pairs + 1 < K)[None, :]
        x_at = x_ptr + rows[:, None] * stride_xm + 2 * pairs[None, :]
        x_even = tl.load(x_at, mask=row_in[:, None] & even_in, other=0.0)
        x_odd = tl.load(x_at + 1, mask=row_in[:, None] & odd_in, other=0.0)
        packed = tl.load(
            codes_ptr + cols[None, :] * stride_cn + pairs[:, None],
            mask=col_in[None, :] & (2 * pairs < K)[:, None], other=0)
        # BLOCK_K divides the group size: the step lies in one group,
        # one scale and one zero point per output feature
        group = start // group_size
        if ZERO_POINTS:   # packed like the codes, the grid flattened
            at = cols * groups + group
            z = tl.load(zeros_ptr + at // 2, mask=col_in, other=0)
            z = (z >> ((at % 2) * 4)) & 0xF
        else:             # symmetric codes are stored offset by 8
            z = tl.full((BLOCK_N,), 8, tl.uint8)
        z = z.to(x_even.dtype)[None, :]
        # q - z: whole numbers from -15 to 15, exact in 16 bits
        low = (packed & 0xF).to(x_even.dtype) - z
        high = (packed >> 4).to(x_even.dtype) - z
        # 16-bit products, FP32 sums; then the group's scale, once
        step = tl.dot(x_even, low, tl.dot(x_odd, high))
        s = tl.load(scales_ptr + cols * stride_sn + group, mask=col_in,
                    other=0.0)
        acc += step * s.to(tl.float32)[None, :]
    if BIAS:
        if pid_k == 0:   # once, by the first program of the tile
            b = tl.load(bias_ptr + cols, mask=col_in, other=0.0)
            acc += b.to(tl.float32)[None, :]
    out = (out_ptr + pid_k * stride_split
           + rows[:, None] * stride_om + cols[None, :])
    tl.store(out, acc.to(out_ptr.dtype.element_ty),
             mask=row_in[:, None] & col_in[None, :])
