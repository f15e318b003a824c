"""The parts of a file uploaded by many ranks at once to an object store.

An object store takes no write at an offset: a file is one multipart upload whose parts
(at least 5 MiB each but the last, at most 10,000) are uploaded by anyone who has their
bytes. A part whose bytes all belong to one rank (a dim-0 shard of a large tensor) is that
rank's to upload; a part mixing several ranks' bytes (the header, small tensors, the rows
of a tensor split along an inner dimension) is assembled by the coordinator from the
pieces the ranks send it with their results.

:func:`plan_parts` cuts a file into parts from who owns which bytes, keeping the bytes that
travel to the coordinator few: a mixed part takes just enough of a large owned run to reach
the minimum size.

Example:
    >>> MiB = 1 << 20
    >>> owners = [Segment(0, 100, -1), Segment(100, 40 * MiB, 0), Segment(40 * MiB, 41 * MiB, 1)]
    >>> [(p.start, p.stop, p.owner) for p in plan_parts(owners, min_part=5 * MiB, target=32 * MiB)]
    [(0, 5242880, None), (5242880, 41943040, 0), (41943040, 42991616, None)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorfile.core.errors import InvalidArgumentError

__all__ = ["Part", "Segment", "plan_parts"]

COORDINATOR = -1
"""The owner of bytes only the coordinator has (the header)."""


@dataclass(frozen=True)
class Segment:
    """Bytes ``[start, stop)`` of a file that rank ``owner`` has."""

    start: int
    stop: int
    owner: int


@dataclass(frozen=True)
class Part:
    """Part ``[start, stop)``: uploaded by rank ``owner``, or (None) assembled by the
    coordinator."""

    start: int
    stop: int
    owner: int | None


def plan_parts(
    segments: Sequence[Segment], *, min_part: int, target: int, max_parts: int = 10_000
) -> list[Part]:
    """The parts of a file whose bytes ``segments`` (in order, covering it exactly) say who
    has: ``target`` bytes where one rank has them all, else parts of at least ``min_part``
    bytes assembled by the coordinator (the last part may be smaller)."""
    merged: list[Segment] = []
    pos = 0
    for s in segments:
        if s.start != pos or s.stop < s.start:
            raise InvalidArgumentError(f"segments leave a gap or overlap at byte {pos}")
        if s.stop == s.start:
            continue
        if merged and merged[-1].owner == s.owner:
            merged[-1] = Segment(merged[-1].start, s.stop, s.owner)
        else:
            merged.append(s)
        pos = s.stop
    size = pos
    parts: list[Part] = []
    i = 0
    pos = 0
    while pos < size:
        while merged[i].stop <= pos:
            i += 1
        s = merged[i]
        left = s.stop - pos
        if s.owner != COORDINATOR and left >= min_part:
            n = min(left, target)
            if left - n < min_part:
                n = left  # no small tail for a mixed part to carry
            parts.append(Part(pos, pos + n, s.owner))
            pos += n
            continue
        start = pos
        while pos < size and pos - start < min_part:
            while merged[i].stop <= pos:
                i += 1
            s = merged[i]
            take = s.stop - pos
            need = min_part - (pos - start)
            if s.owner != COORDINATOR and take - need >= min_part:
                take = need  # of a large owned run, just what the part needs
            pos += take
        parts.append(Part(start, pos, None))
    if len(parts) > max_parts:
        raise InvalidArgumentError(
            f"a file of {size:,} bytes would take {len(parts):,} parts (at most {max_parts:,})"
        )
    return parts
