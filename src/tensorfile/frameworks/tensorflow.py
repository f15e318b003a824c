"""The tensorflow bridge (``framework="tf"``): tensorflow tensors from numpy, and back.

tensorflow is imported when an adapter is made or a tensor is saved, not before. A file's
tensors become ``tf.convert_to_tensor`` of their numpy arrays (bf16, F8 and F4 through
``ml_dtypes``, as tensorflow itself takes them); the dtypes tensorflow has no type for
(F8_E8M0, F6) are refused by name.

(Import paddle before tensorflow when both are used: see :mod:`tensorfile.frameworks.paddle`.)

Example:
    >>> import numpy as np, tensorflow as tf
    >>> from tensorfile.core import dtypes
    >>> fw = TensorflowFramework()
    >>> a = fw.convert(np.arange(3, dtype=np.int8), dtypes.from_numpy(np.int8))
    >>> a.dtype.name, a.numpy().tolist(), to_numpy("v", tf.Variable([1.5, 2.5])).tolist()
    ('int8', [0, 1, 2], [1.5, 2.5])
    >>> fw.lacks(dtypes.from_safetensors("F8_E8M0")) is None
    False
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ._base import ArrayFramework, import_framework, refuse_type, saved_dtype, saved_values

__all__ = ["TensorflowFramework", "to_numpy"]

__doctest_requires__ = ("tensorflow",)

_DENSE = "; make it dense first (tf.sparse.to_dense, RaggedTensor.to_tensor)"


class TensorflowFramework(ArrayFramework):
    """Read tensors as tensorflow tensors (through numpy), on the cpu."""

    name = "tensorflow"
    module = "tensorflow"
    extra = "tensorflow"

    def lacks(self, dt: DType) -> str | None:
        try:
            self.fw.as_dtype(dt.numpy)
        except TypeError:
            return f"this tensorflow has no {dt.numpy_name} dtype"
        return None

    def from_numpy(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        return self.fw.convert_to_tensor(arr)


def to_numpy(name: str, value: Any) -> np.ndarray[Any, Any]:
    """The values of a tensorflow tensor (or variable) as a numpy array, for writing;
    tensorfile errors for anything else.

    Example:
        >>> import tensorflow as tf
        >>> to_numpy("w", tf.ones((2, 3), dtype=tf.bfloat16)).dtype
        dtype(bfloat16)
    """
    tf = import_framework("tensorflow", "tf", "tensorflow")
    if not isinstance(value, tf.Tensor | tf.Variable):
        sparse = isinstance(value, tf.SparseTensor | tf.RaggedTensor)
        refuse_type(name, "tf.Tensor", value, _DENSE if sparse else "")
    dt = saved_dtype(name, "tensorflow", value.dtype.name)
    # (a symbolic tensor inside tf.function, a variable never initialized cannot give them)
    errors = (AttributeError, TypeError, ValueError, RuntimeError, tf.errors.OpError)
    return saved_values(name, "tensorflow", dt, lambda: value.numpy(), errors)
