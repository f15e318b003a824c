"""Bit-packing of the sub-byte dtypes (F4, F6_E2M3, F6_E3M2).

In a file, F4 packs two 4-bit codes per byte (the first element in the low nibble, as
torch's ``float4_e2m1fn_x2`` does) and F6 packs four 6-bit codes into three bytes (element
``i`` of a group in bits ``6i..6i+5`` of the group's little-endian 24-bit word). In numpy
each element is one byte of the matching ``ml_dtypes`` type, its code in the low bits.

Example:
    >>> import numpy as np
    >>> codes = np.array([1, 2, 3, 4], np.uint8)
    >>> pack(codes, 4).tolist()
    [33, 67]
    >>> unpack(pack(codes, 4), 4, 4).tolist()
    [1, 2, 3, 4]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["pack", "unpack"]

U8 = np.ndarray[Any, np.dtype[np.uint8]]


def unpack(packed: U8, bits: int, numel: int) -> U8:
    """Unpack ``numel`` codes of ``bits`` (4 or 6) bits each from ``packed`` bytes."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8).reshape(-1)
    if bits == 4:
        out = np.empty(packed.size * 2, np.uint8)
        out[0::2] = packed & 0x0F
        out[1::2] = packed >> 4
        return out[:numel]
    if bits == 6:
        groups = packed[: packed.size // 3 * 3].reshape(-1, 3).astype(np.uint32)
        word = groups[:, 0] | (groups[:, 1] << 8) | (groups[:, 2] << 16)
        out = np.empty((groups.shape[0], 4), np.uint8)
        for i in range(4):
            out[:, i] = (word >> (6 * i)) & 0x3F
        return out.reshape(-1)[:numel]
    raise ValueError(f"no packing for {bits}-bit codes")


def pack(codes: U8, bits: int) -> U8:
    """Pack one-byte ``codes`` into ``bits``-bit fields (the inverse of :func:`unpack`)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    if bits == 4:
        if codes.size % 2:
            codes = np.append(codes, np.uint8(0))
        return ((codes[0::2] & 0x0F) | ((codes[1::2] & 0x0F) << 4)).astype(np.uint8)
    if bits == 6:
        if codes.size % 4:
            codes = np.append(codes, np.zeros(4 - codes.size % 4, np.uint8))
        c = (codes.reshape(-1, 4) & 0x3F).astype(np.uint32)
        word = c[:, 0] | (c[:, 1] << 6) | (c[:, 2] << 12) | (c[:, 3] << 18)
        out = np.empty((c.shape[0], 3), np.uint8)
        for i in range(3):
            out[:, i] = (word >> (8 * i)) & 0xFF
        return out.reshape(-1)
    raise ValueError(f"no packing for {bits}-bit codes")
