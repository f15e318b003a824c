"""``safetensors.flax``, drop-in: ``save``, ``save_file``, ``load``, ``load_file``.

As in the reference, arrays are written through :mod:`tensorfile.safetensors.numpy` (so the
bytes are the numpy module's, to the byte) and read with ``safe_open(framework="flax")`` as
jax arrays; only jax is needed, not flax. jax's rules apply: unless ``jax_enable_x64`` is
on, 64-bit tensors load as 32-bit arrays, as in the reference. Unlike the reference, saving
leaves your dict as it was, takes jax and numpy arrays only (a nested dict of parameters is
refused with a hint to flatten it), and F6 tensors are refused by name
(:class:`~tensorfile.errors.UnsupportedError`). jax is imported on first use.

Example:
    >>> import jax.numpy as jnp
    >>> from tensorfile.safetensors.flax import load, save
    >>> load(save({"x": jnp.arange(3, dtype=jnp.int16)}))["x"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tensorfile.formats.safetensors._via_numpy import numpy_dict

from ..frameworks.jax import to_numpy
from . import numpy, safe_open

if TYPE_CHECKING:
    from jax import Array

__all__ = ["load", "load_file", "save", "save_file"]

__doctest_requires__ = ("jax",)


def save(tensors: dict[str, Array], metadata: dict[str, str] | None = None) -> bytes:
    """Serialize jax arrays to the bytes of a safetensors file.

    Example:
        >>> import jax.numpy as jnp
        >>> len(save({"a": jnp.zeros(2)}))
        72
    """
    return numpy.save(numpy_dict(tensors, "Array", to_numpy), metadata)


def save_file(
    tensors: dict[str, Array],
    filename: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
    *,
    align: int = 8,
    fsync: bool = False,
) -> None:
    """Save jax arrays to ``filename``, atomically (``align`` and ``fsync`` as in
    :func:`tensorfile.safetensors.numpy.save_file`).

    Example:
        >>> import jax.numpy as jnp
        >>> save_file({"a": jnp.zeros(2)}, "model.safetensors")
    """
    arrays = numpy_dict(tensors, "Array", to_numpy)
    numpy.save_file(arrays, filename, metadata, align=align, fsync=fsync)


def load(data: bytes | bytearray | memoryview) -> dict[str, Array]:
    """Load jax arrays (on the cpu) from the bytes of a safetensors file.

    Example:
        >>> import jax.numpy as jnp
        >>> load(save({"a": jnp.ones(1)}))["a"].tolist()
        [1.0]
    """
    with safe_open._from_bytes(data, framework="flax") as f:
        return f.read_tensors()


def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap") -> dict[str, Array]:
    """Load every tensor of ``filename`` as jax arrays, in file order.

    Example:
        >>> import jax.numpy as jnp
        >>> save_file({"a": jnp.ones(2)}, "model.safetensors")
        >>> load_file("model.safetensors")["a"].tolist()
        [1.0, 1.0]
    """
    with safe_open(filename, framework="flax", backend=backend) as f:
        return f.read_tensors()
