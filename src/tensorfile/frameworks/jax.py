"""The jax bridge (``framework="jax"`` or ``"flax"``): jax arrays from numpy, and back.

jax is imported when an adapter is made or a jax array is saved, not before. As in the
reference, a file's tensors become ``jnp.asarray`` of their numpy arrays, so jax's own
rules apply: unless ``jax_enable_x64`` is on, F64/I64/U64 tensors arrive as 32-bit arrays
(jax canonicalizes every numpy input that way). F6 tensors are refused: XLA has no 6-bit
types.

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.core import dtypes
    >>> from tensorfile.safetensors.numpy import save
    >>> with tensorfile.open(save({"a": np.arange(3, dtype=np.int8)})) as r:
    ...     a = JaxFramework().read(r, ["a"])[0]
    >>> type(a).__name__, a.tolist()
    ('ArrayImpl', [0, 1, 2])
    >>> JaxFramework().lacks(dtypes.from_safetensors("F6_E2M3"))
    'XLA has no 6-bit float types'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.dtypes import DType
from ._base import ArrayFramework, import_framework, refuse_type, saved_dtype, saved_values

__all__ = ["JaxFramework", "to_numpy"]

__doctest_requires__ = ("jax",)

_NO_XLA_TYPE = frozenset({"F6_E2M3", "F6_E3M2"})
"""tensorfile dtypes jax names (through ml_dtypes) but XLA cannot hold."""

_FLATTEN = "; flatten nested parameters first (flax.traverse_util.flatten_dict)"


class JaxFramework(ArrayFramework):
    """Read tensors as jax arrays (through numpy), on the cpu."""

    name = "jax"
    module = "jax.numpy"
    extra = "jax"

    def lacks(self, dt: DType) -> str | None:
        if dt.name in _NO_XLA_TYPE:
            return "XLA has no 6-bit float types"
        if getattr(self.fw, dt.numpy_name, None) is None:
            return f"this jax has no {dt.numpy_name} dtype"
        return None

    def from_numpy(self, arr: np.ndarray[Any, Any], dt: DType) -> Any:
        return self.fw.asarray(arr)


def to_numpy(name: str, value: Any) -> np.ndarray[Any, Any]:
    """The values of a jax array (or a numpy array, which the reference takes too) as a
    numpy array, for writing; tensorfile errors for anything else.

    Example:
        >>> import jax.numpy as jnp
        >>> to_numpy("w", jnp.arange(3, dtype=jnp.bfloat16)).dtype
        dtype(bfloat16)
    """
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    jax = import_framework("jax", "flax", "jax")
    if not isinstance(value, jax.Array):
        nested = isinstance(value, dict)
        refuse_type(name, "jax.Array", value, _FLATTEN if nested else "")
    dt = saved_dtype(name, "jax", str(value.dtype))
    # (a tracer inside jit/grad/vmap, an array spread over processes cannot give them)
    return saved_values(name, "jax", dt, lambda: value)
