"""INT4 packing: two 4-bit codes per byte, in either nibble order; the one packing of the book.

``pack_int4(codes)`` (``order="low_first"``, the default) puts code ``2i`` in the low nibble of
byte ``i`` and code ``2i + 1`` in its high nibble.  Read as little-endian int32 words, which is
how every GPU and x86 CPU reads memory, those bytes are eight codes per word, code ``8j + k`` in
bits ``4k .. 4k + 3`` of word ``j``: the first code in the lowest bits.  That is, word for word,
compressed-tensors' ``pack_to_int32(q, 4)`` (``compressors/pack_quantized/helpers.py``, checked
against 0.17.0 and 0.20.1: element ``k`` of a word shifted left by ``4k``, with the signed codes
``q`` offset by 8 into 0..15 first), which is the ``pack-quantized`` format vLLM loads, and it is
what :class:`servebook.qmodel.QuantizedLinear` stores and the book's Triton kernel unpacks.
:func:`servebook.checkpoint.pack_int32` is this function followed by that view; the tests check
it against compressed-tensors' own packer.  AWQ checkpoints pack differently: eight codes of
neighbouring *output* channels per int32 word, elements 0, 2, 4, 6, 1, 3, 5, 7 from the lowest
nibble up (vLLM 0.33.0 reorders them on loading, ``_REVERSE_AWQ_PACK_ORDER`` in ``auto_awq.py``).
"""

from __future__ import annotations

import numpy as np

from ..checks import choice, whole
from ._kinds import is_tensor, torch_module

__all__ = ["pack_int4", "unpack_int4"]

ORDERS = ("low_first", "high_first")


def pack_int4(codes, *, order: str = "low_first"):
    """Two 4-bit codes (0..15) per byte, along the last axis; an odd length is padded with a 0 code.

    ``order="low_first"``: element ``2i`` in the low nibble (bits 0-3), ``2i+1`` in the high one,
    the ONNX INT4/UINT4 layout and GPTQ's within-word order.  ``order="high_first"``: element ``2i``
    in the high nibble, as torchao's uint4 and bitsandbytes' 4-bit packing do.  Signed codes must
    be offset into 0..15 first (``q + 8``).  Returns ``uint8`` (numpy) or ``torch.uint8``.
    """
    order = choice("order", order, ORDERS)
    torch_backend = is_tensor(codes)
    if not torch_backend:
        codes = np.asarray(codes)
        if codes.dtype.kind not in "iu":
            raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
    elif codes.is_floating_point() or codes.dtype == torch_module().bool or codes.is_complex():
        raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
    if codes.ndim == 0:
        raise ValueError("codes must have at least one dimension")
    n_elements = codes.numel() if torch_backend else codes.size
    if n_elements and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise ValueError(f"INT4 codes must lie in 0..15, got values in [{int(codes.min())}, {int(codes.max())}]")
    if codes.shape[-1] % 2:
        pad_shape = tuple(codes.shape[:-1]) + (1,)
        if torch_backend:
            torch = torch_module()
            codes = torch.cat([codes, torch.zeros(pad_shape, dtype=codes.dtype, device=codes.device)], dim=-1)
        else:
            codes = np.concatenate([codes, np.zeros(pad_shape, dtype=codes.dtype)], axis=-1)
    if torch_backend:
        codes = codes.to(torch_module().uint8)
    else:
        codes = codes.astype(np.uint8)
    first, second = codes[..., 0::2], codes[..., 1::2]
    if order == "low_first":
        return first | (second << 4)
    return (first << 4) | second


def unpack_int4(packed, n: int, *, order: str = "low_first"):
    """The inverse of :func:`pack_int4`: ``n`` codes (0..15) along the last axis, as ``uint8``."""
    order = choice("order", order, ORDERS)
    n = whole("n", n, minimum=0)
    torch_backend = is_tensor(packed)
    if torch_backend:
        torch = torch_module()
        if packed.dtype != torch.uint8:
            raise TypeError(f"packed must be a torch.uint8 tensor, got {packed.dtype}")
    else:
        packed = np.asarray(packed)
        if packed.dtype != np.uint8:
            raise TypeError(f"packed must be a uint8 array, got dtype {packed.dtype}")
    if packed.ndim == 0:
        raise ValueError("packed must have at least one dimension")
    if not 2 * packed.shape[-1] - 1 <= n <= 2 * packed.shape[-1] or (n == 0 and packed.shape[-1] != 0):
        raise ValueError(f"n must be {2 * packed.shape[-1] - 1} or {2 * packed.shape[-1]} for "
                         f"{packed.shape[-1]} bytes per row, got {n}")
    low, high = packed & 0x0F, packed >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    if torch_backend:
        both = torch.stack([first, second], dim=-1)
    else:
        both = np.stack([first, second], axis=-1)
    return both.reshape(tuple(packed.shape[:-1]) + (2 * packed.shape[-1],))[..., :n]
