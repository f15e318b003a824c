"""One plan entry of one tensor as a :class:`Region`: the intervals read, then an index.

A plan entry is what numpy's basic indexing takes (an int, a slice with any step, ``...``,
``None``, or a tuple of those), where a tuple's item may also be a *list* of step-1 slices
(or ``(start, stop)`` pairs): those intervals of that dimension, concatenated in the order
given (the form transformers' tensor-parallel plans use for fused weights, one list of
slices per dimension). :class:`Intervals` says the same for one dimension. ``None`` is the
whole tensor.

A :class:`Region` is what is read: for every dimension, the intervals whose elements are
taken (the box is their product, each dimension's intervals concatenated), and the index
applied to that box afterwards (a slice's step, an int's dropped dimension, a new axis).
A slice with a step reads the rows from its first to its last element, unless
:func:`region` is told the element size (``itemsize``) and the step skips at least
:data:`SPARSE_GAP_BYTES` per step (the bytes of the rows skipped between two kept ones, as
:mod:`tensorfile.core.slicing`'s sparse rule): then the kept rows are intervals of one row
each, in the slice's order (a negative step needs no key), up to :data:`SPARSE_ROWS` of
them (beyond, the rows from the first to the last again). Intervals are read
as given (they may repeat or overlap); bounds of intervals are never clamped: one outside
its dimension is an :class:`~tensorfile.errors.InvalidArgumentError` naming the tensor.

Example:
    >>> r = region((8, 6), (slice(1, 7, 2), [slice(0, 2), (4, 6)]))
    >>> r.dims, r.box_shape, r.key, r.result_shape
    ((((1, 6),), ((0, 2), (4, 6))), (5, 4), (slice(0, None, 2), slice(None, None, None)), (3, 4))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..slicing import shape_text

__all__ = ["SPARSE_GAP_BYTES", "SPARSE_ROWS", "Interval", "Intervals", "Region", "region"]

Interval = tuple[int, int]
"""``(start, stop)``: the elements ``start .. stop - 1`` of one dimension."""

_ALL = slice(None)

SPARSE_GAP_BYTES = 64 << 10
"""The bytes a step skips (between two kept rows) from which a strided slice's rows are
read one by one rather than from its first row to its last."""

SPARSE_ROWS = 65536
"""The most kept rows of one strided slice read one by one."""


class Intervals:
    """Several intervals of one dimension, concatenated in the order given: a plan entry
    for a fused weight split across ranks (``dim``: the dimension; ``intervals``: step-1
    slices or ``(start, stop)`` pairs, never clamped).

    Example:
        >>> qkv = Intervals(0, [slice(0, 64), (512, 576), (1024, 1088)])  # rank 0 of 8
        >>> qkv
        Intervals(0, [(0, 64), (512, 576), (1024, 1088)])
        >>> region((1536, 16), qkv).box_shape
        (192, 16)
    """

    __slots__ = ("dim", "intervals")

    def __init__(self, dim: int, intervals: Iterable[slice | tuple[int, int]]) -> None:
        if not _is_int(dim):
            raise InvalidTypeError(f"Intervals: dim must be an int, got {type(dim).__name__}")
        if isinstance(intervals, str | bytes) or not isinstance(intervals, Iterable):
            raise InvalidTypeError(
                "Intervals: intervals must be a list of slices or (start, stop) pairs, got "
                f"{type(intervals).__name__}"
            )
        self.dim = int(dim)
        self.intervals: tuple[slice | tuple[int, int], ...] = tuple(intervals)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Intervals):
            return NotImplemented
        return (self.dim, self.intervals) == (other.dim, other.intervals)

    def __hash__(self) -> int:
        return hash((self.dim, tuple(map(repr, self.intervals))))

    def __repr__(self) -> str:
        shown = [_pair_text(i) for i in self.intervals]
        return f"Intervals({self.dim}, [{', '.join(shown)}])"


@dataclass(frozen=True, slots=True)
class Region:
    """What is read of a tensor of ``shape``: per dimension, the intervals taken (the box:
    their product), then ``key`` (None: nothing) applied to the box; ``result_shape`` is
    the result's."""

    shape: tuple[int, ...]
    dims: tuple[tuple[Interval, ...], ...]
    key: tuple[Any, ...] | None
    result_shape: tuple[int, ...]

    @property
    def box_shape(self) -> tuple[int, ...]:
        """The shape of the box read (before ``key``)."""
        return tuple(sum(b - a for a, b in iv) for iv in self.dims)

    @property
    def whole(self) -> bool:
        """Whether the region is the whole tensor, as it is."""
        return self.key is None and all(
            iv == ((0, n),) for iv, n in zip(self.dims, self.shape, strict=True)
        )

    @property
    def numel(self) -> int:
        """Elements in the box."""
        return math.prod(self.box_shape)


def whole(shape: tuple[int, ...]) -> Region:
    """The region of the whole tensor.

    Example:
        >>> whole((2, 3)).dims, whole(()).box_shape
        ((((0, 2),), ((0, 3),)), ())
    """
    return Region(shape, tuple(((0, n),) for n in shape), None, shape)


