"""ggml's tensor types: the table of type ids with their block sizes (:data:`GGML_TYPES`,
which GGUF headers and ztensor's GGUF conversions name), and the quantized block types as
float32: what ``get_tensor(name, dequantize=True)`` and ``tensorfile.convert`` do with a GGUF
tensor of type Q8_0, Q4_K...

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

from tensorfile.core import dtypes
from tensorfile.core.errors import UnsupportedError
from tensorfile.core.extras import require

__all__ = [
    "DEQUANTIZED",
    "GGML_TYPES",
    "NUMPY_TYPES",
    "PLAIN_TYPES",
    "block_type",
    "dequantize",
    "layout_bytes",
]

# ggml type id: (name, block size in elements, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    9: ("q8_1", 32, 36),
    10: ("q2_k", 256, 84),
    11: ("q3_k", 256, 110),
    12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176),
    14: ("q6_k", 256, 210),
    15: ("q8_k", 256, 292),
    16: ("iq2_xxs", 256, 66),
    17: ("iq2_xs", 256, 74),
    18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50),
    20: ("iq4_nl", 32, 18),
    21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82),
    23: ("iq4_xs", 256, 136),
    24: ("i8", 1, 1),
    25: ("i16", 1, 2),
    26: ("i32", 1, 4),
    27: ("i64", 1, 8),
    28: ("f64", 1, 8),
    29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2),
    34: ("tq1_0", 256, 54),
    35: ("tq2_0", 256, 66),
    39: ("mxfp4", 32, 17),
}

PLAIN_TYPES: dict[str, str] = {
    "f32": "F32",
    "f16": "F16",
    "bf16": "BF16",
    "f64": "F64",
    "i8": "I8",
    "i16": "I16",
    "i32": "I32",
    "i64": "I64",
}
"""The ggml types that are plain element types, with tensorfile's name for each; the others
are quantized blocks (read as bytes)."""


def block_type(layout: str, shape: tuple[int, ...], nbytes: int) -> str | None:
    """The ggml block type (``"q8_0"``) of a zTensor v2 object of layout ``layout`` that
    ztensor's GGUF conversion writes (``"gguf.q8_0/1"``: the blocks as stored, in one ``u8``
    part of ``nbytes`` bytes, ``shape`` in elements and numpy's order), when ``shape`` and
    ``nbytes`` fit the type's blocks; None for any other layout.

    Example:
        >>> block_type("gguf.q8_0/1", (2, 32), 68), block_type("gguf.q8_0/1", (2, 32), 64)
        ('q8_0', None)
    """
    name = layout[5:-2] if layout.startswith("gguf.") and layout.endswith("/1") else ""
    if name in PLAIN_TYPES or layout_bytes(layout, shape) != nbytes:
        return None
    return name


def layout_bytes(layout: str, shape: tuple[int, ...]) -> int | None:
    """The bytes a zTensor v2 object of layout ``gguf.<type>/1`` and ``shape`` (elements,
    numpy's order) holds when it is what it says: whole blocks of the ggml type, its rows
    whole blocks (a block type has at least one dimension, as in ggml); -1 when no such
    object can be (a shape that is not whole blocks); None for a layout that names no
    ggml type (an extension layout tensorfile cannot size).

    Example:
        >>> layout_bytes("gguf.q8_0/1", (2, 32)), layout_bytes("gguf.q8_0/1", ())
        (68, -1)
        >>> layout_bytes("quantized_4bit", (2, 32)) is None
        True
    """
    if not layout.startswith("gguf.") or not layout.endswith("/1"):
        return None
    name = layout[5:-2]
    for type_name, block, size in GGML_TYPES.values():
        if type_name == name:
            if block > 1 and (not shape or shape[-1] % block):
                return -1
            return -(-math.prod(shape) // block) * size
    return None


DEQUANTIZED = dtypes.from_name("F32")
"""The dtype a quantized tensor is dequantized to (``convert`` writes it, ``inspect`` quotes
its size)."""

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
    if layout_bytes(f"gguf.{kind}/1", shape) == -1:  # (a GGUF reader refuses such a shape)
        raise UnsupportedError(
            f"tensor {name!r}: shape {list(shape)} is not rows of whole {kind.upper()} blocks"
        )
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
        with np.errstate(all="ignore"):  # garbage blocks: inf and NaN, as ggml gives them
            out = decode(raw.reshape(blocks, size)).reshape(-1)[:numel]
        return np.ascontiguousarray(out, np.float32).reshape(shape)
    return _with_gguf(raw, kind, shape, name)


def _with_gguf(raw: NDArray, kind: str, shape: tuple[int, ...], name: str) -> NDArray:
    """Dequantize with the ``gguf`` package (the types tensorfile does not decode itself)."""
    what = (
        f"tensor {name!r} is quantized ({kind.upper()}): tensorfile decodes "
        f"{', '.join(t.upper() for t in NUMPY_TYPES)} itself; dequantizing {kind.upper()} "
        "(or use llama.cpp)"
    )
    gguf = require("gguf", what, package="gguf")  # (installed but broken: it says so)
    qtype = getattr(gguf.GGMLQuantizationType, kind.upper(), None)
    if qtype is None:
        raise UnsupportedError(f"tensor {name!r}: the gguf package does not know {kind.upper()}")
    rows = shape[:-1] if shape else ()
    try:
        with np.errstate(all="ignore"):  # garbage blocks: inf and NaN, as ggml gives them
            out = gguf.quants.dequantize(raw.reshape(*rows, -1), qtype)
        return np.ascontiguousarray(out, dtype=np.float32).reshape(shape)
    except Exception as exc:  # (the package's own failures: ValueError, TypeError, ...)
        raise UnsupportedError(
            f"tensor {name!r}: the gguf package cannot dequantize {kind.upper()} of shape "
            f"{list(shape)} ({type(exc).__name__}: {exc}); llama.cpp may"
        ) from exc
