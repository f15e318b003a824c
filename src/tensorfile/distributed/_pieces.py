"""A rank's bytes of a file as a few objects, not one per row: a :class:`Piece` is the runs of
one shard (``runs`` runs of ``length`` bytes at offsets an arithmetic progression describes,
or a numpy array where they are not one) with the runs' bytes one after the other.

A ``Shard(1)`` piece of a matrix is one run per row: a million rows stay one ``Piece``
(three integers and the bytes), clipped to a part by :func:`clip` (at most three pieces:
a partial first run, the whole ones, a partial last run) and copied into a part's buffer
by :func:`copy_into` with one strided numpy copy.

Example:
    >>> import numpy as np
    >>> p = piece(0, 100, np.array([0, 8, 16], np.int64), 4, memoryview(b"aaaabbbbcccc"))
    >>> p.starts, p.runs, extent(p)
    ((100, 8), 3, (100, 120))
    >>> buf = np.zeros(12, np.uint8)
    >>> copy_into(buf, 102, p), bytes(buf)
    (6, b'aa\\x00\\x00\\x00\\x00bbbb\\x00\\x00')
    >>> [(q.starts, q.runs, q.length, bytes(q.data)) for q in clip(p, 102, 114)]
    [((102, 2), 1, 2, b'aa'), ((108, 8), 1, 4, b'bbbb')]
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray

__all__ = ["Piece", "clip", "copy_into", "extent", "piece"]

_INDEX_BYTES = 4 << 20
"""Bytes copied per step where the runs are no progression (an index of 8 bytes a byte)."""


class Piece(NamedTuple):
    """``runs`` runs of ``length`` bytes of file ``file_no``, run ``i`` at the absolute
    offset ``first + i * step`` (``starts == (first, step)``) or ``starts[i]`` (an array);
    ``data`` holds the runs one after the other."""

    file_no: int
    starts: tuple[int, int] | NDArray[np.int64]
    runs: int
    length: int
    data: Any  # (a buffer of runs * length bytes: memoryview, bytes or a numpy array)


def piece(file_no: int, base: int, starts: NDArray[np.int64], length: int, data: Any) -> Piece:
    """The piece of the runs ``base + starts`` (sorted) of ``length`` bytes each, whose
    bytes are ``data``: as a progression where the runs are evenly spaced (they are for
    every box of a matrix)."""
    n = int(starts.size)
    if n <= 1:
        return Piece(file_no, (base + (int(starts[0]) if n else 0), length), n, length, data)
    steps = np.diff(starts)
    step = int(steps[0])
    if bool((steps == step).all()):
        return Piece(file_no, (base + int(starts[0]), step), n, length, data)
    return Piece(file_no, base + starts, n, length, data)


def _start(p: Piece, i: int) -> int:
    if isinstance(p.starts, tuple):
        return p.starts[0] + i * p.starts[1]
    return int(p.starts[i])


def extent(p: Piece) -> tuple[int, int]:
    """The bytes ``[first, stop)`` the piece's runs lie in (``(0, 0)``: no run)."""
    if p.runs == 0 or p.length == 0:
        return 0, 0
    return _start(p, 0), _start(p, p.runs - 1) + p.length


def _runs_in(p: Piece, a: int, b: int) -> tuple[int, int]:
    """The runs ``i0 .. i1`` of ``p`` that hold bytes of ``[a, b)``."""
    if p.runs == 0 or p.length == 0 or a >= b:
        return 0, 0
    if isinstance(p.starts, tuple):
        first, step = p.starts
        step = max(step, 1)
        i0 = max(0, (a - first - p.length) // step + 1)  # first run ending after a
        i1 = min(p.runs, max(0, -(-(b - first) // step)))  # runs starting before b
        return i0, i1
    i0 = int(np.searchsorted(p.starts, a - p.length, side="right"))
    i1 = int(np.searchsorted(p.starts, b, side="left"))
    return i0, i1


def _rows(p: Piece) -> NDArray[np.uint8]:
    flat = np.frombuffer(p.data, np.uint8) if not isinstance(p.data, np.ndarray) else p.data
    return flat.reshape(-1).view(np.uint8).reshape(p.runs, p.length)


def _split(p: Piece, a: int, b: int) -> tuple[list[tuple[int, int, int]], int, int]:
    """The runs of ``p`` in ``[a, b)``: partial ones as ``(run, lo, hi)`` (absolute bytes),
    and the whole ones ``j0 .. j1``."""
    i0, i1 = _runs_in(p, a, b)
    if i0 >= i1:
        return [], 0, 0
    partial = []
    j0, j1 = i0, i1
    for i in sorted({i0, i1 - 1}):
        s = _start(p, i)
        lo, hi = max(a, s), min(b, s + p.length)
        if (lo, hi) != (s, s + p.length):
            partial.append((i, lo, hi))
            if i == j0:
                j0 += 1
            else:
                j1 -= 1
    return partial, j0, max(j0, j1)


def clip(p: Piece, a: int, b: int) -> list[Piece]:
    """The bytes of ``p`` inside ``[a, b)``, each piece's bytes contiguous (copied): at
    most three pieces."""
    partial, j0, j1 = _split(p, a, b)
    rows = _rows(p)
    out = []
    for i, lo, hi in partial:
        s = _start(p, i)
        data = rows[i, lo - s : hi - s].copy()
        out.append(Piece(p.file_no, (lo, hi - lo), 1, hi - lo, data))
    if j1 > j0:
        starts = (_start(p, j0), p.starts[1]) if isinstance(p.starts, tuple) else p.starts[j0:j1]
        out.append(Piece(p.file_no, starts, j1 - j0, p.length, rows[j0:j1].copy()))
    out.sort(key=lambda q: extent(q)[0])
    return out


def copy_into(buf: NDArray[np.uint8], a: int, p: Piece) -> int:
    """Copy the bytes of ``p`` inside ``[a, a + len(buf))`` to their places in ``buf`` (which
    holds those bytes of the file); the bytes copied."""
    partial, j0, j1 = _split(p, a, a + buf.size)
    rows = _rows(p)
    got = 0
    for i, lo, hi in partial:
        s = _start(p, i)
        buf[lo - a : hi - a] = rows[i, lo - s : hi - s]
        got += hi - lo
    n = j1 - j0
    if n <= 0:
        return got
    if isinstance(p.starts, tuple):
        at = _start(p, j0) - a
        view = as_strided(buf[at:], shape=(n, p.length), strides=(p.starts[1], 1))
        view[...] = rows[j0:j1]
    else:  # (runs of a box with two partial outer dimensions: an index, a few MiB at a time)
        step = max(1, _INDEX_BYTES // p.length)
        across = np.arange(p.length, dtype=np.int64)
        for lo in range(j0, j1, step):
            hi = min(j1, lo + step)
            index = (p.starts[lo:hi] - a)[:, None] + across[None, :]
            buf[index] = rows[lo:hi]
    return got + n * p.length
