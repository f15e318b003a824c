"""Check what the zTensor writers are given: version, options, names, attributes and tensors.

Each function turns one user input into what a writer writes, or raises an error that names
the input; where v1.0 and v2 differ (their compression profile, their digests, what an
attribute may be) the function takes the ``version``. v2 parts: bool arrays are written as
bytes 0 and 1 (any other byte numpy holds becomes 1); ml_dtypes ``float4_e2m1fn`` arrays (one
element per byte) are packed two to a byte, low nibble first; sparse tensors must satisfy
their profile's data rules (CSR: column indices strictly increasing within each row; COO: no
cell twice, rank 1 or more), which readers check.

Example:
    >>> import numpy as np
    >>> dense_array("w", np.zeros((2, 3), np.float32))[:2]
    (DType(F32), (2, 3))
    >>> compression_of(True), compression_of(True, 2), checksum_of("xxh3", 2), align_of(8192)
    ('zstd', 'zt.zstd-seekable/1', 'xxh3', 8192)
    >>> layout, shape, parts, _ = tensor_parts("w", np.ones(3, np.bool_))
    >>> layout, shape, parts["data"][0].name, bytes(parts["data"][1])
    ('dense', (3,), 'BOOL', b'\\x01\\x01\\x01')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import (
    InvalidArgumentError,
    TensorFileError,
    ZTensorError,
    ZTensorUnsupportedError,
)
from tensorfile.core.reader import brief, bytes_view
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor._codecs import CHECKSUMS, MAX_LEVEL, MIN_LEVEL
from tensorfile.formats.ztensor._layouts import COOTensor, CSRTensor
from tensorfile.formats.ztensor.v2._decode import assemble_coo, assemble_csr
from tensorfile.formats.ztensor.v2._format import ALIGN_FLOOR, DIGESTS, check_name

__all__ = [
    "ENCODING",
    "align_of",
    "attributes_of",
    "check_version",
    "checksum_of",
    "compression_of",
    "dense_array",
    "dtype_of",
    "level_of",
    "little",
    "sparse_of",
    "tensor_parts",
    "text_of",
    "ztensor_dtype",
]

ENCODING = "zt.zstd-seekable/1"
"""The compression profile zTensor v2 parts are written in."""

Parts = dict[str, tuple[DType, memoryview]]


def check_version(value: Any) -> int:
    """``value`` when it is a zTensor version tensorfile writes (1 or 2).

    Example:
        >>> check_version(2)
        2
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value not in (1, 2):
        raise InvalidArgumentError(f"version must be 1 (zTensor v1.0) or 2, got {brief(value)}")
    return int(value)


def compression_of(value: Any, version: int = 1) -> str | None:
    """The compression a component is written with: None (raw), ``"zstd"`` for v1.0, the
    seekable profile for v2."""
    # (compared by type first: `in` on an array would compare element-wise)
    if value is None or value is False or (isinstance(value, str) and value in ("raw", "none")):
        return None
    names = ("zstd",) if version == 1 else ("zstd", ENCODING)
    if value is True or (isinstance(value, str) and value in names):
        return "zstd" if version == 1 else ENCODING
    raise ZTensorUnsupportedError(f"unknown compression {brief(value)}; use None or 'zstd'")


def checksum_of(value: Any, version: int = 1) -> str | None:
    """The digest algorithm of a component: v1.0's ``crc32c``/``sha256``, v2's
    ``xxh3``/``sha256`` (a v1.0 digest is refused by name in v2)."""
    if value is None or value is False or (isinstance(value, str) and value == "none"):
        return None
    known = CHECKSUMS if version == 1 else DIGESTS
    if isinstance(value, str) and value in known:
        return value
    if version == 2 and isinstance(value, str) and value == "crc32c":
        raise InvalidArgumentError(
            "checksum 'crc32c' is a zTensor v1.0 digest; zTensor v2 defines 'xxh3' and 'sha256' "
            "(or write version=1)"
        )
    raise ZTensorUnsupportedError(
        f"unknown checksum {brief(value)}; use None, {', '.join(repr(c) for c in known)}"
    )


