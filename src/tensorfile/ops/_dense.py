"""Tensors of any layout as plain values, for the operations that compare or hash data.

Example:
    >>> import numpy as np
    >>> dense_value(np.arange(3)).tolist()
    [0, 1, 2]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dense_value"]

NDArray = np.ndarray[Any, Any]


def dense_value(value: Any) -> NDArray | dict[str, NDArray]:
    """A reader's tensor as a dense array (sparse tensors densified), or, for a layout
    tensorfile does not know, its components by role, sorted."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "to_dense"):
        return np.asarray(value.to_dense())
    return {role: np.asarray(value.components[role]) for role in sorted(value.components)}
