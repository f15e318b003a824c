"""``safetensors.mlx``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

As in the reference, arrays are written through :mod:`tensorfile.safetensors.numpy` (so the
bytes are the numpy module's, to the byte) and read with ``safe_open(framework="mlx")``;
as there, F64 tensors load as float32 arrays (mlx's rule for numpy input). Unlike the
reference, bf16 arrays save and load (through their bit patterns), saving takes mlx and
numpy arrays only, and the dtypes mlx lacks (F8, F6, F4) are refused by name
(:class:`~tensorfile.errors.UnsupportedError`). mlx is imported on first use.

Example:
    >>> import mlx.core as mx
    >>> from tensorfile.safetensors.mlx import load, save
    >>> load(save({"x": mx.arange(3, dtype=mx.int16)}))["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tensorfile.formats.safetensors._via_numpy import numpy_dict

from ..frameworks.mlx import to_numpy
from . import numpy, safe_open

if TYPE_CHECKING:
    import mlx.core as mx

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("mlx.core",)


def save(tensors: dict[str, mx.array], metadata: dict[str, str] | None = None) -> bytes:
    """Serialize mlx arrays to the bytes of a safetensors file.

    Example:
        >>> import mlx.core as mx
        >>> len(save({"a": mx.zeros(2)}))
        72
    """
    return numpy.save(numpy_dict(tensors, "mx.array", to_numpy), metadata)


def save_file(
    tensors: dict[str, mx.array],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Save mlx arrays to ``filename``, atomically (``align`` and ``fsync`` as in
    :func:`tensorfile.safetensors.numpy.save_file`).

    Example:
        >>> import mlx.core as mx
        >>> save_file({"a": mx.zeros(2)}, "model.safetensors")
    """
    arrays = numpy_dict(tensors, "mx.array", to_numpy)
    numpy.save_file(arrays, filename, metadata, align=align, fsync=fsync)


def load(data: bytes | bytearray | memoryview) -> dict[str, mx.array]:
    """Load mlx arrays from the bytes of a safetensors file.

    Example:
        >>> import mlx.core as mx
        >>> load(save({"a": mx.ones(1)}))["a"].tolist()
        [1.0]
    """
    with safe_open._from_bytes(data, framework="mlx") as f:
        return f.read_tensors()


def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap") -> dict[str, mx.array]:
    """Load every tensor of ``filename`` as mlx arrays, in file order.

    Example:
        >>> import mlx.core as mx
        >>> save_file({"a": mx.ones(2)}, "model.safetensors")
        >>> load_file("model.safetensors")["a"].tolist()
        [1.0, 1.0]
    """
    with safe_open(filename, framework="mlx", backend=backend) as f:
        return f.read_tensors()
