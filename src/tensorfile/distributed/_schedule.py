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


def _locate(union: tuple[Interval, ...], iv: Interval) -> Interval:
    """``iv`` (inside one interval of ``union``) in the coordinates of the union's
    concatenation."""
    pos = 0
    for a, b in union:
        if a <= iv[0] and iv[1] <= b:
            return pos + iv[0] - a, pos + iv[1] - a
        pos += b - a
    raise ValueError(f"interval {iv} is outside {union}")  # (a union holds each of its parts)


def _cut(rows: tuple[Interval, ...], per_block: int) -> list[tuple[Interval, ...]]:
    """The union's rows in runs of at most ``per_block`` rows (a run may span intervals)."""
    blocks: list[tuple[Interval, ...]] = []
    current: list[Interval] = []
    room = per_block
    for a, b in rows:
        while a < b:
            take = min(room, b - a)
            current.append((a, a + take))
            a += take
            room -= take
            if room == 0:
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
        row_runs = _cut(union[0], per_block if t.raw else 1 << 62) if nd else [()]
        for rows in row_runs:
            inner = union[1:]
            here = [r for r in needers if not nd or _meets(wants[r][t.name][0], rows)]
            if nd > 1 and t.raw:  # the other dimensions: what the ranks with rows here want
                inner = tuple(
                    merge([iv for r in here for iv in wants[r][t.name][d]]) for d in range(1, nd)
                )
            dims = (rows, *inner) if nd else ()
            count = math.prod(sum(b - a for a, b in u) for u in inner) * t.itemsize
            nbytes = count * sum(b - a for a, b in rows) if nd else t.itemsize
            block = Block(len(blocks), t.name, -1, dims, nbytes)
            for r in here:
                block.pieces.extend(_pieces(r, wants[r][t.name], dims, t.itemsize))
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


def _meets(mine: tuple[Interval, ...], rows: tuple[Interval, ...]) -> bool:
    """Whether two lists of intervals share an element."""
    return any(max(a, c) < min(b, d) for a, b in mine for c, d in rows)


def _owner(takers: list[int], load: list[int], slack: int) -> int:
    """The rank to read a block: the taker given the fewest bytes so far, unless it has
    been given more than ``slack`` bytes beyond the least loaded rank (which reads it
    then, and sends it on)."""
    taker = min(takers, key=lambda r: (load[r], r))
    least = min(range(len(load)), key=lambda r: (load[r], r))
    return least if load[taker] - load[least] > slack else taker


def _numel(dims: Dims) -> int:
    return math.prod(sum(b - a for a, b in iv) for iv in dims)


def _pieces(rank: int, want: Dims, block: Dims, itemsize: int) -> list[Piece]:
    """What of ``block`` (tensor coordinates) ``rank``, which wants ``want``, gets."""
    if not block:  # a 0-d tensor: all of it
        return [Piece(rank, (0, 1), (), (0, 1), itemsize)]
    inner_numel = math.prod(sum(b - a for a, b in iv) for iv in want[1:])
    if inner_numel == 0:
        return []
    union_inner = block[1:]
    inner = tuple(
        tuple(_locate(u, iv) for iv in ivs if iv[1] > iv[0])
        for u, ivs in zip(union_inner, want[1:], strict=True)
    )
    out: list[Piece] = []
    at = 0  # the rank's result row where its current interval starts
    for a, b in want[0]:
        pos = 0  # the block row where the block's current interval starts
        for c, d in block[0]:
            lo, hi = max(a, c), min(b, d)
            if lo < hi:
                out.append(
                    Piece(
                        rank,
                        (pos + lo - c, pos + hi - c),
                        inner,
                        (at + lo - a, at + hi - a),
                        (hi - lo) * inner_numel * itemsize,
                    )
                )
            pos += d - c
        at += b - a
    return out


def _whole_for_all(block: Block, world: int) -> bool:
    """Whether every rank gets the whole block, as one piece."""
    if len(block.pieces) != world or {p.rank for p in block.pieces} != set(range(world)):
        return False
    full_rows = (0, sum(b - a for a, b in block.dims[0])) if block.dims else (0, 1)
    full_inner = tuple(((0, sum(b - a for a, b in u)),) for u in block.dims[1:])
    return all(p.src == full_rows and p.inner == full_inner for p in block.pieces)
