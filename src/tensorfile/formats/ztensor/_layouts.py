"""The logical layouts of zTensor v1.0: sparse CSR and COO tensors, and extension layouts.

:class:`CSRTensor` and :class:`COOTensor` hold the arrays the file stores (uint64 indices,
COO coordinates as an ``(ndim, nnz)`` matrix, dimension-major). They convert to dense numpy
arrays, to scipy.sparse and to torch sparse tensors, and are built from those. Arrays read
from a file are checked before they are handed out: indices in range, ``indptr`` starting at
0, non-decreasing and ending at the number of values.

Example:
    >>> import numpy as np
    >>> csr = CSRTensor(np.array([1.0, 2.0]), np.array([1, 0]), np.array([0, 1, 2]), (2, 2))
    >>> csr.to_dense().tolist()
    [[0.0, 1.0], [2.0, 0.0]]
    >>> COOTensor.from_dense(np.array([[0, 5], [0, 0]])).coords.tolist()
    [[0], [1]]
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfile.core.errors import InvalidArgumentError, UnsupportedError, ZTensorError
from tensorfile.core.reader import brief
from tensorfile.core.slicing import shape_text

__all__ = [
    "COOTensor",
    "CSRTensor",
    "ExtensionTensor",
    "check_coo",
    "check_csr",
    "shape_of",
    "sorted_csr",
    "unsorted_row",
]

NDArray = np.ndarray[Any, Any]
_MAX_U64 = (1 << 64) - 1


def _zeros(shape: tuple[int, ...], dtype: np.dtype[Any]) -> NDArray:
    """A dense array of zeros, or an UnsupportedError when numpy cannot hold the shape."""
    try:
        return np.zeros(shape, dtype)
    except (ValueError, MemoryError, OverflowError) as exc:
        raise UnsupportedError(
            f"a dense array of shape {shape_text(shape)} cannot be held: {exc}"
        ) from None


def _index_array(values: Any, what: str) -> NDArray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be integers, got {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise InvalidArgumentError(f"{what} must not be negative")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def _torch_values(values: NDArray) -> Any:
    from tensorfile.core import dtypes
    from tensorfile.frameworks.torch import from_numpy

    try:
        dt = dtypes.from_numpy(values.dtype)
    except KeyError:
        raise InvalidArgumentError(f"values of dtype {values.dtype} have no torch type") from None
    return from_numpy(values, dt)


def shape_of(shape: Any, what: str = "a tensor") -> tuple[int, ...]:
    """``shape`` as a tuple of ints: each an integer (numpy's too; never a bool, a float or a
    string) from 0 to 2**64 - 1.

    Example:
        >>> shape_of([2, np.int64(3)])
        (2, 3)
    """
    if isinstance(shape, str | bytes) or not hasattr(shape, "__iter__"):
        raise InvalidArgumentError(
            f"{what}: a shape is a sequence of integers, got {type(shape).__name__}"
        )
    dims = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 0 <= d <= _MAX_U64:
            raise InvalidArgumentError(
                f"{what}: a dimension must be an integer from 0 to 2**64 - 1, got {brief(d)}"
            )
        dims.append(int(d))
    return tuple(dims)


class _Sparse:
    """What CSR and COO tensors share: their values."""

    values: NDArray

    @property
    def dtype(self) -> np.dtype[Any]:
        """The values' dtype."""
        found: np.dtype[Any] = self.values.dtype
        return found

    @property
    def nnz(self) -> int:
        """Number of stored values."""
        return int(self.values.size)


