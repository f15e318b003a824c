"""``safetensors.paddle``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

Tensors are written through :mod:`tensorfile.safetensors.numpy` (the same bytes as the
reference's, to the byte) and read with ``safe_open(framework="paddle")`` onto ``device``
(``"cpu"``, ``"cuda"``/``"gpu:0"``...; one this paddle cannot use is refused before anything
is read). Unlike the reference, strided tensors are saved by value (the reference refuses
them), zero-size tensors save and load, and the dtypes paddle lacks (U16, U32, U64, F8_E8M0,
the FNUZ F8s, F6, F4) are refused by name (:class:`~tensorfile.errors.UnsupportedError`)
where the reference reads U16 as bf16. paddle is imported on first use.

(paddle 3.3 crashes when it is imported after tensorflow 2.21 in one process; import paddle
first when both are used.)

Example:
    >>> import paddle
    >>> from tensorfile.safetensors.paddle import load, save
    >>> load(save({"x": paddle.arange(3, dtype=paddle.int32)}))["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tensorfile.formats.safetensors._via_numpy import numpy_dict

from ..frameworks.paddle import to_numpy
from . import numpy, safe_open

if TYPE_CHECKING:
    import paddle

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("paddle",)


def save(tensors: dict[str, paddle.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """Serialize paddle tensors (from any device) to the bytes of a safetensors file.

    Example:
        >>> import paddle
        >>> len(save({"a": paddle.zeros([2])}))
        72
    """
    return numpy.save(numpy_dict(tensors, "paddle.Tensor", to_numpy), metadata)


def save_file(
    tensors: dict[str, paddle.Tensor],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Save paddle tensors to ``filename``, atomically (``align`` and ``fsync`` as in
    :func:`tensorfile.safetensors.numpy.save_file`).

    Example:
        >>> import paddle
        >>> save_file({"a": paddle.zeros([2])}, "model.safetensors")
    """
    arrays = numpy_dict(tensors, "paddle.Tensor", to_numpy)
    numpy.save_file(arrays, filename, metadata, align=align, fsync=fsync)


def load(data: bytes | bytearray | memoryview, device: Any = "cpu") -> dict[str, paddle.Tensor]:
    """Load paddle tensors onto ``device`` from the bytes of a safetensors file.

    Example:
        >>> import paddle
        >>> load(save({"a": paddle.ones([1])}))["a"].tolist()
        [1.0]
    """
    with safe_open._from_bytes(data, framework="paddle", device=device) as f:
        return f.read_tensors()


def load_file(
    filename: str | os.PathLike[str], device: Any = "cpu", *, backend: str = "mmap"
) -> dict[str, paddle.Tensor]:
    """Load every tensor of ``filename`` as paddle tensors on ``device``, in file order.

    Example:
        >>> import paddle
        >>> save_file({"a": paddle.ones([2])}, "model.safetensors")
        >>> load_file("model.safetensors")["a"].tolist()
        [1.0, 1.0]
    """
    with safe_open(filename, framework="paddle", device=device, backend=backend) as f:
        return f.read_tensors()
