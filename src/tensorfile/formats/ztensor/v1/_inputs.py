"""Check what a zTensor v1.0 writer is given: options, names and tensors.

Each function turns one user input into what :class:`~tensorfile.formats.ztensor.v1._writer.Writer`
writes, or raises an error that names the input.

Example:
    >>> import numpy as np
    >>> dense_array("w", np.zeros((2, 3), np.float32))[:2]
    (DType(F32), (2, 3))
    >>> compression_of(True)
    'zstd'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, ZTensorUnsupportedError
from tensorfile.core.reader import brief, bytes_view
from tensorfile.formats.ztensor._codecs import CHECKSUMS, MAX_LEVEL, MIN_LEVEL
from tensorfile.formats.ztensor._layouts import COOTensor, CSRTensor

__all__ = [
    "checksum_of",
    "compression_of",
    "dense_array",
    "level_of",
    "sparse_of",
    "text_of",
    "ztensor_dtype",
]


def compression_of(value: Any) -> str | None:
    # (compared by type first: `in` on an array would compare element-wise)
    if value is None or value is False or (isinstance(value, str) and value in ("raw", "none")):
        return None
    if value is True or (isinstance(value, str) and value == "zstd"):
        return "zstd"
    raise ZTensorUnsupportedError(f"unknown compression {brief(value)}; use None or 'zstd'")


def checksum_of(value: Any) -> str | None:
    if value is None or value is False or (isinstance(value, str) and value == "none"):
        return None
    if isinstance(value, str) and value in CHECKSUMS:
        return value
    raise ZTensorUnsupportedError(
        f"unknown checksum {brief(value)}; use None, {', '.join(repr(c) for c in CHECKSUMS)}"
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
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
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
