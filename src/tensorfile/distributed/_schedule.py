"""Who reads what, and who sends it to whom: the schedule of a cooperative load.

Every rank of the group computes the same schedule from the same inputs: each rank's wanted
intervals per tensor (its plan, as regions: :mod:`tensorfile.core.selection`) and the
checkpoint's catalog. For each tensor some rank wants:

* the *union* of what the ranks want, per dimension (their intervals merged), is what is
  read from storage, and only once: its rows (dimension 0) are cut into :class:`Block`\\ s
  of about ``block_bytes``, and each block is read by one rank, its *owner*: the rank that
  wants part of it and has been given the fewest bytes so far, unless that rank has been
  given more than ``block_bytes`` beyond the least loaded rank, which then reads it; of
  the other dimensions a block holds what the ranks that want some of its rows want (ranks
  that want other rows and other columns do not make it read their columns);
* each rank that wants part of a block gets one :class:`Piece` per interval of its rows
  that meets the block: rows of the block (and its own intervals of the other dimensions)
  that land on consecutive rows of its result, so a piece is received straight into place;
* a block that every rank of the group wants whole is *broadcast*; the other pieces go
  point to point; the owner copies its own.

A tensor that is not stored raw (compressed, bit-packed) is one block, read whole (decoded).

Example:
    >>> from tensorfile.core.selection import region
    >>> want = [{"w": region((8, 4), slice(0, 4)).dims}, {"w": region((8, 4), slice(4, 8)).dims}]
    >>> s = schedule(want, [Tensor("w", (8, 4), 4, True)], block_bytes=64)
    >>> [(b.owner, b.dims[0]) for b in s.blocks]
    [(0, ((0, 4),)), (1, ((4, 8),))]
    >>> [(p.rank, p.rows) for p in s.blocks[1].pieces]
    [(1, (0, 4))]
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tensorfile.core.selection.region import Interval

__all__ = ["Block", "Piece", "Schedule", "Tensor", "merge", "schedule"]

Dims = tuple[tuple[Interval, ...], ...]


@dataclass(frozen=True, slots=True)
class Tensor:
    """What the schedule knows of a tensor: its name, shape, bytes per element, and whether
    its bytes are its elements (else it is read whole and decoded)."""

    name: str
    shape: tuple[int, ...]
    itemsize: int
    raw: bool


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a block for ``rank``: the block's rows ``src`` (start, stop) with the rank's
    intervals ``inner`` of the other dimensions (in the block's coordinates), which are its
    result's rows ``rows``; ``nbytes`` of them."""

    rank: int
    src: Interval
    inner: Dims
    rows: Interval
    nbytes: int


@dataclass(slots=True)
class Block:
    """Part of a tensor read by ``owner``: the region ``dims`` (tensor coordinates; dimension
    0 a run of the union's rows), ``nbytes`` of it, and the pieces it is sent as."""

    index: int
    name: str
    owner: int
    dims: Dims
    nbytes: int
    pieces: list[Piece] = field(default_factory=list)
    broadcast: bool = False


@dataclass(slots=True)
class Schedule:
    """The blocks of a load, in the order every rank walks them."""

    blocks: list[Block]

    def read_by(self, rank: int) -> int:
        """The bytes ``rank`` reads from storage."""
        return sum(b.nbytes for b in self.blocks if b.owner == rank)


def merge(intervals: Sequence[Interval]) -> tuple[Interval, ...]:
    """``intervals`` sorted, the overlapping and touching ones merged, the empty dropped.

    Example:
        >>> merge([(4, 6), (0, 2), (1, 3), (6, 7), (9, 9)])
        ((0, 3), (4, 7))
    """
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


class _Union:
    """Merged intervals, for placing any interval inside one of them in the coordinates of
    their concatenation (a binary search, never a scan)."""

    def __init__(self, intervals: tuple[Interval, ...]) -> None:
        self.intervals = intervals
        self.starts = [a for a, _ in intervals]
        self.at = list(itertools.accumulate((b - a for a, b in intervals), initial=0))

    def locate(self, iv: Interval) -> Interval:
        """``iv`` (inside one interval of the union) where it lands in the concatenation."""
        k = bisect.bisect_right(self.starts, iv[0]) - 1
        a, b = self.intervals[k] if k >= 0 else (0, -1)
        if not (a <= iv[0] and iv[1] <= b):  # (a union holds each of its parts)
            raise ValueError(f"interval {iv} is outside {self.intervals}")
        return self.at[k] + iv[0] - a, self.at[k] + iv[1] - a


