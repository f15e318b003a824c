"""What the framework modules that go through numpy share (``flax``, ``tensorflow``, ``mlx``,
``paddle``): a dict of the framework's tensors as numpy arrays, checked as the reference
checks it, for :mod:`tensorfile.safetensors.numpy` to write.

Example:
    >>> import numpy as np
    >>> numpy_dict({"a": [1, 2]}, "list", lambda name, v: np.asarray(v, np.int8))["a"]
    array([1, 2], dtype=int8)
    >>> numpy_dict([1, 2], "tf.Tensor", lambda name, v: v)
    Traceback (most recent call last):
    ...
    tensorfile.core.errors.InvalidTypeError: Expected a dict of [str, tf.Tensor] but received ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tensorfile.core.errors import InvalidTypeError
from tensorfile.formats.safetensors._encode import check_name

__all__ = ["numpy_dict"]


def numpy_dict(
    tensors: Mapping[str, Any],
    kind: str,
    to_numpy: Callable[[str, Any], np.ndarray[Any, Any]],
) -> dict[str, np.ndarray[Any, Any]]:
    """``{name: to_numpy(name, tensor)}``, in the order given; the caller's mapping is left
    as it was (the reference replaces its values with numpy arrays).

    A ``tensors`` that is not a mapping is an :class:`InvalidTypeError` (a ``TypeError``
    and a ``ValueError``), a name that is not a string an
    :class:`~tensorfile.errors.InvalidArgumentError`, before any tensor is converted.
    """
    if not isinstance(tensors, Mapping):
        raise InvalidTypeError(f"Expected a dict of [str, {kind}] but received {type(tensors)}")
    items = list(tensors.items())
    for name, _ in items:
        check_name(name)
    return {name: to_numpy(name, value) for name, value in items}
