"""GPTQ: quantize a weight matrix one column at a time, pushing each column's rounding error onto the rest.

A linear layer computes ``W X`` (``W``: out x in, ``X``: in x tokens).  GPTQ
[Frantar et al., 2023] picks integer codes for ``W`` that keep ``W X`` close,
``min ||W X - W_hat X||^2``, whose curvature is the Hessian ``H = 2 X X^T``
(in x in; the same for every row).  Quantizing column ``q`` makes an error
``w_q - w_hat_q``; the rows' remaining, not yet quantized, columns absorb it::

    delta = -(w_q - w_hat_q) / [H^-1]_qq * [H^-1]_{q, q:}

Computed on the upper Cholesky factor of ``H^-1`` (numerically stable, and each
row of it is exactly the update a column needs once the earlier ones are fixed),
with ``block_size`` columns updated eagerly and the rest lazily in one matmul.

The codes, scales and zero points are in :mod:`servebook.quant`'s own format
(:class:`~servebook.quant.QParams`): group-wise along the input axis, or per
output channel.  Group parameters are chosen when the first column of a group
is reached, from the weights as the earlier columns' errors have left them.
With ``act_order`` (columns in order of decreasing ``H_qq``) a group's columns
are visited out of order, so its parameters are chosen up front from the
original weights ("static groups"), which keeps groups contiguous.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from . import quant
from .checks import flag, interval, member, whole
from .checks import group_size as check_group_size
from .quant import Mapping, QParams, Rounding

__all__ = ["HessianAccumulator", "GPTQResult", "hessian", "gptq_quantize", "layer_error", "one_thread_on_cpu"]

DEFAULT_BLOCK = 128


def _check_matrix(x, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must hold floats, got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite: it holds NaN or inf")
    return x


@contextlib.contextmanager
def one_thread_on_cpu(device=None):
    """Run torch on one thread while on a CPU (restored afterwards).

    GPTQ and AWQ are thousands of small operations (a column, a 768 x 768 Cholesky); on a CPU shared
    with other work, torch's thread pool waits for descheduled threads and can be 10 to 60 times
    slower than one thread (measured: ``cholesky_inverse`` of 768 x 768, 1.66 s on two busy cores
    against 0.028 s on one).
    """
    previous = torch.get_num_threads()
    if device is None or torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _rows_of(x: torch.Tensor, in_features: int, name: str) -> torch.Tensor:
    """Activations as a (tokens, in_features) float matrix, whatever the leading (batch, seq) dims."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 2 or x.shape[-1] != in_features:
        raise ValueError(f"{name} must have shape (..., {in_features}) (tokens x in_features), "
                         f"got {tuple(x.shape)}")
    rows = x.reshape(-1, in_features).float()
    if rows.shape[0] == 0:
        raise ValueError(f"{name} holds no tokens")
    if not bool(torch.isfinite(rows).all()):
        raise ValueError(f"{name} must be finite: it holds NaN or inf")
    return rows


