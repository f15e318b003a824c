"""``safetensors.tensorflow``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

As in the reference, tensors are written through :mod:`tensorfile.safetensors.numpy` (so the
bytes are the numpy module's, to the byte) and read with ``safe_open(framework="tf")``.
Unlike the reference, saving leaves your dict as it was (the reference swaps its values for
numpy arrays), and the dtypes tensorflow lacks (F8_E8M0, F6) are refused by name
(:class:`~tensorfile.errors.UnsupportedError`). tensorflow is imported on first use.

Example:
    >>> import tensorflow as tf
    >>> from tensorfile.safetensors.tensorflow import load, save
    >>> load(save({"x": tf.range(3, dtype=tf.int32)}))["x"].numpy().tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tensorfile.formats.safetensors._via_numpy import numpy_dict

from ..frameworks.tensorflow import to_numpy
from . import numpy, safe_open

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("tensorflow",)


def save(tensors: dict[str, tf.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """Serialize tensorflow tensors (or variables) to the bytes of a safetensors file.

    Example:
        >>> import tensorflow as tf
        >>> len(save({"a": tf.zeros(2)}))
        72
    """
    return numpy.save(numpy_dict(tensors, "tf.Tensor", to_numpy), metadata)


def save_file(
    tensors: dict[str, tf.Tensor],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Save tensorflow tensors to ``filename``, atomically (``align`` and ``fsync`` as in
    :func:`tensorfile.safetensors.numpy.save_file`).

    Example:
        >>> import tensorflow as tf
        >>> save_file({"a": tf.zeros(2)}, "model.safetensors")
    """
    arrays = numpy_dict(tensors, "tf.Tensor", to_numpy)
    numpy.save_file(arrays, filename, metadata, align=align, fsync=fsync)


def load(data: bytes | bytearray | memoryview) -> dict[str, tf.Tensor]:
    """Load tensorflow tensors (on the cpu) from the bytes of a safetensors file.

    Example:
        >>> import tensorflow as tf
        >>> load(save({"a": tf.ones(1)}))["a"].numpy().tolist()
        [1.0]
    """
    with safe_open._from_bytes(data, framework="tf") as f:
        return f.read_tensors()


def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap") -> dict[str, tf.Tensor]:
    """Load every tensor of ``filename`` as tensorflow tensors, in file order.

    Example:
        >>> import tensorflow as tf
        >>> save_file({"a": tf.ones(2)}, "model.safetensors")
        >>> load_file("model.safetensors")["a"].numpy().tolist()
        [1.0, 1.0]
    """
    with safe_open(filename, framework="tf", backend=backend) as f:
        return f.read_tensors()
