"""The tensorflow bridge (``framework="tf"``): tensorflow tensors from numpy, and back.

tensorflow is imported when an adapter is made or a tensor is saved, not before. A file's
tensors become ``tf.convert_to_tensor`` of their numpy arrays (bf16, F8 and F4 through
``ml_dtypes``, as tensorflow itself takes them); the dtypes tensorflow has no type for
(F8_E8M0, F6) are refused by name.

(paddle 3.3 crashes when it is imported after tensorflow 2.21 in one process; import paddle
first when both are used.)

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.core import dtypes
    >>> from tensorfile.safetensors.numpy import save
    >>> fw = TensorflowFramework()
    >>> with tensorfile.open(save({"a": np.arange(3, dtype=np.int8)})) as r:
    ...     a = fw.read(r, ["a"])[0]
    >>> a.dtype.name, a.numpy().tolist(), fw.lacks(dtypes.from_safetensors("F8_E8M0")) is None
    ('int8', [0, 1, 2], False)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ..core.errors import InvalidArgumentError, InvalidTypeError
from ._base import ArrayFramework, import_framework, saved_dtype

__all__ = ["TensorflowFramework", "to_numpy"]

__doctest_requires__ = ("tensorflow",)


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
        hint = ""
        if isinstance(value, tf.SparseTensor | tf.RaggedTensor):
            hint = "; make it dense first (tf.sparse.to_dense, RaggedTensor.to_tensor)"
        raise InvalidTypeError(
            f"Key `{name}` is invalid, expected tf.Tensor but received {type(value)}{hint}"
        )
    dt = saved_dtype(name, "tensorflow", value.dtype.name)
    try:
        arr = value.numpy()
    except (AttributeError, TypeError, ValueError, RuntimeError, tf.errors.OpError) as exc:
        # a symbolic tensor (inside tf.function), a variable that was never initialized...
        raise InvalidArgumentError(
            f"tensor {name!r}: tensorflow cannot give its values: {exc}"
        ) from exc
    arr = np.asarray(arr)
    return arr.view(dt.numpy) if arr.dtype != dt.numpy else arr
