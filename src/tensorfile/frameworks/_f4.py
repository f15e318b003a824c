"""The F4 shape rule of torch, in a module of its own so that it needs no torch.

:mod:`tensorfile.frameworks.torch` applies it to every tensor it reads or writes, and the
safetensors writers (``TensorSpec``) apply it without importing torch. Import it from
:mod:`tensorfile.frameworks`.

Example:
    >>> from tensorfile.core import dtypes
    >>> f4_shape(dtypes.from_safetensors("F4"), (), to="file")
    (2,)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..core.dtypes import DType
from ..core.errors import UnsupportedError

__all__ = ["f4_shape"]


def f4_shape(dt: DType, shape: Sequence[int], *, to: Literal["torch", "file"]) -> tuple[int, ...]:
    """The F4 shape rule, the one place it is written.

    An F4 tensor of shape ``(..., n)`` is a torch ``float4_e2m1fn_x2`` tensor of shape
    ``(..., n/2)``: torch packs two 4-bit elements into each of its elements. ``to="torch"``
    maps a file's shape to torch's (the last dimension must be even); ``to="file"`` maps
    torch's back (a 0-d torch tensor holds two elements: ``(2,)``). Other dtypes keep their
    shape.

    Example:
        >>> from tensorfile.core import dtypes
        >>> f4 = dtypes.from_safetensors("F4")
        >>> f4_shape(f4, (3, 8), to="torch"), f4_shape(f4, (3, 4), to="file")
        ((3, 4), (3, 8))
    """
    shape = tuple(shape)
    if dt.name != "F4":
        return shape
    if to == "file":
        return (*shape[:-1], shape[-1] * 2) if shape else (2,)
    if not shape or shape[-1] % 2:
        raise UnsupportedError(
            f"an F4 tensor of shape {list(shape)} cannot be a torch float4_e2m1fn_x2 tensor: "
            "its last dimension must be even"
        )
    return (*shape[:-1], shape[-1] // 2)
