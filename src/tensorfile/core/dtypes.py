"""The one dtype table: every element type tensorfile knows, in every vocabulary.

Each :class:`DType` row carries its width in bits, its safetensors name, its numpy (or
``ml_dtypes``) name, its torch name and its zTensor name. Every format reader, writer and
framework bridge looks types up here; no other module keeps a table of its own.

The rows are listed in the order of the reference safetensors ``Dtype`` enumeration; the
writer sorts tensors by that order, descending, so that the widest types come first.

Sub-byte types (F4, F6_E2M3, F6_E3M2) are bit-packed in files; in numpy they unpack to one
``ml_dtypes`` element per byte (see :func:`pack` and :func:`unpack`).

Example:
    >>> from tensorfile.core import dtypes
    >>> dt = dtypes.from_safetensors("BF16")
    >>> dt.bits, dt.numpy_name, dt.ztensor_name
    (16, 'bfloat16', 'bfloat16')
    >>> dtypes.from_numpy("float32").name
    'F32'
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = [
    "ALL",
    "DType",
    "from_numpy",
    "from_safetensors",
    "from_torch",
    "from_ztensor",
    "numpy_dtype",
    "pack",
    "unpack",
]


@dataclass(frozen=True, slots=True)
class DType:
    """One element type.

    Attributes:
        name: the safetensors name (``"F32"``); tensorfile's canonical name.
        bits: width of one element in bits (4 and 6 for the bit-packed types).
        kind: ``"bool"``, ``"uint"``, ``"int"``, ``"float"`` or ``"complex"``.
        order: position in the reference safetensors enumeration (the writer's sort key).
        numpy_name: the numpy or ``ml_dtypes`` dtype name.
        torch_name: the ``torch`` attribute name, or ``None`` when torch has no such type.
        ztensor_name: the zTensor v1.0 name, or ``None`` when zTensor has no such type.
    """

    name: str
    bits: int
    kind: str
    order: int
    numpy_name: str
    torch_name: str | None
    ztensor_name: str | None

    @property
    def is_subbyte(self) -> bool:
        """True for the bit-packed types (F4, F6_*)."""
        return self.bits < 8

    @property
    def itemsize(self) -> int:
        """Bytes per element in a numpy array (1 for the unpacked sub-byte types)."""
        return max(self.bits // 8, 1)

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype (little-endian)."""
        return numpy_dtype(self)

    def nbytes(self, numel: int) -> int:
        """Bytes that ``numel`` elements take in a file (bit-packed for sub-byte types)."""
        return (numel * self.bits + 7) // 8

    def __repr__(self) -> str:
        return f"DType({self.name})"


_ROWS: tuple[tuple[str, int, str, str, str | None, str | None], ...] = (
    # name, bits, kind, numpy name, torch name, zTensor name
    ("BOOL", 8, "bool", "bool", "bool", "bool"),
    ("F4", 4, "float", "float4_e2m1fn", "float4_e2m1fn_x2", None),
    ("F6_E2M3", 6, "float", "float6_e2m3fn", None, None),
    ("F6_E3M2", 6, "float", "float6_e3m2fn", None, None),
    ("U8", 8, "uint", "uint8", "uint8", "uint8"),
    ("I8", 8, "int", "int8", "int8", "int8"),
    ("F8_E5M2", 8, "float", "float8_e5m2", "float8_e5m2", None),
    ("F8_E4M3", 8, "float", "float8_e4m3fn", "float8_e4m3fn", None),
    ("F8_E8M0", 8, "float", "float8_e8m0fnu", "float8_e8m0fnu", None),
    ("F8_E4M3FNUZ", 8, "float", "float8_e4m3fnuz", "float8_e4m3fnuz", None),
    ("F8_E5M2FNUZ", 8, "float", "float8_e5m2fnuz", "float8_e5m2fnuz", None),
    ("I16", 16, "int", "int16", "int16", "int16"),
    ("U16", 16, "uint", "uint16", "uint16", "uint16"),
    ("F16", 16, "float", "float16", "float16", "float16"),
    ("BF16", 16, "float", "bfloat16", "bfloat16", "bfloat16"),
    ("I32", 32, "int", "int32", "int32", "int32"),
    ("U32", 32, "uint", "uint32", "uint32", "uint32"),
    ("F32", 32, "float", "float32", "float32", "float32"),
    ("C64", 64, "complex", "complex64", "complex64", None),
    ("F64", 64, "float", "float64", "float64", "float64"),
    ("I64", 64, "int", "int64", "int64", "int64"),
    ("U64", 64, "uint", "uint64", "uint64", "uint64"),
)

ALL: tuple[DType, ...] = tuple(
    DType(r[0], r[1], r[2], i, r[3], r[4], r[5]) for i, r in enumerate(_ROWS)
)
"""Every dtype, in the reference enumeration's order."""

_BY_NAME: dict[str, DType] = {d.name: d for d in ALL}
_BY_NUMPY: dict[str, DType] = {d.numpy_name: d for d in ALL}
_BY_TORCH: dict[str, DType] = {d.torch_name: d for d in ALL if d.torch_name}
_BY_ZTENSOR: dict[str, DType] = {d.ztensor_name: d for d in ALL if d.ztensor_name}

SAFETENSORS_NAMES: frozenset[str] = frozenset(_BY_NAME)
"""The dtype names a safetensors header may use."""


def from_safetensors(name: str) -> DType:
    """The dtype a safetensors header calls ``name``; ``KeyError`` when there is none.

    Example:
        >>> from_safetensors("F8_E4M3").numpy_name
        'float8_e4m3fn'
    """
    return _BY_NAME[name]


def from_ztensor(name: str) -> DType:
    """The dtype a zTensor manifest calls ``name``; ``KeyError`` when there is none.

    Example:
        >>> from_ztensor("bfloat16").name
        'BF16'
    """
    return _BY_ZTENSOR[name]


def from_numpy(dtype: Any) -> DType:
    """The dtype of a numpy dtype (or anything ``np.dtype`` accepts); ``KeyError`` if unknown.

    Byte order is ignored here: callers convert big-endian arrays themselves.

    Example:
        >>> import numpy as np
        >>> from_numpy(np.int16).name
        'I16'
    """
    dt = np.dtype(dtype)
    return _BY_NUMPY[dt.name]


def from_torch(dtype: torch.dtype) -> DType:
    """The dtype of a ``torch.dtype``; ``KeyError`` if tensorfile has no such type.

    Example:
        >>> import torch
        >>> from_torch(torch.bfloat16).name
        'BF16'
    """
    return _BY_TORCH[str(dtype).rpartition(".")[2]]


def from_torch_name(name: str) -> DType:
    """The dtype torch calls ``name`` (``torch.float8_e4m3fn`` without ``torch.``);
    ``KeyError`` if tensorfile has no such type.

    Example:
        >>> from_torch_name("bfloat16").name
        'BF16'
    """
    return _BY_TORCH[name]


def from_name(name: str) -> DType:
    """Look a dtype up by any of its names: safetensors, numpy, torch, zTensor v1.0 or v2
    (a v2 logical type such as ``f8_e4m3fn``, or a v2 storage type such as ``f32``).

    Example:
        >>> from_name("float16").name, from_name("F16").name, from_name("f8_e4m3fn").name
        ('F16', 'F16', 'F8_E4M3')
    """
    for table in (_BY_NAME, _BY_NUMPY, _BY_TORCH, _BY_ZTENSOR):
        if name in table:
            return table[name]
    found = _by_ztensor_v2_name().get(name)
    if found is None:
        raise KeyError(name)
    return found


@functools.cache
def _by_ztensor_v2_name() -> dict[str, DType]:
    """zTensor v2's type names (the logical type where a part has one, else the storage
    type): the names a v2 catalog gives its tensors."""
    return {
        logical or storage: dt
        for (storage, logical), dt in _BY_ZTENSOR_V2.items()
        if _BY_NAME.get(dt.name) is dt  # not complex128: no file format but v2 holds it
    }


@functools.cache
def numpy_dtype(dt: DType) -> np.dtype[Any]:
    """The little-endian numpy dtype of ``dt`` (``ml_dtypes`` for bf16, f8, f6, f4).

    Example:
        >>> numpy_dtype(from_safetensors("F32"))
        dtype('float32')
    """
    if hasattr(np, dt.numpy_name) and dt.numpy_name != "bool":
        native = np.dtype(dt.numpy_name)
        return native if sys.byteorder == "little" else native.newbyteorder("<")
    if dt.numpy_name == "bool":
        return np.dtype(np.bool_)
    import ml_dtypes

    found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, dt.numpy_name))
    return found


