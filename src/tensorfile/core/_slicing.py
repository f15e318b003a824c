"""Plan partial reads for numpy basic indexing of a tensor stored in C order.

:func:`plan` turns an index (ints, slices with any step, ``...``, ``None``) into the rows of
one axis that must be read, and an index to apply to those rows once they are in memory.
Leading integer indices narrow the read to one sub-block; the first sliced axis bounds it.

Example:
    >>> p = plan((10, 4), (slice(2, 5), 1))
    >>> p.axis, p.rows, p.key
    (0, [2, 3, 4], (slice(0, 3, 1), 1))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

__all__ = ["SlicePlan", "plan"]

# Read only the selected rows (one request each) when a step would skip at least this much.
_SPARSE_GAP_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """How to serve ``tensor[key]`` from a C-ordered tensor.

    Attributes:
        axis: the axis whose rows are read (the first axis not indexed by an int).
        prefix: flat element offset of the sub-block selected by the leading ints.
        rows: the rows of ``axis`` to read, ascending (contiguous when ``dense``).
        dense: True when ``rows`` is one contiguous run read at once.
        key: index to apply to the array of shape ``(1,)*axis + (len(rows),) + rest``
            (``(1,)*ndim`` when every axis is indexed by an int).
        result_shape: shape of the result.
    """

    axis: int
    prefix: int
    rows: list[int]
    dense: bool
    key: tuple[Any, ...]
    result_shape: tuple[int, ...]


def _expand(shape: tuple[int, ...], key: Any) -> list[Any]:
    """Expand ``...`` and check the index; every entry is int, slice or None."""
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        if not (
            item is None
            or item is Ellipsis
            or isinstance(item, slice)
            or (isinstance(item, int | np.integer) and not isinstance(item, bool))
        ):
            raise TypeError("advanced index")
    n_axes = sum(1 for i in items if i is not None and i is not Ellipsis)
    if items.count(Ellipsis) > 1:
        raise InvalidArgumentError("an index can only have a single ellipsis ('...')")
    if n_axes > len(shape):
        raise InvalidArgumentError(
            f"too many indices: the tensor has {len(shape)} dimensions, the index {n_axes}"
        )
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [slice(None)] * (len(shape) - n_axes)
    else:
        items += [slice(None)] * (len(shape) - n_axes)
    return items


def plan(shape: tuple[int, ...], key: Any, itemsize: int = 1) -> SlicePlan:
    """Plan ``tensor[key]`` for basic indexing; ``TypeError`` for advanced indexing."""
    items = _expand(shape, key)
    # numpy validates bounds and computes the result shape on a zero-byte stand-in.
    stand_in = np.broadcast_to(np.empty((), np.uint8), shape)
    try:
        result_shape = stand_in[tuple(items)].shape
    except IndexError as exc:
        raise InvalidArgumentError(f"index out of range for shape {list(shape)}: {exc}") from exc
    prefix = 0
    axis = 0
    new_key: list[Any] = []
    dim_iter = iter(range(len(shape)))
    rows: list[int] = []
    dense = True
    found = False
    for item in items:
        if item is None:
            new_key.append(None)
            continue
        d = next(dim_iter)
        if found:
            new_key.append(item)
            continue
        if isinstance(item, slice):
            found = True
            axis = d
            r = range(*item.indices(shape[d]))
            if len(r) == 0:
                rows = []
                new_key.append(slice(0, 0))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
            row_bytes = itemsize * int(np.prod(shape[d + 1 :], dtype=np.int64))
            if abs(r.step) > 1 and row_bytes * (abs(r.step) - 1) >= _SPARSE_GAP_BYTES:
                dense = False
                rows = sorted(r)
                idx = slice(None) if r.step > 0 else slice(None, None, -1)
                new_key.append(idx)
            else:
                rows = list(range(lo, hi + 1))
                stop = r.stop - lo
                new_key.append(slice(r.start - lo, stop if stop >= 0 else None, r.step))
        else:
            i = int(item)
            i = i + shape[d] if i < 0 else i
            prefix = prefix * shape[d] + i
            new_key.append(0)
    if not found:
        # every axis was an int: read one element
        axis = len(shape)
        rows = [0]
    for d in range(axis, len(shape)):
        prefix *= shape[d]
    return SlicePlan(axis, prefix, rows, dense, tuple(new_key), result_shape)