@dataclass(frozen=True, eq=False)
class CSRTensor(_Sparse):
    """A 2-D compressed-sparse-row tensor: ``values``, column ``indices`` (uint64) and row
    pointers ``indptr`` (uint64, ``rows + 1`` of them)."""

    values: NDArray
    indices: NDArray
    indptr: NDArray
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "values", np.ascontiguousarray(np.asarray(self.values).reshape(-1))
        )
        object.__setattr__(self, "indices", _index_array(self.indices, "CSR indices").reshape(-1))
        object.__setattr__(self, "indptr", _index_array(self.indptr, "CSR indptr").reshape(-1))
        object.__setattr__(self, "shape", shape_of(self.shape, "a CSR tensor"))
        try:
            check_csr(self.values, self.indices, self.indptr, self.shape)
        except ZTensorError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def to_dense(self) -> NDArray:
        """The dense 2-D array."""
        rows, cols = self.shape
        out = _zeros((rows, cols), self.values.dtype)
        row_of = np.repeat(np.arange(rows), np.diff(self.indptr.astype(np.int64)).astype(np.int64))
        # a cell named twice (which no reader hands out) is summed, as to_scipy/to_torch do
        np.add.at(out, (row_of, self.indices.astype(np.int64)), self.values)
        return out

    def to_scipy(self) -> Any:
        """A ``scipy.sparse.csr_array`` (indices converted to int64)."""
        import scipy.sparse

        return scipy.sparse.csr_array(
            (self.values, self.indices.astype(np.int64), self.indptr.astype(np.int64)),
            shape=self.shape,
        )

    def to_torch(self) -> Any:
        """A ``torch.sparse_csr_tensor`` (int64 indices)."""
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            return torch.sparse_csr_tensor(
                torch.from_numpy(self.indptr.astype(np.int64)),
                torch.from_numpy(self.indices.astype(np.int64)),
                _torch_values(self.values),
                size=self.shape,
                check_invariants=False,  # check_csr has validated the arrays
            )

    @classmethod
    def from_dense(cls, array: Any) -> CSRTensor:
        """The CSR form of a dense 2-D array (zeros dropped)."""
        arr = np.asarray(array)
        if arr.ndim != 2:
            raise InvalidArgumentError(f"CSR needs a 2-D array, got shape {list(arr.shape)}")
        rows, cols = np.nonzero(arr)
        indptr = np.zeros(arr.shape[0] + 1, np.uint64)
        np.cumsum(np.bincount(rows, minlength=arr.shape[0]), out=indptr[1:])
        return cls(arr[rows, cols], cols, indptr, arr.shape)

    @classmethod
    def from_scipy(cls, matrix: Any) -> CSRTensor:
        """From any scipy.sparse matrix or array (converted to CSR)."""
        m = matrix.tocsr()
        return cls(m.data, m.indices, m.indptr, m.shape)

    @classmethod
    def from_torch(cls, tensor: Any) -> CSRTensor:
        """From a torch sparse CSR tensor."""
        from tensorfile.frameworks.torch import to_numpy

        t = tensor.cpu()
        return cls(
            to_numpy(t.values()),
            t.col_indices().numpy(),
            t.crow_indices().numpy(),
            tuple(t.shape),
        )


@dataclass(frozen=True, eq=False)
class COOTensor(_Sparse):
    """A coordinate-list sparse tensor: ``values`` and ``coords`` of shape ``(ndim, nnz)``
    (uint64; row ``d`` holds every value's index along dimension ``d``)."""

    values: NDArray
    coords: NDArray
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        values = np.ascontiguousarray(np.asarray(self.values).reshape(-1))
        shape = shape_of(self.shape, "a COO tensor")
        coords = _index_array(self.coords, "COO coords")
        if coords.size == 0 or coords.ndim != 2:
            if coords.size != len(shape) * values.size:
                raise InvalidArgumentError(
                    f"a COO tensor of shape {list(shape)} with {values.size} values needs "
                    f"{len(shape)} x {values.size} coordinates, got {coords.size}"
                )
            coords = coords.reshape(len(shape), values.size)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "coords", coords)
        object.__setattr__(self, "shape", shape)
        try:
            check_coo(values, coords, shape)
        except ZTensorError as exc:
            raise InvalidArgumentError(str(exc)) from None

    def to_dense(self) -> NDArray:
        """The dense array (duplicate coordinates are summed, as torch and scipy do)."""
        out = _zeros(self.shape, self.values.dtype)
        if not self.values.size:
            return out
        if not self.shape:
            out[()] = self.values.sum(dtype=self.values.dtype)
            return out
        np.add.at(out, tuple(self.coords.astype(np.int64)), self.values)
        return out

    def to_scipy(self) -> Any:
        """A ``scipy.sparse.coo_array`` (2-D tensors only)."""
        import scipy.sparse

        if len(self.shape) != 2:
            raise InvalidArgumentError(
                f"scipy COO arrays are 2-D; this tensor is {list(self.shape)}"
            )
        rows, cols = self.coords.astype(np.int64)
        return scipy.sparse.coo_array((self.values, (rows, cols)), shape=self.shape)

    def to_torch(self) -> Any:
        """A ``torch.sparse_coo_tensor`` (int64 indices)."""
        import torch

        return torch.sparse_coo_tensor(
            torch.from_numpy(self.coords.astype(np.int64)),
            _torch_values(self.values),
            size=self.shape,
            check_invariants=False,  # check_coo has validated the arrays
        )

    @classmethod
    def from_dense(cls, array: Any) -> COOTensor:
        """The COO form of a dense array (zeros dropped, coordinates in row-major order)."""
        arr = np.asarray(array)
        coords = np.array(np.nonzero(arr), dtype=np.uint64).reshape(arr.ndim, -1)
        return cls(arr[tuple(coords.astype(np.int64))], coords, arr.shape)

    @classmethod
    def from_scipy(cls, matrix: Any) -> COOTensor:
        """From any scipy.sparse matrix or array (converted to COO)."""
        m = matrix.tocoo()
        return cls(m.data, np.vstack([m.row, m.col]), m.shape)

    @classmethod
    def from_torch(cls, tensor: Any) -> COOTensor:
        """From a torch sparse COO tensor (coalesced first)."""
        from tensorfile.frameworks.torch import to_numpy

        t = tensor.cpu().coalesce()
        return cls(to_numpy(t.values()), t.indices().numpy(), tuple(t.shape))


