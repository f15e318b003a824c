"""The torch bridge: dtypes, in-place reads into torch tensors, and tensors to write.

Only this module, :mod:`.torch_stream` (tensors to an accelerator through a ring of pinned
host buffers) and ``tensorfile.safetensors.torch`` import torch. F4 tensors are torch
``float4_e2m1fn_x2`` tensors with half the last dimension: the rule is :func:`f4_shape`
(also importable from :mod:`tensorfile.frameworks`, without torch).

Example:
    >>> import torch
    >>> from tensorfile.core import dtypes
    >>> dt, shape, data, _ = prepare_tensor("w", torch.ones(2, 3, dtype=torch.bfloat16))
    >>> dt.name, shape, data.nbytes, torch_dtype(dt)
    ('BF16', (2, 3), 12, torch.bfloat16)
    >>> f4_shape(dtypes.from_safetensors("F4"), (2, 8), to="torch")
    (2, 4)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core import dtypes
from ..core.catalog import TensorInfo
from ..core.dtypes import DType
from ..core.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    UnsavableTensorError,
    UnsupportedError,
)
from ..core.reader import Reader, bytes_view
from ._f4 import f4_shape

__all__ = [
    "f4_shape",
    "from_numpy",
    "prepare_tensor",
    "to_numpy",
    "torch_allocator",
    "torch_dtype",
    "torch_view",
]

_SAME_WIDTH_INT = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def torch_dtype(dt: DType) -> torch.dtype:
    """The torch dtype of ``dt``; UnsupportedError when this torch has none."""
    found = getattr(torch, dt.torch_name, None) if dt.torch_name else None
    if not isinstance(found, torch.dtype):
        raise UnsupportedError(f"torch {torch.__version__} has no dtype for {dt.name}")
    return found


def torch_allocator(
    device: str | int | torch.device = "cpu",
) -> Callable[[TensorInfo], tuple[memoryview, Callable[[], torch.Tensor]]]:
    """An allocator that reads each tensor straight into a new torch CPU tensor."""

    def alloc(info: TensorInfo) -> tuple[memoryview, Callable[[], torch.Tensor]]:
        tdt = torch_dtype(info.dtype)
        shape = f4_shape(info.dtype, info.shape, to="torch")
        nbytes = info.byte_range.length
        if nbytes == 0:
            empty = torch.empty(shape, dtype=tdt)
            return memoryview(bytearray()), lambda: _to(empty, device)
        raw = torch.empty(nbytes, dtype=torch.uint8)

        def finish() -> torch.Tensor:
            return _to(raw.view(tdt).reshape(shape), device)

        return bytes_view(raw.numpy()), finish

    return alloc


def torch_view(reader: Reader, name: str) -> torch.Tensor:
    """A torch tensor over the mapped file: no copy (the mapping is private, so writes to
    the tensor never reach the file). Falls back to a copy where the bytes are misaligned."""
    info = reader.info(name)
    tdt = torch_dtype(info.dtype)
    shape = f4_shape(info.dtype, info.shape, to="torch")
    rng = info.byte_range
    buf = reader.source.buffer() if rng.length else None
    itemsize = torch.empty((), dtype=tdt).element_size()
    if buf is None or rng.start % itemsize:
        return reader.read_into([name], torch_allocator())[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only in-memory buffer
        raw = torch.frombuffer(buf, dtype=torch.uint8, count=rng.length, offset=rng.start)
    return raw.view(tdt).reshape(shape)


def _to(t: torch.Tensor, device: str | int | torch.device) -> torch.Tensor:
    return t if str(device) == "cpu" else t.to(device)


def from_numpy(arr: np.ndarray[Any, Any], dt: DType) -> torch.Tensor:
    """A torch tensor sharing ``arr``'s memory (bf16/f8 through a same-width int view)."""
    tdt = torch_dtype(dt)
    if dt.is_subbyte:
        from ..core.dtypes import pack

        packed = pack(np.ascontiguousarray(arr).reshape(-1).view(np.uint8), dt.bits)
        return torch.from_numpy(packed).view(tdt).reshape(f4_shape(dt, arr.shape, to="torch"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
    if dt.kind == "bool":
        return torch.from_numpy(arr)
    ints = arr.view(_SAME_WIDTH_INT[arr.dtype.itemsize])
    return torch.from_numpy(ints).view(tdt)


def prepare_tensor(name: str, tensor: Any) -> tuple[DType, tuple[int, ...], memoryview, Any]:
    """``(dtype, logical shape, bytes, keep-alive)`` of a torch tensor, written by value."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidTypeError(
            f"Key `{name}` is invalid, expected torch.Tensor but received {type(tensor)}"
        )
    if tensor.layout != torch.strided:
        raise InvalidArgumentError(
            f"You are trying to save a sparse tensor: `{name}` which safetensors does not "
            "support. Make it dense with `.to_dense()` first."
        )
    try:
        dt = dtypes.from_torch(tensor.dtype)
    except KeyError:
        raise UnsupportedError(
            f"tensor {name!r}: torch dtype {tensor.dtype} has no safetensors equivalent"
        ) from None
    if tensor.is_nested:
        raise UnsavableTensorError(f"tensor {name!r} is a nested tensor: it cannot be saved")
    if tensor.device.type == "meta":
        raise UnsavableTensorError(
            f"tensor {name!r} is on the meta device: Cannot copy out of meta tensor; no data! "
            "It cannot be saved"
        )
    try:
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.resolve_conj().resolve_neg().contiguous()
    except (RuntimeError, NotImplementedError) as exc:
        raise InvalidArgumentError(f"tensor {name!r} cannot be read for saving: {exc}") from exc
    shape = f4_shape(dt, t.shape, to="file")
    if t.numel() == 0:
        return dt, shape, memoryview(bytearray()), t
    raw = t.reshape(-1).view(torch.uint8)
    if math.prod(shape) and raw.numel() != dt.nbytes(math.prod(shape)):
        raise InvalidArgumentError(f"tensor {name!r}: unexpected storage size")
    return dt, shape, bytes_view(raw.numpy()), t


def to_numpy(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A numpy array with ``tensor``'s values (bf16/f8 as ml_dtypes), sharing memory when the
    tensor is a contiguous CPU tensor."""
    dt, shape, view, _keep = prepare_tensor("tensor", tensor)
    if dt.is_subbyte:
        raise UnsupportedError(f"torch {tensor.dtype} tensors cannot become numpy arrays here")
    return np.frombuffer(view, dt.numpy).reshape(shape)