def hessian(x: torch.Tensor) -> torch.Tensor:
    """``H = 2 X X^T / n`` for activations ``x`` of shape (..., in_features), n tokens.

    Dividing by n changes nothing in GPTQ (damping is relative to ``mean(diag H)``)
    and keeps the numbers in range however much calibration data there is.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    rows = _rows_of(x, x.shape[-1], "x")
    return 2.0 * rows.T @ rows / rows.shape[0]


class HessianAccumulator:
    """The running ``H = 2 X X^T / n`` and the mean ``|x|`` per input channel, batch by batch.

    GPTQ needs ``H``; AWQ needs ``mean |x|`` and the same ``X X^T`` to measure a
    layer's output error, so one pass over the calibration data feeds both.
    """

    def __init__(self, in_features: int, device=None):
        self.in_features = whole("in_features", in_features)
        self.n_tokens = 0
        self._xtx = torch.zeros(in_features, in_features, dtype=torch.float64, device=device)
        self._abs_sum = torch.zeros(in_features, dtype=torch.float64, device=device)

    def add(self, x: torch.Tensor) -> None:
        rows = _rows_of(x.detach(), self.in_features, "x")
        self._xtx += (rows.T @ rows).to(self._xtx.device, torch.float64)
        self._abs_sum += rows.abs().sum(0).to(self._abs_sum.device, torch.float64)
        self.n_tokens += rows.shape[0]

    def _check_seen(self):
        if self.n_tokens == 0:
            raise ValueError("no activations were added: run calibration data through the layer first")

    @property
    def H(self) -> torch.Tensor:
        self._check_seen()
        return (2.0 * self._xtx / self.n_tokens).float()

    @property
    def mean_abs(self) -> torch.Tensor:
        self._check_seen()
        return (self._abs_sum / self.n_tokens).float()


@dataclass(frozen=True)
class GPTQResult:
    """Integer codes and their grid for one weight matrix, plus what GPTQ measured on the way."""

    codes: torch.Tensor      # (out_features, in_features), integer
    qparams: QParams         # quant's format: group-wise (out, in // g) or per output row (out,)
    perm: torch.Tensor | None  # the column order used (act-order), None for left to right
    loss: float              # GPTQ's own estimate of sum ||w X - w_hat X||^2 / 2 over rows, per token

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        """The quantized weight ``W_hat`` as floats."""
        return quant.dequantize(self.codes, self.qparams, dtype=dtype)


def layer_error(weight: torch.Tensor, weight_hat: torch.Tensor, x: torch.Tensor) -> float:
    """``||W X - W_hat X||_F / ||W X||_F`` on activations ``x`` (..., in_features): a layer's relative output error."""
    weight = _check_matrix(weight, "weight").float()
    weight_hat = _check_matrix(weight_hat, "weight_hat").float()
    if weight.shape != weight_hat.shape:
        raise ValueError(f"weight_hat must have the shape of weight {tuple(weight.shape)}, "
                         f"got {tuple(weight_hat.shape)}")
    rows = _rows_of(x, weight.shape[1], "x")
    reference = rows @ weight.T
    return float(torch.linalg.matrix_norm(rows @ (weight - weight_hat).T) / torch.linalg.matrix_norm(reference))


def _inverse_cholesky(H: torch.Tensor) -> torch.Tensor:
    """Upper Cholesky factor of ``H^-1``: row q holds the update column q sends to the columns after it."""
    L, info = torch.linalg.cholesky_ex(H)
    if info.item() == 0:
        L, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(L), upper=True)
    if info.item() != 0:
        raise ValueError("the Hessian is not positive definite even after damping; increase damp")
    return L


def gptq_quantize(weight: torch.Tensor, H: torch.Tensor, bits: int = 4, group_size: int | None = 128, *,
                  mapping: Mapping | str = Mapping.ASYMMETRIC, block_size: int | None = None,
                  damp: float = 0.01, act_order: bool = False,
                  rounding: Rounding | str = Rounding.HALF_UP) -> GPTQResult:
    """Quantize ``weight`` (out x in) with GPTQ, given the Hessian ``H`` (in x in) of its inputs.

    - ``group_size``: a divisor of ``in_features`` (group-wise scales along the input axis) or
      ``None`` (one scale and zero point per output row).
    - ``damp``: ``damp * mean(diag H)`` is added to the diagonal, so that a Hessian that is
      singular (too few tokens, dead inputs) still has a stable inverse.
    - ``block_size``: columns updated eagerly before one lazy matmul updates the rest; must be
      a multiple or a divisor of ``group_size`` (default: 128 rounded to fit).  It changes speed,
      not the result.
    - ``act_order``: quantize columns with the largest ``H_qq`` (the most active inputs) first.
    - ``rounding``: defaults to :attr:`~servebook.quant.Rounding.HALF_UP`, the book's convention;
      the reference implementation rounds with ``torch.round`` (ties to even), so pass
      ``Rounding.HALF_EVEN`` to match it bit for bit.  Ties are rare in float weights either way.

    Each grid's range contains 0 (:func:`servebook.quant.weight_qparams`), as in the reference code.
    Inputs whose ``H_qq`` is 0 never reach the output; their weights are set to 0.
    """
    with one_thread_on_cpu(weight.device if isinstance(weight, torch.Tensor) else None):
        return _gptq(weight, H, bits, group_size, mapping, block_size, damp, act_order, rounding)