@dataclass(frozen=True, eq=False)
class ExtensionTensor:
    """A tensor whose layout tensorfile does not know (the spec's extension mechanism, e.g.
    ``quantized_4bit``): its declared dtype and shape, and each component as a raw array
    (uint8 unless the role is one the spec types)."""

    layout: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    components: dict[str, NDArray] = field(default_factory=dict)


def check_csr(values: NDArray, indices: NDArray, indptr: NDArray, shape: tuple[int, ...]) -> None:
    """Raise ZTensorError unless the arrays form a valid CSR tensor of ``shape``."""
    if len(shape) != 2:
        raise ZTensorError(f"a CSR tensor must be 2-D, the shape is {list(shape)}")
    rows, cols = shape
    nnz = values.size
    if indptr.size != rows + 1:
        raise ZTensorError(f"CSR indptr has {indptr.size} entries, {rows + 1} expected")
    if indices.size != nnz:
        raise ZTensorError(f"CSR has {nnz} values but {indices.size} column indices")
    if nnz > math.prod(shape):
        raise ZTensorError(f"CSR has {nnz} values, more than the {math.prod(shape)} cells")
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        raise ZTensorError(
            f"CSR indptr must run from 0 to the {nnz} values, it runs from {int(indptr[0])} "
            f"to {int(indptr[-1])}"
        )
    if rows and bool(np.any(indptr[1:] < indptr[:-1])):
        raise ZTensorError("CSR indptr decreases")
    if nnz and int(indices.max()) >= cols:
        raise ZTensorError(
            f"CSR column index {int(indices.max())} is out of range for {cols} columns"
        )


def unsorted_row(indices: NDArray, indptr: NDArray) -> tuple[int, int] | None:
    """``(row, position)`` of the first value whose column index is not above the one
    before it in the same row (``indptr`` valid, as :func:`check_csr` checks), or None when
    every row's column indices strictly increase.

    Example:
        >>> unsorted_row(np.array([0, 2, 1]), np.array([0, 1, 3]))
        (1, 2)
    """
    nnz = indices.size
    if nnz < 2:
        return None
    # a step that is not an increase is allowed only where a row starts
    steps = np.flatnonzero(indices[1:] <= indices[:-1]) + 1
    if not steps.size:
        return None
    starts = np.zeros(nnz + 1, bool)
    starts[indptr[1:-1].astype(np.int64)] = True
    inside = steps[~starts[steps]]
    if not inside.size:
        return None
    at = int(inside[0])
    return int(np.searchsorted(indptr, at, side="right")) - 1, at


def sorted_csr(values: NDArray, indices: NDArray, indptr: NDArray) -> tuple[NDArray, NDArray]:
    """``(values, indices)`` of a CSR tensor (arrays valid, as :func:`check_csr` checks)
    with each row's column indices in increasing order (the arrays themselves when they
    already are); a ZTensorError naming the row when a row names a column twice.

    zTensor v1.0 does not require sorted rows (its reference writes what it is given), but
    a cell stored twice is read as the sum by the reference, torch and scipy and as one of
    the values by a plain assignment, so no reading of it is the file's: it is refused.

    Example:
        >>> v, i = sorted_csr(np.array([1.0, 2.0]), np.array([3, 1]), np.array([0, 2]))
        >>> v.tolist(), i.tolist()
        ([2.0, 1.0], [1, 3])
    """
    if unsorted_row(indices, indptr) is None:
        return values, indices
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr.astype(np.int64)).astype(np.int64))
    order = np.lexsort((indices, rows))
    values, indices = values[order], indices[order]
    repeat = unsorted_row(indices, indptr)
    if repeat is not None:
        row, at = repeat
        raise ZTensorError(f"row {row} holds column {int(indices[at])} more than once")
    return values, indices


def check_coo(values: NDArray, coords: NDArray, shape: tuple[int, ...]) -> None:
    """Raise ZTensorError unless the arrays form a valid COO tensor of ``shape``."""
    nnz = values.size
    ndim = len(shape)
    if coords.shape != (ndim, nnz):
        raise ZTensorError(
            f"COO coords have shape {list(coords.shape)}, [{ndim}, {nnz}] expected for "
            f"{nnz} values of a {ndim}-D tensor"
        )
    if nnz and ndim:
        highest = coords.max(axis=1)
        for d, (top, size) in enumerate(zip(highest.tolist(), shape, strict=True)):
            if top >= size:
                raise ZTensorError(
                    f"COO coordinate {top} is out of range for dimension {d} of size {size}"
                )
    elif nnz > 1 and ndim == 0:
        raise ZTensorError(f"a 0-D COO tensor holds at most one value, this one has {nnz}")
