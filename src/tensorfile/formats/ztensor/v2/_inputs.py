"""What the zTensor v2 writer accepts, turned into parts: dense numpy arrays and torch
tensors of every type v2 has, :class:`CSRTensor`/:class:`COOTensor` (and scipy.sparse and
torch sparse tensors), each as ``(layout id, shape, {part: (dtype, bytes)})``.

Bool arrays are written as bytes 0 and 1 (any other byte numpy holds becomes 1); ml_dtypes
``float4_e2m1fn`` arrays (one element per byte) are packed two to a byte, low nibble first;
sparse tensors must satisfy their profile's data rules (CSR: column indices strictly
increasing within each row; COO: no cell twice, rank 1 or more), which readers check.

Example:
    >>> import numpy as np
    >>> layout, shape, parts, _ = tensor_parts("w", np.ones(3, np.bool_))
    >>> layout, shape, parts["data"][0].name, bytes(parts["data"][1])
    ('dense', (3,), 'BOOL', b'\\x01\\x01\\x01')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorfile.core import _packing, dtypes
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, ZTensorError, ZTensorUnsupportedError
from tensorfile.core.reader import bytes_view
from tensorfile.formats.ztensor._layouts import CSRTensor
from tensorfile.formats.ztensor.v1._inputs import sparse_of
from tensorfile.formats.ztensor.v2._decode import assemble_coo, assemble_csr

__all__ = ["dtype_of", "little", "tensor_parts"]

Parts = dict[str, tuple[DType, memoryview]]


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
        packed = _packing.pack(arr.reshape(-1).view(np.uint8), dt.bits)
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