def _gptq(weight, H, bits, group_size, mapping, block_size, damp, act_order, rounding) -> GPTQResult:
    weight = _check_matrix(weight, "weight")
    H = _check_matrix(H, "H")
    out_features, in_features = weight.shape
    if H.shape != (in_features, in_features):
        raise ValueError(f"H must be ({in_features}, {in_features}) for a weight with {in_features} input "
                         f"features, got {tuple(H.shape)}")
    mapping = member("mapping", mapping, Mapping)
    rounding = member("rounding", rounding, Rounding)
    qmin, qmax = quant.qrange(bits, mapping)
    group_size = check_group_size(group_size, in_features)
    damp = interval("damp", damp, 0, 1, include_low=False)
    act_order = flag("act_order", act_order)
    block_size = _block_size(block_size, group_size)

    W = weight.detach().float().clone()
    H = H.detach().float().clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0

    n_groups = in_features // group_size if group_size else 1
    scale = torch.empty(out_features, n_groups, dtype=torch.float32, device=W.device)
    zero = torch.empty(out_features, n_groups, dtype=torch.int32, device=W.device)
    if group_size is None or act_order:
        # Fixed grids: per row from the whole row, or act-order's static groups from the original weights.
        g = group_size or in_features
        for k in range(n_groups):
            scale[:, k], zero[:, k] = _row_grid(W[:, k * g:(k + 1) * g], bits, mapping, rounding)

    perm = torch.argsort(torch.diag(H), descending=True, stable=True) if act_order else None
    if perm is not None:
        W, H = W[:, perm], H[perm][:, perm]
    H.diagonal().add_(damp * torch.mean(torch.diag(H)))
    Hinv = _inverse_cholesky(H)

    Q = torch.empty_like(W)                 # the quantized weights, in quantization order
    losses = torch.zeros_like(W)
    _quantize_columns(W, Hinv, Q, losses, scale, zero, perm, bits, mapping, group_size, block_size,
                      qmin, qmax, rounding)

    if perm is not None:
        Q = Q[:, torch.argsort(perm)]
    if group_size is None:
        qparams = QParams(scale[:, 0].contiguous(), zero[:, 0].contiguous(), bits, mapping, axis=0)
    else:
        qparams = QParams(scale, zero, bits, mapping, axis=1, group_size=group_size)
    # Q lies on the grid, so quantizing it again reads back exactly the codes chosen above.
    codes = quant.quantize(Q, qparams, rounding)
    loss = float((losses.double() ** 2).sum() / 2)
    return GPTQResult(codes, qparams, perm, loss)


def _quantize_columns(W, Hinv, Q, losses, scale, zero, perm, bits, mapping, group_size, block_size,
                      qmin, qmax, rounding):
    """GPTQ's loop: quantize each column, spread its error over the later ones (eagerly inside a block of
    ``block_size`` columns, lazily beyond it). Fills ``Q`` (quantized weights), ``losses``, and the group grid."""
    in_features = W.shape[1]
    for i1 in range(0, in_features, block_size):
        i2 = min(i1 + block_size, in_features)
        W1 = W[:, i1:i2].clone()
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            j = i1 + i                          # position in quantization order
            if group_size is None:
                k = 0
            elif perm is not None:              # act-order: the column's own, static, group
                k = int(perm[j]) // group_size
            else:
                k = j // group_size
                if j % group_size == 0:
                    # A new group: its grid comes from the weights as the earlier errors have left them.
                    source = W[:, j:j + group_size] if i == 0 else W1[:, i:i + group_size]
                    scale[:, k], zero[:, k] = _row_grid(source, bits, mapping, rounding)
            w = W1[:, i]
            w_hat = quant.fake_quantize_affine(w, scale[:, k], zero[:, k], qmin, qmax, rounding)
            Q[:, j] = w_hat
            err = (w - w_hat) / Hinv1[i, i]
            losses[:, j] = err
            W1[:, i:] -= err.unsqueeze(1) * Hinv1[i, i:].unsqueeze(0)
            Err1[:, i] = err
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]


def _row_grid(columns: torch.Tensor, bits: int, mapping: Mapping, rounding) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point of each row of ``columns`` (out x g): :func:`servebook.quant.weight_qparams`
    per output row, whose range always contains 0 as in the reference code."""
    qp = quant.weight_qparams(columns, bits, "channel", mapping, rounding)
    return qp.scale, qp.zero_point


def _block_size(block_size, group_size) -> int:
    if block_size is None:
        if group_size is None or group_size >= DEFAULT_BLOCK:
            return group_size or DEFAULT_BLOCK
        return group_size * (DEFAULT_BLOCK // group_size)
    block_size = whole("block_size", block_size)
    if group_size is not None and block_size % group_size and group_size % block_size:
        raise ValueError(f"block_size {block_size} must be a multiple or a divisor of group_size {group_size}, "
                         "so that every group's grid is chosen from fully updated weights")
    return block_size