def region(
    shape: tuple[int, ...], entry: Any, name: str | None = None, *, itemsize: int | None = None
) -> Region:
    """The region of a tensor of ``shape`` that the plan entry ``entry`` asks for (see the
    module docstring); an :class:`~tensorfile.errors.InvalidArgumentError` naming ``name``
    for an entry that is no basic index, or an index or interval out of range. With
    ``itemsize`` (the bytes of an element), a slice whose step skips many bytes reads only
    its rows.

    Example:
        >>> region((4096, 256), slice(0, None, 4095), itemsize=4).dims[0]
        ((0, 1), (4095, 4096))
        >>> region((4096, 256), slice(0, None, 4095)).dims[0]
        ((0, 4096),)
    """
    where = "" if name is None else f"tensor {name!r}: "
    if entry is None:
        return whole(shape)
    if isinstance(entry, Intervals):
        return _intervals(shape, entry, where)
    items = list(entry) if isinstance(entry, tuple) else [entry]
    for item in items:
        if not (
            item is None or item is Ellipsis or isinstance(item, slice | list) or _is_int(item)
        ):
            raise InvalidArgumentError(
                f"{where}a plan entry is a basic index (ints, slices, ..., None, lists of "
                f"slices), got {type(item).__name__}"
            )
    axes = sum(1 for i in items if i is not None and i is not Ellipsis)
    if items.count(Ellipsis) > 1:
        raise InvalidArgumentError(f"{where}an index can only have a single ellipsis ('...')")
    if axes > len(shape):
        raise InvalidArgumentError(
            f"{where}too many indices: the tensor has {len(shape)} dimensions, the index {axes}"
        )
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at : at + 1] = [_ALL] * (len(shape) - axes)
    else:
        items += [_ALL] * (len(shape) - axes)
    dims: list[tuple[Interval, ...]] = []
    key: list[Any] = []
    for item in items:
        if item is None:
            key.append(None)
            continue
        d = len(dims)
        n = shape[d]
        if isinstance(item, list):
            dims.append(tuple(_interval(i, n, d, where) for i in item))
            key.append(_ALL)
        elif isinstance(item, slice):
            row = None if itemsize is None else math.prod(shape[d + 1 :]) * itemsize
            iv, k = _slice(item, n, d, where, row)
            dims.append(iv)
            key.append(k)
        else:
            i = operator.index(item)
            j = i + n if i < 0 else i
            if not 0 <= j < n:
                raise InvalidArgumentError(
                    f"{where}index {i} is out of range for dimension {d} of size {n}"
                )
            dims.append(((j, j + 1),))
            key.append(0)
    final = None if all(k is _ALL or k == _ALL for k in key) else tuple(key)
    box = tuple(sum(b - a for a, b in iv) for iv in dims)
    return Region(tuple(shape), tuple(dims), final, _result_shape(box, final, where, shape))


def _intervals(shape: tuple[int, ...], entry: Intervals, where: str) -> Region:
    nd = len(shape)
    d = entry.dim + nd if entry.dim < 0 else entry.dim
    if not 0 <= d < nd:
        raise InvalidArgumentError(
            f"{where}Intervals along dimension {entry.dim} of a tensor of shape {shape_text(shape)}"
        )
    dims: list[tuple[Interval, ...]] = [((0, n),) for n in shape]
    dims[d] = tuple(_interval(i, shape[d], d, where) for i in entry.intervals)
    box = tuple(sum(b - a for a, b in iv) for iv in dims)
    return Region(tuple(shape), tuple(dims), None, box)


def _interval(item: object, n: int, d: int, where: str) -> Interval:
    """One interval of dimension ``d`` (of size ``n``): a step-1 slice or a pair."""
    if isinstance(item, slice):
        if item.step not in (None, 1):
            raise InvalidArgumentError(
                f"{where}an interval is a slice of step 1, got step {item.step!r}"
            )
        raw: tuple[object, object] = (
            0 if item.start is None else item.start,
            n if item.stop is None else item.stop,
        )
    elif isinstance(item, tuple) and len(item) == 2:
        raw = item
    else:
        raise InvalidArgumentError(
            f"{where}an interval is a slice or a (start, stop) pair, got {type(item).__name__}"
        )
    start, stop = raw
    if not (_is_int(start) and _is_int(stop)):
        raise InvalidArgumentError(f"{where}an interval's bounds are ints, got {_pair_text(item)}")
    a, b = int(start), int(stop)  # type: ignore[call-overload]
    if not 0 <= a <= b <= n:
        raise InvalidArgumentError(
            f"{where}interval {a}:{b} is out of range for dimension {d} of size {n}"
        )
    return a, b


def _slice(
    item: slice, n: int, d: int, where: str, row: int | None
) -> tuple[tuple[Interval, ...], slice]:
    """The intervals a slice of dimension ``d`` reads, and the slice of them that is kept
    (``row``: the bytes of one row of the dimension, where known)."""
    for bound in (item.start, item.stop, item.step):
        if bound is not None and not _is_int(bound):
            raise InvalidArgumentError(
                f"{where}slice bounds are ints or None, got {type(bound).__name__}"
            )
    if item.step is not None and int(item.step) == 0:
        raise InvalidArgumentError(f"{where}slice step cannot be zero")
    r = range(*item.indices(n))
    if len(r) == 0:
        return ((0, 0),), _ALL
    lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
    if r.step == 1:
        return ((lo, hi),), _ALL
    if row is not None and (abs(r.step) - 1) * row >= SPARSE_GAP_BYTES and len(r) <= SPARSE_ROWS:
        return tuple((i, i + 1) for i in r), _ALL
    return ((lo, hi),), slice(r.start - lo, None, r.step)


def _result_shape(
    box: tuple[int, ...], key: tuple[Any, ...] | None, where: str, shape: tuple[int, ...]
) -> tuple[int, ...]:
    if key is None:
        return box
    try:
        stand_in = np.broadcast_to(np.empty((), np.uint8), box)
        found: tuple[int, ...] = stand_in[key].shape
    except (ValueError, IndexError, OverflowError, MemoryError) as exc:
        raise InvalidArgumentError(
            f"{where}cannot index a tensor of shape {shape_text(shape)}: {exc}"
        ) from exc
    return found


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _pair_text(item: object) -> str:
    if isinstance(item, slice):
        return f"({item.start}, {item.stop})"
    return repr(item)
