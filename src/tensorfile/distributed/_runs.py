"""Where a box of a row-major tensor lies in its bytes: the byte runs of a chunk.

A chunk (a rank's shard, a piece to read) is a box ``offsets .. offsets + sizes`` of a
tensor of shape ``shape``. Its elements, row-major in the box, fall in the tensor's bytes as
equal runs: the dimensions after the innermost partial one are whole, so a run spans them.
A dim-0 shard is one run; a ``Shard(1)`` piece of a matrix is one run per row.

Example:
    >>> r = runs((4, 6), (1, 2), (2, 3), 4)
    >>> r.starts.tolist(), r.length, r.count
    ([32, 56], 12, 2)
    >>> runs((4, 6), (2, 0), (2, 6), 2).starts.tolist(), runs((), (), (), 8).length
    ([24], 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tensorfile.core.errors import InvalidArgumentError
from tensorfile.core.selection.region import Region
from tensorfile.core.selection.runs import runs as region_runs

__all__ = ["Runs", "box_view", "check_cover", "overlap", "runs"]


@dataclass(frozen=True)
class Runs:
    """Byte runs of a chunk: ``count`` runs of ``length`` bytes at ``starts`` (relative to
    the tensor's first byte); the chunk's own bytes are the runs one after the other."""

    starts: NDArray[np.int64]
    length: int

    @property
    def count(self) -> int:
        """How many runs."""
        return int(self.starts.size)

    @property
    def nbytes(self) -> int:
        """The chunk's bytes."""
        return self.count * self.length


def runs(
    shape: tuple[int, ...], offsets: tuple[int, ...], sizes: tuple[int, ...], itemsize: int
) -> Runs:
    """The byte runs of the box ``offsets``/``sizes`` of a tensor of ``shape`` whose
    elements are ``itemsize`` bytes (a 0-d tensor: one run of ``itemsize``; an empty box:
    no run): the box's region's runs (:func:`tensorfile.core.selection.runs.runs`), all of
    one length."""
    if math.prod(sizes) == 0 and shape:
        return Runs(np.zeros(0, np.int64), 0)
    dims = tuple(((o, o + n),) for o, n in zip(offsets, sizes, strict=True))
    starts, lengths = region_runs(Region(tuple(shape), dims, None, tuple(sizes)), itemsize)
    return Runs(starts, int(lengths[0]))


def check_cover(
    name: str,
    shape: tuple[int, ...],
    boxes: list[tuple[tuple[int, ...], tuple[int, ...]]],
) -> None:
    """That the ``(offsets, sizes)`` boxes of the tensor ``name`` of ``shape`` cover it
    exactly (each inside it, no two overlapping, together all of it), else an
    :class:`~tensorfile.errors.InvalidArgumentError` naming it: overlaps found by
    :func:`overlap` (memory: the boxes', never a row's).

    Example:
        >>> check_cover("w", (4, 2), [((0, 0), (4, 1)), ((0, 1), (4, 1))])
        >>> try:
        ...     check_cover("w", (4,), [((0,), (2,)), ((1,), (2,))])
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        tensor 'w': the ranks' shards [0:2] and [1:3] overlap
    """
    nd = len(shape)
    full = [b for b in boxes if math.prod(b[1]) > 0]
    for offs, sizes in full:
        if (
            len(offs) != nd
            or len(sizes) != nd
            or any(o < 0 or o + s > d for o, s, d in zip(offs, sizes, shape, strict=True))
        ):
            raise InvalidArgumentError(
                f"tensor {name!r}: a shard {_box(offs, sizes)} lies outside its shape {list(shape)}"
            )
    lo = np.array([b[0] for b in full], np.int64).reshape(len(full), nd)
    pair = overlap(lo, np.array([b[1] for b in full], np.int64).reshape(len(full), nd))
    if pair is not None:
        i, j = pair
        raise InvalidArgumentError(
            f"tensor {name!r}: the ranks' shards {_box(*full[i])} and {_box(*full[j])} overlap"
        )
    covered = sum(math.prod(b[1]) for b in full)
    if covered != math.prod(shape):
        raise InvalidArgumentError(
            f"tensor {name!r}: the ranks' shards hold {covered} of its {math.prod(shape)} "
            "elements; the rest would be published unwritten"
        )


_BLOCK = 128
"""Boxes compared with the others at once by :func:`overlap`."""


def overlap(starts: NDArray[np.int64], sizes: NDArray[np.int64]) -> tuple[int, int] | None:
    """Two of the boxes ``starts``/``sizes`` (one a row; empty boxes never count) that share
    an element, as their row indices ``(i, j)``, ``i < j``; None where none do. Sorted by
    their start in the dimension they are split most along, each block of boxes is compared
    with the boxes that start before the block's last end there (all at once, in numpy):
    never box against box in Python, never an n-by-n matrix.

    Example:
        >>> a = np.array([[0, 0], [2, 0], [1, 0]])
        >>> overlap(a, np.array([[2, 4], [2, 4], [1, 4]])), overlap(a[:2], np.full((2, 2), 2))
        ((0, 2), None)
    """
    live = np.flatnonzero((sizes > 0).all(axis=1) if sizes.shape[1] else np.ones(len(sizes), bool))
    if len(live) < 2:
        return None
    if starts.shape[1] == 0:
        return int(live[0]), int(live[1])  # (two 0-d boxes: the same element)
    starts, sizes = starts[live], sizes[live]
    d = int(np.argmax([len(np.unique(starts[:, k])) for k in range(starts.shape[1])]))
    order = np.argsort(starts[:, d], kind="stable")
    lo, hi = starts[order], starts[order] + sizes[order]
    first = lo[:, d]
    for b in range(0, len(lo), _BLOCK):
        e = min(b + _BLOCK, len(lo))
        reach = int(np.searchsorted(first, hi[b:e, d].max(), side="left"))
        if reach <= b + 1:
            continue
        hit = (
            (lo[b:e, None, :] < hi[None, b:reach, :]) & (lo[None, b:reach, :] < hi[b:e, None, :])
        ).all(axis=2)
        # (a box against itself and each pair twice: only pairs i < j count)
        hit &= np.arange(b, reach)[None, :] > np.arange(b, e)[:, None]
        found = np.argwhere(hit)
        if len(found):
            i, j = sorted(int(live[order[b + k]]) for k in found[0])
            return i, j
    return None


def _box(offs: tuple[int, ...], sizes: tuple[int, ...]) -> str:
    return "[" + ", ".join(f"{o}:{o + s}" for o, s in zip(offs, sizes, strict=True)) + "]"


def _inner(shape: tuple[int, ...], sizes: tuple[int, ...]) -> int:
    """The innermost dimension the box does not span whole (the dimensions after it are
    whole: a run spans them)."""
    k = len(shape) - 1
    while k > 0 and sizes[k] == shape[k]:
        k -= 1
    return k


def _strides(shape: tuple[int, ...], itemsize: int) -> list[int]:
    return [math.prod(shape[d + 1 :]) * itemsize for d in range(len(shape))]


def box_view(
    span: NDArray[np.uint8], shape: tuple[int, ...], sizes: tuple[int, ...], itemsize: int
) -> NDArray[np.uint8]:
    """The runs of a box of ``sizes`` as a read-only strided view of ``span``, the tensor's
    bytes from the box's first byte to its last (a non-empty box of a tensor of ``shape``):
    one row of run bytes per run, its shape the box's outer dimensions and the run length,
    so that one numpy copy moves every run, with no object per run.

    Example:
        >>> span = np.arange(4 * 6 * 4, dtype=np.uint8)[32:68]  # runs((4, 6), (1, 2), (2, 3), 4)
        >>> box_view(span, (4, 6), (2, 3), 4)[:, :2].tolist()
        [[32, 33], [56, 57]]
    """
    k = _inner(shape, sizes)
    stride = _strides(shape, itemsize)
    return np.lib.stride_tricks.as_strided(
        span, (*sizes[:k], sizes[k] * stride[k]), (*stride[:k], 1), writeable=False
    )
