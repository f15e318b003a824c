"""Turning decoded zTensor v2 part bytes into values: the content rules of the logical types
(Appendix A) and the data rules of the sparse profiles, checked before anything is handed
out.

* ``bool`` bytes must be 0 or 1; an ``f4_e2m1`` part of an odd element count must leave
  its final high nibble zero.
* ``zt.sparse_csr/1``: ``indptr`` starts at 0, never decreases and ends at nnz; within a
  row the column indices strictly increase; every index is below the column count.
* ``zt.sparse_coo/1``: every coordinate is inside the shape and no cell is named twice.
  Coordinates are stored structure-of-arrays, exactly :class:`COOTensor`'s ``(ndim, nnz)``.

Example:
    >>> import numpy as np
    >>> csr = assemble_csr(np.array([1.0, 2.0], np.float32), np.array([2, 0], np.uint64),
    ...                    np.array([0, 1, 2], np.uint64), (2, 3), "m")
    >>> csr.to_dense().tolist()
    [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.catalog import Component
from tensorfile.core.errors import ZTensorError
from tensorfile.formats.ztensor._layouts import COOTensor, CSRTensor, unsorted_row

__all__ = ["assemble_coo", "assemble_csr", "check_logical", "elements"]

NDArray = np.ndarray[Any, Any]


def check_logical(
    comp: Component, data: NDArray, count: int | None, what: str, tensor: str
) -> None:
    """Raise ZTensorError when the decoded bytes ``data`` of a part break its logical
    type's content rule (``count``: the element count, when known)."""
    if comp.logical == "bool" and data.size and int(data.max()) > 1:
        bad = int(np.flatnonzero(data > 1)[0])
        raise ZTensorError(
            f"{what}: byte {bad} of a bool part is 0x{int(data[bad]):02x}; bool bytes are 0 or 1",
            tensor=tensor,
        )
    if comp.logical == "f4_e2m1" and count is not None and count % 2 and data.size:
        if int(data[-1]) & 0xF0:
            raise ZTensorError(
                f"{what}: {count} f4_e2m1 elements leave the last byte's high nibble unused, "
                f"and it must be zero (it is 0x{int(data[-1]) >> 4:x})",
                tensor=tensor,
            )


def elements(comp: Component, data: NDArray, count: int) -> NDArray:
    """The decoded bytes of a part as ``count`` elements of its type (sub-byte types
    unpacked, one element per byte)."""
    dt = comp.dtype
    if dt.is_subbyte:
        return dtypes.unpack(data, dt.bits, count).view(dt.numpy)
    return data.view(dt.numpy)


def _fail(what: str, message: str, tensor: str) -> ZTensorError:
    return ZTensorError(f"{what}: {message}", tensor=tensor)


def assemble_csr(
    values: NDArray,
    indices: NDArray,
    indptr: NDArray,
    shape: tuple[int, ...],
    tensor: str,
    what: str = "",
) -> CSRTensor:
    """A :class:`CSRTensor` from decoded parts, after the profile's data rules."""
    what = what or f"tensor {tensor!r}"
    rows, cols = shape
    nnz = indices.size
    ptr = indptr.astype(np.uint64, copy=False)
    if int(ptr[0]) != 0:
        raise _fail(what, f"indptr starts at {int(ptr[0])}, not 0", tensor)
    if rows and bool(np.any(ptr[1:] < ptr[:-1])):
        raise _fail(what, "indptr decreases", tensor)
    if int(ptr[-1]) != nnz:
        raise _fail(what, f"indptr ends at {int(ptr[-1])}, not at the {nnz} values", tensor)
    idx = indices.astype(np.uint64, copy=False)
    if nnz and int(idx.max()) >= cols:
        raise _fail(
            what, f"column index {int(idx.max())} is out of range for {cols} columns", tensor
        )
    unsorted = unsorted_row(idx, ptr)
    if unsorted is not None:
        raise _fail(
            what, f"the column indices of row {unsorted[0]} do not strictly increase", tensor
        )
    try:
        return CSRTensor(values, idx, ptr, shape)
    except ValueError as exc:  # (an InvalidArgumentError from the constructor's own checks)
        raise _fail(what, str(exc), tensor) from None


def assemble_coo(
    values: NDArray, coords: NDArray, shape: tuple[int, ...], tensor: str, what: str = ""
) -> COOTensor:
    """A :class:`COOTensor` from decoded parts (coordinates structure-of-arrays), after the
    profile's data rules."""
    what = what or f"tensor {tensor!r}"
    ndim = len(shape)
    nnz = coords.size // ndim
    grid = coords.astype(np.uint64, copy=False).reshape(ndim, nnz)
    if nnz:
        top = grid.max(axis=1)
        for d, (high, size) in enumerate(zip(top.tolist(), shape, strict=True)):
            if high >= size:
                raise _fail(
                    what,
                    f"coordinate {high} is out of range for dimension {d} of size {size}",
                    tensor,
                )
        if nnz > 1 and np.unique(grid.T, axis=0).shape[0] != nnz:
            raise _fail(what, "two values have the same coordinates", tensor)
    try:
        return COOTensor(values, grid, shape)
    except ValueError as exc:
        raise _fail(what, str(exc), tensor) from None
