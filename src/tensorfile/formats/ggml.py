"""ggml's quantized block types as float32: what ``get_tensor(name, dequantize=True)`` and
``tensorfile.convert`` do with a GGUF tensor of type Q8_0, Q4_K...

The simple block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are decoded here with numpy; the
others (the K-quants, the IQ types...) with the ``gguf`` package's
``gguf.quants.dequantize`` when it is installed (``pip install gguf``). A type neither
knows is refused with an :class:`~tensorfile.errors.UnsupportedError` that says so.

Example:
    >>> import numpy as np
    >>> block = np.float16(0.5).tobytes() + bytes(range(32))   # d = 0.5, q = 0..31
    >>> dequantize(np.frombuffer(block, np.uint8), "q8_0", (32,), "w")[:4].tolist()
    [0.0, 0.5, 1.0, 1.5]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorfile.core.errors import UnsupportedError

__all__ = ["NUMPY_TYPES", "dequantize"]

NDArray = np.ndarray[Any, Any]
_BLOCK = 32


def _scale(blocks: NDArray, at: int = 0) -> NDArray:
    """The float16 at byte ``at`` of each block, as a float32 column."""
    return blocks[:, at : at + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: NDArray) -> NDArray:
    """16 bytes of packed 4-bit values per block as 32 values: the low nibbles are the
    first 16 elements, the high nibbles the last 16 (ggml's order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int32)


def _high_bits(qh: NDArray) -> NDArray:
    """The fifth bit of each of a block's 32 values (a little-endian uint32 per block)."""
    bits = qh.copy().view("<u4").astype(np.uint32)
    return ((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32) << 4


def _q8_0(b: NDArray) -> NDArray:
    return _scale(b) * b[:, 2:].view(np.int8).astype(np.float32)


def _q4_0(b: NDArray) -> NDArray:
    return _scale(b) * (_nibbles(b[:, 2:]) - 8).astype(np.float32)


def _q4_1(b: NDArray) -> NDArray:
    return _scale(b) * _nibbles(b[:, 4:]).astype(np.float32) + _scale(b, 2)


def _q5_0(b: NDArray) -> NDArray:
    q = _nibbles(b[:, 6:]) | _high_bits(b[:, 2:6])
    return _scale(b) * (q - 16).astype(np.float32)


def _q5_1(b: NDArray) -> NDArray:
    q = _nibbles(b[:, 8:]) | _high_bits(b[:, 4:8])
    return _scale(b) * q.astype(np.float32) + _scale(b, 2)


NUMPY_TYPES: dict[str, tuple[int, Callable[[NDArray], NDArray]]] = {
    "q8_0": (34, _q8_0),
    "q4_0": (18, _q4_0),
    "q4_1": (20, _q4_1),
    "q5_0": (22, _q5_0),
    "q5_1": (24, _q5_1),
}
"""The block types decoded here (blocks of 32 values): bytes per block and the decoder."""


def dequantize(raw: NDArray, type_name: str, shape: tuple[int, ...], name: str) -> NDArray:
    """The float32 values of tensor ``name`` of ggml type ``type_name`` (``"q8_0"``) and
    ``shape`` (numpy's order), from its stored blocks ``raw`` (uint8, as the file holds
    them). See the module docstring for the types decoded."""
    kind = type_name.lower()
    numel = math.prod(shape)
    if numel == 0:
        return np.zeros(shape, np.float32)
    known = NUMPY_TYPES.get(kind)
    if known is not None:
        size, decode = known
        blocks = -(-numel // _BLOCK)
        if raw.size != blocks * size:
            raise UnsupportedError(
                f"tensor {name!r}: {raw.size:,} bytes are not the {blocks:,} {kind.upper()} "
                f"blocks of shape {list(shape)}"
            )
        out = decode(raw.reshape(blocks, size)).reshape(-1)[:numel]
        return np.ascontiguousarray(out, np.float32).reshape(shape)
    return _with_gguf(raw, kind, shape, name)


def _with_gguf(raw: NDArray, kind: str, shape: tuple[int, ...], name: str) -> NDArray:
    """Dequantize with the ``gguf`` package (the types tensorfile does not decode itself)."""
    way = (
        f"tensorfile decodes {', '.join(t.upper() for t in NUMPY_TYPES)} itself; for "
        f"{kind.upper()} install the gguf package (pip install gguf), or use llama.cpp"
    )
    try:
        import gguf
    except ImportError:
        raise UnsupportedError(f"tensor {name!r} is quantized ({kind.upper()}): {way}") from None
    qtype = getattr(gguf.GGMLQuantizationType, kind.upper(), None)
    if qtype is None:
        raise UnsupportedError(f"tensor {name!r}: the gguf package does not know {kind.upper()}")
    rows = shape[:-1] if shape else ()
    try:
        out = gguf.quants.dequantize(raw.reshape(*rows, -1), qtype)
    except (ValueError, NotImplementedError) as exc:
        raise UnsupportedError(
            f"tensor {name!r}: the gguf package cannot dequantize {kind.upper()} ({exc}); "
            "llama.cpp may"
        ) from exc
    return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)
