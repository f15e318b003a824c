"""The mlx bridge (``framework="mlx"``): mlx arrays from numpy, and back.

mlx is imported when an adapter is made or an array is saved, not before. A file's tensors
become ``mx.array`` of their numpy arrays, as in the reference (so F64 tensors arrive as
float32 arrays, mlx's rule for numpy input); bf16 goes through its 16-bit pattern both ways,
which the reference cannot do (an mlx limitation). The dtypes mlx has no type for (F8, F6,
F4) are refused by name.

Example:
    >>> import numpy as np
    >>> from tensorfile.core import dtypes
    >>> bf16 = dtypes.from_safetensors("BF16")
    >>> x = MlxFramework().convert(np.array([0.5, 2.0], bf16.numpy), bf16)
    >>> x.dtype, x.tolist(), to_numpy("x", x).tolist()
    (mlx.core.bfloat16, [0.5, 2.0], [0.5, 2.0])
    >>> MlxFramework().lacks(dtypes.from_safetensors("F8_E4M3"))
    'mlx has no float8_e4m3fn dtype'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ._base import ArrayFramework, import_framework, refuse_type, saved_dtype, saved_values

__all__ = ["MlxFramework", "to_numpy"]

__doctest_requires__ = ("mlx.core",)


def _mlx_name(dt: DType) -> str:
    """mlx's name for ``dt`` (numpy's, but for ``bool_``)."""
    return "bool_" if dt.numpy_name == "bool" else dt.numpy_name


class MlxFramework(ArrayFramework):
    """Read tensors as mlx arrays (through numpy)."""

    name = "mlx"
    module = "mlx.core"
    extra = "mlx"

    def lacks(self, dt: DType) -> str | None:
        if not isinstance(getattr(self.fw, _mlx_name(dt), None), self.fw.Dtype):
            return f"mlx has no {dt.numpy_name} dtype"
        return None

    def from_numpy(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        mx = self.fw
        if dt.name == "BF16":
            return mx.array(arr.view(np.uint16)).view(mx.bfloat16)
        return mx.array(arr)


def to_numpy(name: str, value: Any) -> np.ndarray[Any, Any]:
    """The values of an mlx array (or a numpy array, which the reference takes too) as a
    numpy array, for writing; tensorfile errors for anything else.

    Example:
        >>> import mlx.core as mx
        >>> to_numpy("w", mx.ones((2, 3), dtype=mx.bfloat16)).dtype
        dtype(bfloat16)
    """
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    mx = import_framework("mlx.core", "mlx", "mlx")
    if not isinstance(value, mx.array):
        refuse_type(name, "mx.array", value)
    dt = saved_dtype(name, "mlx", str(value.dtype).rpartition(".")[2])
    # numpy cannot take mlx's bf16 buffer: take its bit patterns
    bits = dt.name == "BF16"
    return saved_values(name, "mlx", dt, lambda: value.view(mx.uint16) if bits else value)