class _Rows:
    """One rank's row intervals of a tensor (with where each lands in its result), asked,
    block after block in increasing row order, which meet a block: a sweep, never a scan
    of every interval per block."""

    def __init__(self, rows: tuple[Interval, ...]) -> None:
        items, at = [], 0
        for a, b in rows:
            if b > a:
                items.append((a, b, at))
            at += b - a
        self.items = sorted(items)
        self.next = 0
        self.active: list[tuple[int, int, int]] = []

    def meeting(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The intervals ``(start, stop, result row)`` that meet rows ``lo .. hi``."""
        while self.next < len(self.items) and self.items[self.next][0] < hi:
            self.active.append(self.items[self.next])
            self.next += 1
        self.active = [it for it in self.active if it[1] > lo]
        return [it for it in self.active if it[0] < hi]


def _cut(
    rows: tuple[Interval, ...], per_block: int, breaks: Sequence[int] = ()
) -> list[tuple[Interval, ...]]:
    """The union's rows in runs of at most ``per_block`` rows (a run may span intervals),
    also cut at each of the sorted rows ``breaks`` (where a rank's rows start or stop: a
    block then holds rows the same ranks want)."""
    blocks: list[tuple[Interval, ...]] = []
    current: list[Interval] = []
    room = per_block
    k = 0
    for a, b in rows:
        while a < b:
            while k < len(breaks) and breaks[k] <= a:
                k += 1
            if current and k and breaks[k - 1] == a and current[-1][1] <= a:
                blocks.append(tuple(current))  # (a rank's rows start or stop here)
                current, room = [], per_block
            stop = min(b, a + room, breaks[k] if k < len(breaks) else b)
            current.append((a, stop))
            room -= stop - a
            a = stop
            if room == 0 or (k < len(breaks) and breaks[k] == a):
                blocks.append(tuple(current))
                current, room = [], per_block
    if current:
        blocks.append(tuple(current))
    return blocks


def schedule(
    wants: Sequence[dict[str, Dims]], tensors: Sequence[Tensor], block_bytes: int
) -> Schedule:
    """The schedule of a load where rank ``r`` wants ``wants[r]`` (tensor name to its
    region's intervals per dimension), of ``tensors`` (in the order to read them)."""
    world = len(wants)
    load = [0] * world
    blocks: list[Block] = []
    for t in tensors:
        needers = [r for r in range(world) if t.name in wants[r] and _numel(wants[r][t.name])]
        if not needers:
            continue
        nd = len(t.shape)
        if nd == 0 or not t.raw:
            union: Dims = tuple(((0, n),) for n in t.shape)
        else:
            union = tuple(
                merge([iv for r in needers for iv in wants[r][t.name][d]]) for d in range(nd)
            )
        row_bytes = t.itemsize * math.prod(sum(b - a for a, b in u) for u in union[1:])
        per_block = max(1, block_bytes // max(row_bytes, 1))
        breaks = _breaks([merge(wants[r][t.name][0]) for r in needers]) if nd and t.raw else []
        row_runs = _cut(union[0], per_block if t.raw else 1 << 62, breaks) if nd else [()]
        rows_of = {r: _Rows(wants[r][t.name][0]) for r in needers} if nd else {}
        inner_of: dict[tuple[int, ...], tuple[Dims, int]] = {}
        placed: dict[tuple[int, tuple[int, ...]], Dims] = {}
        for rows in row_runs:
            meets = {r: rows_of[r].meeting(rows[0][0], rows[-1][1]) for r in needers} if nd else {}
            here = tuple(r for r in needers if not nd or meets[r])
            if not here:
                continue
            if here not in inner_of:  # the other dimensions: what the ranks with rows here want
                inner = union[1:]
                if nd > 1 and t.raw:
                    inner = tuple(
                        merge([iv for r in here for iv in wants[r][t.name][d]])
                        for d in range(1, nd)
                    )
                count = math.prod(sum(b - a for a, b in u) for u in inner) * t.itemsize
                inner_of[here] = (inner, count)
            inner, count = inner_of[here]
            dims = (rows, *inner) if nd else ()
            nbytes = count * sum(b - a for a, b in rows) if nd else t.itemsize
            block = Block(len(blocks), t.name, -1, dims, nbytes)
            if not nd:
                block.pieces = [Piece(r, (0, 1), (), (0, 1), t.itemsize) for r in here]
            for r in here if nd else ():
                key = (r, here)
                if key not in placed:
                    placed[key] = _place(wants[r][t.name][1:], inner)
                block.pieces.extend(_pieces(r, meets[r], rows, placed[key], wants[r][t.name], t))
            takers = sorted({p.rank for p in block.pieces})
            if not takers:
                continue
            block.owner = _owner(takers, load, block_bytes)
            load[block.owner] += nbytes
            block.broadcast = world > 1 and _whole_for_all(block, world)
            blocks.append(block)
    for i, b in enumerate(blocks):
        b.index = i
    return Schedule(blocks)


def _breaks(rows: list[tuple[Interval, ...]]) -> list[int]:
    """The rows where the set of ranks that want a row changes (each rank's ``rows``
    merged): blocks are cut there, so that a block holds rows the same ranks want (rows no
    rank wants, between, change nothing).

    Example:
        >>> _breaks([((0, 4), (6, 8)), ((4, 6),)]), _breaks([((0, 2), (4, 6))])
        ([4, 6], [])
    """
    points = sorted({x for ivs in rows for iv in ivs for x in iv})
    at = [0] * len(rows)
    out: list[int] = []
    before: frozenset[int] | None = None
    for lo, _ in itertools.pairwise(points):
        cover = set()
        for r, ivs in enumerate(rows):
            while at[r] < len(ivs) and ivs[at[r]][1] <= lo:
                at[r] += 1
            if at[r] < len(ivs) and ivs[at[r]][0] <= lo:
                cover.add(r)
        if not cover:
            continue
        now = frozenset(cover)
        if before is not None and now != before:
            out.append(lo)
        before = now
    return out


def _owner(takers: list[int], load: list[int], slack: int) -> int:
    """The rank to read a block: the taker given the fewest bytes so far, unless it has
    been given more than ``slack`` bytes beyond the least loaded rank (which reads it
    then, and sends it on)."""
    taker = min(takers, key=lambda r: (load[r], r))
    least = min(range(len(load)), key=lambda r: (load[r], r))
    return least if load[taker] - load[least] > slack else taker


def _numel(dims: Dims) -> int:
    return math.prod(sum(b - a for a, b in iv) for iv in dims)


def _place(want: Dims, inner: Dims) -> Dims:
    """A rank's intervals of the dimensions after the first, in the coordinates of a
    block's (``inner``: the merged intervals of those dimensions)."""
    return tuple(
        tuple(u.locate(iv) for iv in ivs if iv[1] > iv[0])
        for u, ivs in zip(map(_Union, inner), want, strict=True)
    )


def _pieces(
    rank: int,
    meets: list[tuple[int, int, int]],
    rows: tuple[Interval, ...],
    inner: Dims,
    want: Dims,
    t: Tensor,
) -> list[Piece]:
    """What of a block of rows ``rows`` ``rank`` gets: one piece per meeting of one of its
    row intervals (``meets``: start, stop, result row) with one of the block's."""
    inner_numel = math.prod(sum(b - a for a, b in iv) for iv in want[1:])
    if inner_numel == 0:
        return []
    stops = [d for _, d in rows]
    at = list(itertools.accumulate((d - c for c, d in rows), initial=0))
    out: list[Piece] = []
    for a, b, row in meets:
        k = bisect.bisect_right(stops, a)  # the first block interval that ends after a
        while k < len(rows) and rows[k][0] < b:
            c, d = rows[k]
            lo, hi = max(a, c), min(b, d)
            if lo < hi:
                src = (at[k] + lo - c, at[k] + hi - c)
                size = (hi - lo) * inner_numel * t.itemsize
                out.append(Piece(rank, src, inner, (row + lo - a, row + hi - a), size))
            k += 1
    return out


def _whole_for_all(block: Block, world: int) -> bool:
    """Whether every rank gets the whole block, as one piece."""
    if len(block.pieces) != world or {p.rank for p in block.pieces} != set(range(world)):
        return False
    full_rows = (0, sum(b - a for a, b in block.dims[0])) if block.dims else (0, 1)
    full_inner = tuple(((0, sum(b - a for a, b in u)),) for u in block.dims[1:])
    return all(p.src == full_rows and p.inner == full_inner for p in block.pieces)