def level_of(value: Any) -> int:
    """A zstd level: an integer from zstd's fastest (-131072) to its strongest (22)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not MIN_LEVEL <= int(value) <= MAX_LEVEL
    ):
        raise InvalidArgumentError(
            f"zstd level must be an integer from {MIN_LEVEL} to {MAX_LEVEL}, got {brief(value)}"
        )
    return int(value)


MAX_ALIGN = 1 << 30
"""The largest v2 blob alignment accepted (1 GiB)."""


def align_of(value: Any) -> int:
    """A v2 blob alignment: a positive multiple of 4096, at most 1 GiB (a huge page; more
    only pads)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or int(value) <= 0
        or int(value) % ALIGN_FLOOR
        or int(value) > MAX_ALIGN
    ):
        raise InvalidArgumentError(
            f"align must be a positive multiple of {ALIGN_FLOOR} up to {MAX_ALIGN:,} "
            f"(or unset), got {brief(value)}"
        )
    return int(value)


def attributes_of(value: Any, version: int = 1) -> dict[str, Any]:
    """File attributes: v1.0 maps text to text; v2 maps names to any CBOR value."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        what = "map text to text" if version == 1 else "be a mapping"
        raise InvalidArgumentError(f"attributes must {what}, got {type(value).__name__}")
    out = dict(value)
    if version == 1:
        for key, item in out.items():
            if not isinstance(key, str) or not isinstance(item, str):
                raise InvalidArgumentError(
                    f"attribute {brief(key)}: zTensor attributes map text to text, got "
                    f"{type(key).__name__} -> {type(item).__name__}"
                )
            text_of(key, "attribute")
            text_of(item, f"the value of attribute {brief(key)}")
        return out
    for key in out:
        try:
            check_name(key, "attributes", "an attribute key")
        except TensorFileError as exc:
            raise InvalidArgumentError(str(exc)) from None
    try:
        _cbor.encode({"attributes": out}, deterministic=True)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"attributes cannot be written as CBOR: {exc}") from None
    return out


def text_of(value: str, what: str) -> str:
    """``value``, checked to be writable as UTF-8 (no lone surrogates)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{what} {brief(value)} is not valid Unicode: {exc.reason} at position "
                f"{exc.start} (a lone surrogate cannot be written as UTF-8)"
            ) from None
    return value


def ztensor_dtype(name: str, dt: DType) -> DType:
    if dt.ztensor_name is None:
        known = ", ".join(d.ztensor_name for d in dtypes.ALL if d.ztensor_name)
        raise ZTensorUnsupportedError(
            f"tensor {name!r}: {dt.numpy_name} has no zTensor v1.0 dtype (it defines {known})",
            tensor=name,
        )
    return dt


def dense_array(name: str, arr: Any) -> tuple[DType, tuple[int, ...], memoryview, Any]:
    """``(dtype, shape, bytes, keep-alive)`` of a dense numpy array or torch tensor."""
    if type(arr).__module__.startswith("torch"):
        from tensorfile.frameworks.torch import prepare_tensor

        dt, shape, view, keep = prepare_tensor(name, arr)
        return ztensor_dtype(name, dt), shape, view, keep
    a = np.asarray(arr) if isinstance(arr, np.generic) else arr
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError(
            f"tensor {name!r}: expected a numpy array, torch tensor, CSRTensor, COOTensor or "
            f"scipy.sparse matrix, got {type(arr).__name__}"
        )
    try:
        dt = dtypes.from_numpy(a.dtype)
    except (KeyError, TypeError):
        raise ZTensorUnsupportedError(
            f"tensor {name!r}: numpy dtype {a.dtype} has no zTensor equivalent", tensor=name
        ) from None
    ztensor_dtype(name, dt)
    a = little(a)
    return dt, tuple(a.shape), bytes_view(a), a


def sparse_of(name: str, obj: Any) -> CSRTensor | COOTensor | None:
    """The CSR/COO form of a sparse input, or None when ``obj`` is dense."""
    if isinstance(obj, CSRTensor | COOTensor):
        return obj
    module = type(obj).__module__
    if module.startswith("scipy.sparse"):
        fmt = getattr(obj, "format", None)
        if fmt == "csr":
            return CSRTensor.from_scipy(obj)
        if fmt == "coo":
            return COOTensor.from_scipy(obj)
        raise InvalidArgumentError(
            f"tensor {name!r}: scipy.sparse {fmt} matrices are not a zTensor layout; convert "
            "with .tocsr() or .tocoo()"
        )
    if module.startswith("torch"):
        import torch

        if obj.layout == torch.sparse_coo:
            return COOTensor.from_torch(obj)
        if obj.layout == torch.sparse_csr:
            return CSRTensor.from_torch(obj)
        if obj.layout != torch.strided:
            raise InvalidArgumentError(
                f"tensor {name!r}: torch layout {obj.layout} is not a zTensor layout; convert "
                "with .to_sparse_csr() or .to_sparse_coo()"
            )
    return None


