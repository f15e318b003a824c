"""Where a region's elements lie in a C-ordered tensor's bytes, and copies of regions.

The dimensions after a region's innermost partial one are whole, so each interval of that
dimension, for every selected index of the dimensions before it, is one *run* of bytes.
The runs, in order, are the region's box in C order: run ``i`` fills the box's bytes right
after run ``i - 1``'s. :func:`run_count` counts them without listing them (a region of a
million rows need not become a million numbers to be judged), :func:`runs` lists them
(``starts`` and ``lengths``, numpy arrays relative to the tensor's first byte), and
:func:`take` copies a region out of an array that holds the tensor (or a block of it) into
the box's array: one strided copy per interval, never an object per run.

Example:
    >>> from tensorfile.core.selection.region import region
    >>> r = region((4, 6), (slice(1, 3), slice(2, 5)))
    >>> starts, lengths = runs(r, 4)
    >>> starts.tolist(), lengths.tolist(), run_count(r)
    ([32, 56], [12, 12], 2)
    >>> out = np.empty((2, 3), np.int64)
    >>> take(np.arange(24).reshape(4, 6), r.dims, out)
    >>> out.tolist()
    [[8, 9, 10], [14, 15, 16]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .region import Interval, Region

__all__ = ["inner_dim", "run_count", "runs", "take"]

NDArray = np.ndarray[Any, Any]

_SLICED_INTERVALS = 64
"""Intervals of one dimension copied one by one; past this (on any dimension), all the
dimensions of several intervals are indexed at once with open index arrays."""


def inner_dim(reg: Region) -> int:
    """The innermost dimension the region does not take whole (0 when it takes all)."""
    k = len(reg.shape) - 1
    while k > 0 and reg.dims[k] == ((0, reg.shape[k]),):
        k -= 1
    return max(k, 0)


def run_count(reg: Region) -> int:
    """How many runs :func:`runs` lists (intervals of no element included)."""
    if not reg.shape:
        return 1
    if reg.numel == 0:
        return 0
    k = inner_dim(reg)
    return math.prod(reg.box_shape[:k]) * len(reg.dims[k])


def _strides(shape: tuple[int, ...], itemsize: int) -> list[int]:
    return [math.prod(shape[d + 1 :]) * itemsize for d in range(len(shape))]


def _indices(dim: tuple[Interval, ...]) -> NDArray:
    if not dim:
        return np.zeros(0, np.int64)
    if len(dim) == 1:
        return np.arange(dim[0][0], dim[0][1], dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in dim])


def runs(reg: Region, itemsize: int) -> tuple[NDArray, NDArray]:
    """The byte runs of ``reg`` in its tensor's bytes (elements of ``itemsize`` bytes):
    ``(starts, lengths)``, int64 arrays, in the box's C order; runs of no byte left out."""
    if not reg.shape:
        return np.zeros(1, np.int64), np.full(1, itemsize, np.int64)
    if reg.numel == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    k = inner_dim(reg)
    stride = _strides(reg.shape, itemsize)
    inner = np.array(reg.dims[k], np.int64).reshape(-1, 2)
    starts = inner[:, 0] * stride[k]
    lengths = (inner[:, 1] - inner[:, 0]) * stride[k]
    for d in range(k - 1, -1, -1):  # the outer dimensions, outermost slowest
        steps = _indices(reg.dims[d]) * stride[d]
        starts = (steps[:, None] + starts[None, :]).reshape(-1)
    lengths = np.tile(lengths, len(starts) // max(len(lengths), 1))
    keep = lengths > 0
    return (starts, lengths) if keep.all() else (starts[keep], lengths[keep])


def take(src: NDArray, dims: tuple[tuple[Interval, ...], ...], out: NDArray) -> None:
    """Copy the region ``dims`` of ``src`` (intervals in ``src``'s coordinates, one entry
    per leading dimension of ``src``; later dimensions whole) into ``out``, its box."""
    base = tuple(slice(iv[0][0], iv[0][1]) if len(iv) == 1 else slice(None) for iv in dims)
    _take(src[base], dims, out, 0)


def _take(v: NDArray, dims: tuple[tuple[Interval, ...], ...], out: NDArray, d0: int) -> None:
    m = next((d for d in range(d0, len(dims)) if len(dims[d]) != 1), None)
    if m is None:
        np.copyto(out, v)
        return
    lead = (slice(None),) * m
    if any(len(iv) > _SLICED_INTERVALS for iv in dims[m:]):
        index: tuple[Any, ...] = (*lead, *_open_indices(v, dims, m))
        np.copyto(out, v[index])
        return
    pos = 0
    for a, b in dims[m]:
        _take(v[(*lead, slice(a, b))], dims, out[(*lead, slice(pos, pos + b - a))], m + 1)
        pos += b - a


def _open_indices(v: NDArray, dims: tuple[tuple[Interval, ...], ...], m: int) -> list[NDArray]:
    """Open (``np.ix_``-style) index arrays of dimensions ``m`` to the last one of several
    intervals (those of one interval already cut in ``v``): indexing ``v`` with them copies
    out just the box, never a temporary wider than it."""
    last = max(d for d in range(m, len(dims)) if len(dims[d]) != 1)
    picks = [
        _indices(dims[d]) if len(dims[d]) != 1 else np.arange(v.shape[d], dtype=np.int64)
        for d in range(m, last + 1)
    ]
    return list(np.ix_(*picks))
