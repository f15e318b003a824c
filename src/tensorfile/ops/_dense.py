"""Tensors of any layout as plain values, for the operations that compare or hash data.

A sparse tensor is never densified whole: :func:`dense_chunks` yields its dense values a
bounded piece at a time (CSR by rows, COO by sorted runs of coordinates), and
:func:`check_densifiable` refuses one whose dense form is over :data:`MAX_DENSE_BYTES`
before any of it is read, since that size is only what the file claims (a 300-byte file
can declare a 4 TiB matrix).

Example:
    >>> import numpy as np
    >>> dense_value(np.arange(3)).tolist()
    [0, 1, 2]
    >>> from tensorfile.ztensor import CSRTensor
    >>> csr = CSRTensor(np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 1, 2]), (2, 2))
    >>> [c.tolist() for c in dense_chunks(csr, 3)]
    [[0.0, 1.0, 2.0], [0.0]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.catalog import TensorInfo
from ..core.errors import UnsupportedError

__all__ = [
    "CHUNK_BYTES",
    "MAX_DENSE_BYTES",
    "check_densifiable",
    "components",
    "dense_chunks",
    "dense_value",
    "is_extension",
]

NDArray = np.ndarray[Any, Any]

MAX_DENSE_BYTES = 1 << 34
"""The largest dense form (16 GiB) of a sparse tensor that ``content_hash`` and ``diff(...,
data=True)`` stream; a larger one is refused up front (its size is only a claim, and
streaming it would take minutes per declared terabyte)."""

CHUNK_BYTES = 16 << 20
"""Bytes of dense values held at a time when a sparse tensor is streamed."""

_SPARSE = ("sparse_csr", "sparse_coo")


def check_densifiable(info: TensorInfo, where: str, limit: int = MAX_DENSE_BYTES) -> None:
    """Raise :class:`UnsupportedError` when ``info`` is a sparse tensor whose dense form is
    over ``limit`` bytes.

    Example:
        >>> from tensorfile.core.catalog import TensorInfo
        >>> from tensorfile.core import dtypes
        >>> big = TensorInfo("s", dtypes.from_name("F32"), (1 << 20, 1 << 20), {},
        ...                  layout="sparse_csr")
        >>> check_densifiable(big, "m.zt")
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.UnsupportedError: m.zt: tensor 's' is sparse_csr of shape \
[1048576, 1048576]: its dense form is 4,398,046,511,104 bytes, over tensorfile's \
17,179,869,184-byte limit for comparing or hashing a sparse tensor's values
    """
    if info.layout not in _SPARSE:
        return
    size = info.dtype.nbytes(math.prod(info.shape))
    if size > limit:
        raise UnsupportedError(
            f"{where}: tensor {info.name!r} is {info.layout} of shape {list(info.shape)}: its "
            f"dense form is {size:,} bytes, over tensorfile's {limit:,}-byte limit for "
            "comparing or hashing a sparse tensor's values"
        )


def dense_value(value: Any) -> NDArray | dict[str, NDArray]:
    """A reader's tensor as a dense array (sparse tensors densified whole: small ones
    only), or, for a layout tensorfile does not know, its components by role, sorted."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "to_dense"):
        return np.asarray(value.to_dense())
    return components(value)


def components(value: Any) -> dict[str, NDArray]:
    """The components of an extension-layout tensor, by role, sorted."""
    return {role: np.asarray(value.components[role]) for role in sorted(value.components)}


def is_extension(value: Any) -> bool:
    """Whether ``value`` is a tensor of a layout tensorfile does not know (its components
    are all there is)."""
    return not isinstance(value, np.ndarray) and not hasattr(value, "to_dense")


def dense_chunks(value: Any, elements: int) -> Iterator[NDArray]:
    """The dense values of ``value`` (a numpy array, a CSR or a COO tensor), row-major, as
    flat arrays of ``elements`` elements each (the last one shorter); at most one piece is
    held at a time besides the sparse arrays themselves."""
    elements = max(1, elements)
    if isinstance(value, np.ndarray):
        flat = np.ascontiguousarray(value).reshape(-1)
        for lo in range(0, flat.size, elements):
            yield flat[lo : lo + elements]
        return
    if hasattr(value, "indptr"):
        yield from _csr_chunks(value, elements)
    elif hasattr(value, "coords"):
        yield from _coo_chunks(value, elements)
    else:
        raise UnsupportedError(f"cannot stream the values of a {type(value).__name__}")


def _csr_chunks(csr: Any, elements: int) -> Iterator[NDArray]:
    rows, cols = csr.shape
    total = rows * cols
    indptr = csr.indptr.astype(np.int64)
    indices = csr.indices.astype(np.int64)
    for lo in range(0, total, elements):
        hi = min(total, lo + elements)
        out = np.zeros(hi - lo, csr.values.dtype)
        first, last = lo // cols, -(-hi // cols)  # the rows this piece touches
        a, b = int(indptr[first]), int(indptr[last])
        if b > a:
            counts = np.diff(indptr[first : last + 1])
            where = np.repeat(np.arange(first, last, dtype=np.int64), counts) * cols
            where += indices[a:b]
            keep = (where >= lo) & (where < hi)
            np.add.at(out, where[keep] - lo, csr.values[a:b][keep])  # as to_dense: summed
        yield out


def _coo_chunks(coo: Any, elements: int) -> Iterator[NDArray]:
    shape = tuple(coo.shape)
    if not shape:  # a 0-D tensor: one value at most
        yield np.asarray(coo.to_dense()).reshape(-1)
        return
    total = math.prod(shape)
    if total == 0:
        return
    flat = np.ravel_multi_index(tuple(coo.coords.astype(np.intp)), shape)
    order = np.argsort(flat, kind="stable")  # duplicates keep their order: the same sums
    flat, values = flat[order], coo.values[order]
    for lo in range(0, total, elements):
        hi = min(total, lo + elements)
        out = np.zeros(hi - lo, coo.values.dtype)
        a, b = np.searchsorted(flat, [lo, hi])
        if b > a:
            np.add.at(out, flat[a:b] - lo, values[a:b])  # as to_dense: duplicates summed
        yield out