C128 = DType("C128", 128, "complex", len(_ROWS), "complex128", "complex128", None)
"""complex128: a type of zTensor v2 (``f64`` storage, logical type ``complex128``) that
safetensors and zTensor v1.0 lack, so it is not in :data:`ALL` (which is the safetensors
enumeration): nothing but the zTensor v2 reader and writer ever hands it out."""

ZTENSOR_V2: dict[str, tuple[str, str | None]] = {
    "BOOL": ("u8", "bool"),
    "F4": ("u8", "f4_e2m1"),
    "U8": ("u8", None),
    "I8": ("i8", None),
    "F8_E5M2": ("u8", "f8_e5m2"),
    "F8_E4M3": ("u8", "f8_e4m3fn"),
    "F8_E8M0": ("u8", "f8_e8m0"),
    "F8_E4M3FNUZ": ("u8", "f8_e4m3fnuz"),
    "F8_E5M2FNUZ": ("u8", "f8_e5m2fnuz"),
    "I16": ("i16", None),
    "U16": ("u16", None),
    "F16": ("f16", None),
    "BF16": ("bf16", None),
    "I32": ("i32", None),
    "U32": ("u32", None),
    "F32": ("f32", None),
    "C64": ("f32", "complex64"),
    "F64": ("f64", None),
    "I64": ("i64", None),
    "U64": ("u64", None),
    "C128": ("f64", "complex128"),
}
"""zTensor v2's name of each dtype it has: ``(storage dtype, logical type or None)``, by
tensorfile name (F6_E2M3 and F6_E3M2 have none)."""

