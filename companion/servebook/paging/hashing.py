"""Token ids and the chained hash that names a full block's prefix (the key of the prefix cache)."""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Iterable, Sequence

import numpy as np

from ..checks import whole

TOKEN_LIMIT = 2**63  # token ids are hashed as signed 64-bit integers


def block_hash(parent: bytes | None, tokens: Sequence[int]) -> bytes:
    """SHA-256 of a full block's tokens, chained with the hash of the blocks before it.

    Chaining makes the hash name the whole prefix, not just this block: the same
    16 tokens after a different prefix have different keys and values, so they
    must not match.  A cryptographic hash, because a collision would silently
    hand one request another's KV cache; vLLM moved from Python's ``hash()`` to
    SHA-256 for that reason.  The ids are hashed as native int64 bytes (what
    ``array("q", tokens).tobytes()`` gives, packed by a ``struct`` three times faster).
    """
    packer = _PACKERS.get(len(tokens))
    if packer is None:
        packer = _PACKERS[len(tokens)] = struct.Struct(f"{len(tokens)}q")
    try:
        block = packer.pack(*tokens)
    except struct.error:
        token_ids(tokens)  # raises, naming the entry that is not a token id
        raise
    return hashlib.sha256((parent or b"") + block).digest()


_PACKERS: dict[int, struct.Struct] = {}  # block size -> the struct of that many int64 ids


def extend_hashes(hashes: list[bytes], tokens: Sequence[int], block_size: int, stop: int | None = None) -> list[bytes]:
    """Append to ``hashes`` (the chain of the first blocks of ``tokens``) the :func:`block_hash` of each
    further full block of ``tokens[:stop]`` (default: all of it); the ids are converted to bytes once for all."""
    first, last = len(hashes), (len(tokens) if stop is None else stop) // block_size
    if first >= last:
        return hashes
    width = 8 * block_size  # bytes of one block of int64 ids
    data = _int64_bytes(tokens[first * block_size:last * block_size])
    parent = hashes[-1] if hashes else b""
    sha256 = hashlib.sha256
    for offset in range(0, len(data), width):
        parent = sha256(parent + data[offset:offset + width]).digest()
        hashes.append(parent)
    return hashes


def _int64_bytes(ids: Sequence[int]) -> bytes:
    """``ids`` as native int64 bytes; a range of ids by numpy's ``arange``, which makes no Python int per id
    (about 20 times faster than ``array`` on a few hundred ids: a request's own ids come as ranges)."""
    if type(ids) is range and ids.step == 1 and 0 <= ids.start <= ids.stop <= TOKEN_LIMIT:
        return np.arange(ids.start, ids.stop, dtype=np.int64).tobytes()
    return array("q", ids).tobytes()


def token_ids(tokens: Iterable[int], name: str = "tokens") -> list[int]:
    """``tokens`` as a non-empty list of ints in ``[0, 2**63)``; anything else names the offending entry."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of token ids (ints), got {type(tokens).__name__}")
    try:
        ids = tokens if type(tokens) is list else list(tokens)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of token ids (ints), got {tokens!r}") from None
    if not ids:
        raise ValueError(f"{name} must hold at least one token")
    if set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) < TOKEN_LIMIT:
        return ids  # the common case, checked at C speed (a list is returned as it is: no copy)
    ids = list(ids)
    for i, t in enumerate(ids):
        try:
            ids[i] = whole(f"{name}[{i}]", t, 0, TOKEN_LIMIT - 1)
        except TypeError:
            raise TypeError(f"{name}[{i}] must be an int token id, got {t!r}") from None
        except ValueError:
            raise ValueError(f"{name}[{i}] must be a token id in [0, 2**63), got {t}") from None
    return ids