def dtype_of(name: str, dtype: Any) -> DType:
    """The tensorfile dtype of a numpy dtype (or name), refused unless zTensor v2 has it."""
    try:
        np_dt = np.dtype(dtype) if not isinstance(dtype, str) else None
        if isinstance(dtype, str):
            dt = dtypes.C128 if dtype in ("C128", "complex128") else dtypes.from_name(dtype)
        elif np_dt is not None and np_dt.name == "complex128":
            dt = dtypes.C128
        else:
            dt = dtypes.from_numpy(np_dt)
    except (KeyError, TypeError):
        raise ZTensorUnsupportedError(
            f"tensor {name!r}: dtype {dtype} has no zTensor v2 type", tensor=name
        ) from None
    if dt.name not in dtypes.ZTENSOR_V2:
        raise ZTensorUnsupportedError(
            f"tensor {name!r}: {dt.numpy_name} has no zTensor v2 type", tensor=name
        )
    return dt


def little(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` little-endian and C-contiguous (copied only when it is not)."""
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
    return arr


def _array_bytes(name: str, arr: np.ndarray[Any, Any]) -> tuple[DType, memoryview, Any]:
    dt = dtype_of(name, arr.dtype)
    arr = little(arr)
    if dt.name == "BOOL":
        raw = arr.view(np.uint8)
        if raw.size and int(raw.max()) > 1:
            raw = (raw != 0).astype(np.uint8)
        return dt, bytes_view(raw), raw
    if dt.is_subbyte:
        packed = dtypes.pack(arr.reshape(-1).view(np.uint8), dt.bits)
        return dt, bytes_view(packed), packed
    return dt, bytes_view(arr), arr


def _torch_dense(name: str, tensor: Any) -> tuple[DType, tuple[int, ...], memoryview, Any]:
    import torch

    if tensor.dtype == torch.complex128:
        arr = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous().numpy()
        dt, view, keep = _array_bytes(name, arr)
        return dt, tuple(arr.shape), view, keep
    from tensorfile.frameworks.torch import prepare_tensor

    dt, shape, view, keep = prepare_tensor(name, tensor)
    return dtype_of(name, dt.name), shape, view, keep


def tensor_parts(name: str, value: Any) -> tuple[str, tuple[int, ...], Parts, list[Any]]:
    """``(layout id, shape, parts, keep-alive)`` of one tensor to write."""
    sparse = sparse_of(name, value)
    if sparse is None:
        if type(value).__module__.startswith("torch"):
            dt, shape, view, keep = _torch_dense(name, value)
            return "dense", shape, {"data": (dt, view)}, [keep]
        arr = np.asarray(value) if isinstance(value, np.generic) else value
        if not isinstance(arr, np.ndarray):
            raise InvalidArgumentError(
                f"tensor {name!r}: expected a numpy array, torch tensor, CSRTensor, COOTensor "
                f"or scipy.sparse matrix, got {type(value).__name__}"
            )
        dt, view, keep = _array_bytes(name, arr)
        return "dense", tuple(arr.shape), {"data": (dt, view)}, [keep]
    index = dtypes.from_name("U64")
    values = sparse.values
    try:
        if isinstance(sparse, CSRTensor):
            assemble_csr(values, sparse.indices, sparse.indptr, sparse.shape, name)
        else:
            if not sparse.shape:
                raise ZTensorError("a zt.sparse_coo/1 tensor has rank 1 or more, this one is 0-D")
            assemble_coo(values, sparse.coords.reshape(-1), sparse.shape, name)
    except ZTensorError as exc:
        raise InvalidArgumentError(
            f"tensor {name!r} cannot be written as a zTensor v2 sparse tensor: {exc}"
        ) from None
    dt, vview, vkeep = _array_bytes(name, np.asarray(values))
    parts: Parts = {"values": (dt, vview)}
    alive: list[Any] = [vkeep]
    arrays = (
        {"indices": sparse.indices, "indptr": sparse.indptr}
        if isinstance(sparse, CSRTensor)
        else {"coords": sparse.coords}
    )
    for role, arr in arrays.items():
        a = little(np.asarray(arr, dtype=np.uint64))
        parts[role] = (index, bytes_view(a))
        alive.append(a)
    layout = "zt.sparse_csr/1" if isinstance(sparse, CSRTensor) else "zt.sparse_coo/1"
    return layout, tuple(sparse.shape), parts, alive