_BY_ZTENSOR_V2: dict[tuple[str, str | None], DType] = {
    names: (C128 if name == "C128" else _BY_NAME[name]) for name, names in ZTENSOR_V2.items()
}


def from_ztensor_v2(dtype: str, logical: str | None = None) -> DType:
    """The dtype of a zTensor v2 part of storage type ``dtype`` and logical type
    ``logical``; ``KeyError`` when the pair names none.

    Example:
        >>> from_ztensor_v2("u8", "f8_e4m3fn").name, from_ztensor_v2("f64", "complex128").name
        ('F8_E4M3', 'C128')
    """
    return _BY_ZTENSOR_V2[(dtype, logical)]


def names(dt: DType) -> frozenset[str]:
    """Every name of ``dt``: tensorfile's, numpy's, torch's, zTensor v1.0's and v2's (the
    logical type, or the storage type of a type without one).

    Example:
        >>> sorted(names(from_safetensors("BF16")))
        ['BF16', 'bf16', 'bfloat16']
    """
    return _names(dt)


@functools.cache
def _names(dt: DType) -> frozenset[str]:
    storage, logical = ZTENSOR_V2.get(dt.name, (None, None))
    found = (dt.name, dt.numpy_name, dt.torch_name, dt.ztensor_name, logical or storage)
    return frozenset(n for n in found if n is not None)


def is_ztensor_v2_type(dt: DType, logical: str | None) -> bool:
    """Whether a zTensor v2 part of element type ``dt`` and logical type ``logical`` is one
    the specification registered (``logical`` the registered type of ``dt``, or None for a
    type without one): False for a logical type tensorfile does not know, whose part it
    holds as its storage type.

    Example:
        >>> u8 = from_safetensors("U8")
        >>> is_ztensor_v2_type(from_safetensors("BOOL"), "bool"), is_ztensor_v2_type(u8, "u8")
        (True, False)
    """
    return dt.name in ZTENSOR_V2 and ZTENSOR_V2[dt.name][1] == logical


def ztensor_v2_names(dt: DType) -> tuple[str, str | None]:
    """``(storage dtype, logical type)`` of ``dt`` in zTensor v2; ``KeyError`` if none.

    Example:
        >>> ztensor_v2_names(from_safetensors("BOOL"))
        ('u8', 'bool')
    """
    return ZTENSOR_V2[dt.name]


# Bit-packing of the sub-byte dtypes (F4, F6_E2M3, F6_E3M2).
#
# In a file, F4 packs two 4-bit codes per byte (the first element in the low nibble, as
# torch's ``float4_e2m1fn_x2`` does) and F6 packs four 6-bit codes into three bytes (element
# ``i`` of a group in bits ``6i..6i+5`` of the group's little-endian 24-bit word). In numpy
# each element is one byte of the matching ``ml_dtypes`` type, its code in the low bits.

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
    """Pack one-byte ``codes`` into ``bits``-bit fields (the inverse of :func:`unpack`).

    Example:
        >>> codes = np.array([1, 2, 3, 4], np.uint8)
        >>> pack(codes, 4).tolist(), unpack(pack(codes, 4), 4, 4).tolist()
        ([33, 67], [1, 2, 3, 4])
    """
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
