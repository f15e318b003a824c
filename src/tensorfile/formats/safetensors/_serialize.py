"""The reference's byte-level functions: :func:`serialize`, :func:`serialize_file` and
:func:`deserialize`, and :class:`TensorSpec`, which describes a tensor by its address.

:func:`serialize` takes ``TensorSpec`` values (or the pre-0.7 reference form, a dict with
``dtype``, ``shape`` and ``data``) and writes through the same writer as every other
safetensors save; :func:`deserialize` gives ``(name, {"dtype", "shape", "data"})`` pairs in
file order. The public face is :mod:`tensorfile.safetensors`.

Example:
    >>> blob = serialize({"a": {"dtype": "I8", "shape": [2], "data": b"\\x01\\x02"}}, {"k": "v"})
    >>> [(name, t["shape"], bytes(t["data"])) for name, t in deserialize(blob)]
    [('a', [2], b'\\x01\\x02')]
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import InvalidArgumentError, InvalidTypeError, UnknownDtypeError
from tensorfile.core.reader import brief
from tensorfile.formats.safetensors._encode import check_name, check_shape
from tensorfile.formats.safetensors._reader import SafetensorsReader
from tensorfile.formats.safetensors._writer import Prepared, check_size, to_bytes, write_file
from tensorfile.frameworks import f4_shape
from tensorfile.sources import MemorySource

__all__ = ["TensorSpec", "deserialize", "serialize", "serialize_file"]


class TensorSpec:
    """Describes one tensor passed to :func:`serialize` / :func:`serialize_file`.

    ``dtype`` is a numpy/torch-style name (``"float32"``, ``"bfloat16"``,
    ``"float4_e2m1fn_x2"``...); ``data_ptr``/``data_len`` give the address and size of its
    contiguous bytes, which must stay alive while they are serialized. For
    ``float4_e2m1fn_x2`` the last dimension of ``shape`` is doubled, as in the reference.

    Example:
        >>> import numpy as np
        >>> x = np.zeros(2, np.float32)
        >>> TensorSpec(dtype="float32", shape=[2], data_ptr=x.ctypes.data, data_len=8).dtype
        'F32'
    """

    __slots__ = ("_dtype", "data_len", "data_ptr", "shape")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        dt = _spec_dtype(dtype)
        shape_l = list(check_shape("<TensorSpec>", shape))
        if dtype == "float4_e2m1fn_x2":
            shape_l = list(f4_shape(dt, shape_l, to="file"))
        self._dtype = dt
        self.shape = shape_l
        self.data_ptr = _address("data_ptr", data_ptr)
        self.data_len = _address("data_len", data_len)

    @property
    def dtype(self) -> str:
        """The safetensors dtype code (``"F32"``)."""
        return self._dtype.name

    def prepared(self, name: str) -> Prepared:
        """The tensor's bytes, read in place at ``data_ptr``."""
        check_size(name, self._dtype, self.shape, self.data_len)  # before touching memory
        if self.data_len == 0:
            buf = memoryview(bytearray())
        else:
            if not self.data_ptr:
                raise InvalidArgumentError(f"tensor {name!r}: null data_ptr")
            buf = memoryview((ctypes.c_ubyte * self.data_len).from_address(self.data_ptr)).cast("B")
        return Prepared(name, self._dtype, tuple(self.shape), buf)

    def __repr__(self) -> str:
        return f"TensorSpec(dtype={self.dtype!r}, shape={self.shape}, data_len={self.data_len})"


def _spec_dtype(name: str) -> DType:
    if not isinstance(name, str):
        raise UnknownDtypeError(f"Unknown dtype {brief(name)}: a dtype is named by a string")
    try:
        return dtypes.from_name(name)
    except KeyError:
        raise UnknownDtypeError(f"Unknown dtype {brief(name)}") from None


def _address(what: str, value: object) -> int:
    """``data_ptr`` or ``data_len``: a non-negative integer that fits a pointer."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not 0 <= int(value) < 1 << 63
    ):
        raise InvalidArgumentError(f"{what} must be a non-negative integer, got {brief(value)}")
    return int(value)


def _prepare_all(tensor_dict: Mapping[str, Any]) -> list[Prepared]:
    if not isinstance(tensor_dict, Mapping):
        raise InvalidTypeError(f"expected a dict of tensor specs, got {type(tensor_dict).__name__}")
    out = []
    for name, spec in tensor_dict.items():
        if isinstance(spec, TensorSpec):
            out.append(spec.prepared(check_name(name)))
        elif isinstance(spec, Mapping) and {"dtype", "shape", "data"} <= set(spec):
            # the pre-0.7 reference form: {"dtype": ..., "shape": [...], "data": bytes}
            check_name(name)
            try:
                data = memoryview(spec["data"]).cast("B")
            except TypeError as exc:
                raise InvalidArgumentError(
                    f"tensor {name!r}: data must be a contiguous bytes-like object, got "
                    f"{type(spec['data']).__name__}: {exc}"
                ) from None
            dt = _spec_dtype(spec["dtype"])
            out.append(Prepared(name, dt, check_shape(name, spec["shape"]), data))
        else:
            raise InvalidTypeError(
                f"tensor {name!r}: expected a TensorSpec (or a dict with dtype, shape and "
                f"data), got {type(spec).__name__}"
            )
    return out


def serialize(tensor_dict: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> bytes:
    """Serialize tensor specs (and optional metadata) to the bytes of a safetensors file.

    Example:
        >>> blob = serialize({"a": {"dtype": "F32", "shape": [1], "data": b"\\0\\0\\x80?"}})
        >>> blob[:8]
        b'8\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
    """
    return to_bytes(_prepare_all(tensor_dict), metadata)


def serialize_file(
    tensor_dict: Mapping[str, Any],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Serialize tensor specs into ``filename`` (atomically)."""
    write_file(_prepare_all(tensor_dict), filename, metadata, align=align, fsync=fsync)


def deserialize(data: bytes | bytearray | memoryview) -> list[tuple[str, dict[str, Any]]]:
    """Parse safetensors bytes into ``[(name, {"dtype", "shape", "data"}), ...]`` in file order.

    Example:
        >>> deserialize(serialize({"a": {"dtype": "U8", "shape": [2], "data": b"hi"}}))
        [('a', {'dtype': 'U8', 'shape': [2], 'data': bytearray(b'hi')})]
    """
    try:
        source = MemorySource(data)
    except TypeError as exc:
        raise InvalidTypeError(f"expected bytes, got {type(data).__name__}") from exc
    reader = SafetensorsReader(source)
    view = source.buffer()
    out = []
    for name in reader.header.offset_names():
        info = reader.info(name)
        rng = info.byte_range
        out.append(
            (
                name,
                {
                    "dtype": info.dtype.name,
                    "shape": list(info.shape),
                    "data": bytearray(view[rng.start : rng.stop]),
                },
            )
        )
    return out
