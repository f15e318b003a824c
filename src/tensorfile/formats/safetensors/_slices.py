"""The reference's rules for ``safe_open(...).get_slice(name)[index]``, with its messages.

tensorfile's own slicing (:meth:`~tensorfile.core.reader.Reader.read_slice`) takes every
numpy basic index. Where the reference refuses an index, the drop-in refuses it too, with
the reference's words (code and tests match on them): a non-empty list is not implemented
(an empty one selects no rows), a negative index past the start of its dimension is
invalid, and an index past the end is out of bounds. Everything the reference accepts
reads the same elements.

Example:
    >>> reference_index((10, 5), [])
    slice(0, 0, None)
    >>> try:
    ...     reference_index((10, 5), (slice(2, None), 20))
    ... except SafetensorSliceError as exc:
    ...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
    Error during slicing [2:, 20] with shape [10, 5]: index 20 out of bounds for tensor
    dimension #1 of size 5
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorfile.core.errors import SafetensorSliceError

__all__ = ["reference_index"]


def _is_int(item: object) -> bool:
    return isinstance(item, int | np.integer) and not isinstance(item, bool)


def _bound(value: object) -> str:
    return "" if value is None else str(value)


def _shown(item: Any, dim: int) -> str:
    """One index as the reference prints it (``2:``, ``:4``, ``3``)."""
    if isinstance(item, slice):
        return f"{_bound(item.start)}:{_bound(item.stop)}"
    value = int(item)
    return str(value + dim if value < 0 else value)


def _bounds(item: Any, dim: int) -> tuple[int, int] | None:
    """The ``[start, stop)`` the reference reads for one index (it ignores a slice's step),
    or None for an index it cannot express (negative slice bounds)."""
    if _is_int(item):
        value = int(item) + dim if int(item) < 0 else int(item)
        return value, value + 1
    start = 0 if item.start is None else item.start
    stop = dim if item.stop is None else item.stop
    if not (_is_int(start) and _is_int(stop)) or int(start) < 0 or int(stop) < 0:
        return None
    return int(start), int(stop)


def reference_index(shape: tuple[int, ...], key: Any) -> Any:
    """``key`` as tensorfile's slicing should take it, after the reference's checks."""
    if isinstance(key, list):
        if key:
            raise SafetensorSliceError("Non empty lists are not implemented")
        return slice(0, 0)
    items = list(key) if isinstance(key, tuple) else [key]
    if not all(_is_int(i) or isinstance(i, slice) for i in items):
        return key  # None, ..., arrays: beyond the reference; tensorfile's rules apply
    pairs = list(zip(items, shape, strict=False))
    for axis, (item, dim) in enumerate(pairs):
        if _is_int(item) and int(item) < 0 and int(item) + dim < 0:
            raise SafetensorSliceError(
                f"Invalid index {int(item)} for dimension {axis} of size {dim}"
            )
    for axis in reversed(range(len(pairs))):  # the reference reports the last axis first
        item, dim = pairs[axis]
        bounds = _bounds(item, dim)
        if bounds is None or bounds == (0, 0):
            continue  # beyond the reference, or an empty selection (of an empty axis)
        start, stop = bounds
        if start >= dim or stop > dim:
            shown = ", ".join(_shown(i, d) for i, d in pairs)
            raise SafetensorSliceError(
                f"Error during slicing [{shown}] with shape {list(shape)}: index "
                f"{start if start >= dim else stop - 1} out of bounds for tensor dimension "
                f"#{axis} of size {dim}"
            )
    return key
