"""Plan partial reads for numpy basic indexing of a tensor stored in C order.

:func:`plan` turns an index (ints, slices with any step, ``...``, ``None``) into the rows of
one axis that must be read, and an index to apply to those rows once they are in memory.
Leading integer indices narrow the read to one sub-block; the first sliced axis bounds it.

Example:
    >>> p = plan((10, 4), (slice(2, 5), 1))
    >>> p.axis, p.span, p.key
    (0, range(2, 5), (slice(0, 3, 1), 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgumentError

__all__ = ["SlicePlan", "plan", "shape_text"]

# Read only the selected rows (one request each) when a step would skip at least this much.
_SPARSE_GAP_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """How to serve ``tensor[key]`` from a C-ordered tensor.

    Attributes:
        axis: the axis whose rows are read (the first axis not indexed by an int).
        prefix: flat element offset of the sub-block selected by the leading ints.
        span: the rows of ``axis`` to read, ascending, as a range (contiguous when ``dense``):
            never a list, so a plan costs the same for ten rows and for a billion.
        dense: True when ``span`` is one contiguous run read at once.
        key: index to apply to the array of shape ``(1,)*axis + (len(span),) + rest``
            (``(1,)*ndim`` when every axis is indexed by an int).
        result_shape: shape of the result.
    """

    axis: int
    prefix: int
    span: range
    dense: bool
    key: tuple[Any, ...]
    result_shape: tuple[int, ...]

    @property
    def rows(self) -> list[int]:
        """The rows of :attr:`span` as a list (for small plans and tests)."""
        return list(self.span)


def _is_basic(item: object) -> bool:
    return (
        item is None
        or item is Ellipsis
        or isinstance(item, slice)
        or (isinstance(item, int | np.integer) and not isinstance(item, bool))
    )


def _expand(shape: tuple[int, ...], key: Any) -> list[Any]:
    """Expand ``...`` and check the index; every entry is int, slice or None."""
    items = list(key) if isinstance(key, tuple) else [key]
    if not all(_is_basic(item) for item in items):
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


def _result_shape(shape: tuple[int, ...], items: list[Any]) -> tuple[int, ...]:
    """The shape of ``tensor[items]``, computed by numpy on a zero-byte stand-in.

    Raises ValueError when numpy cannot describe ``shape`` at all (too many dimensions, a
    dimension over its index type), :class:`InvalidArgumentError` for a bad index.
    """
    try:
        stand_in = np.broadcast_to(np.empty((), np.uint8), shape)
    except (ValueError, OverflowError, MemoryError) as exc:
        raise ValueError(str(exc)) from exc
    try:
        found: tuple[int, ...] = stand_in[tuple(items)].shape
    except (IndexError, OverflowError) as exc:  # (an integer past 64 bits overflows)
        raise InvalidArgumentError(
            f"index out of range for shape {shape_text(shape)}: {exc}"
        ) from exc
    except (ValueError, TypeError) as exc:  # a zero step, a slice bound that is no integer
        raise InvalidArgumentError(f"invalid index for shape {shape_text(shape)}: {exc}") from exc
    return found


def shape_text(shape: Sequence[int]) -> str:
    """A shape for a message: in full when short, else its rank and first dimensions.

    Example:
        >>> shape_text((2, 3)), shape_text([1] * 100)
        ('[2, 3]', '[1, 1, 1, 1, ...] (100 dimensions)')
    """
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:4]))}, ...] ({len(shape)} dimensions)"


def plan(shape: tuple[int, ...], key: Any, itemsize: int = 1) -> SlicePlan:
    """Plan ``tensor[key]`` for basic indexing; ``TypeError`` for advanced indexing,
    :class:`InvalidArgumentError` for an index numpy would refuse, ``ValueError`` when
    numpy cannot describe ``shape``."""
    items = _expand(shape, key)
    result_shape = _result_shape(shape, items)
    prefix = 0
    axis = 0
    new_key: list[Any] = []
    dim_iter = iter(range(len(shape)))
    span = range(0)
    dense = True
    found = False
    if 0 in shape:
        # nothing to read (and a huge dimension next to the 0 must not become a range walk)
        return SlicePlan(0, 0, span, True, (), result_shape)
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
                span = range(0)
                new_key.append(slice(0, 0))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
            row_bytes = itemsize * _prod(shape[d + 1 :])
            if abs(r.step) > 1 and row_bytes * (abs(r.step) - 1) >= _SPARSE_GAP_BYTES:
                dense = False
                span = r if r.step > 0 else r[::-1]
                idx = slice(None) if r.step > 0 else slice(None, None, -1)
                new_key.append(idx)
            else:
                span = range(lo, hi + 1)
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
        span = range(1)
    for d in range(axis, len(shape)):
        prefix *= shape[d]
    return SlicePlan(axis, prefix, span, dense, tuple(new_key), result_shape)


def _prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n
