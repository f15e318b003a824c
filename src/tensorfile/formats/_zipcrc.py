"""The CRC-32 of a stored zip member, pieced together from the reads that cover it.

A stored (uncompressed) ``.npz`` member is read in place, and rarely in one read: the read
planner cuts a big tensor into pieces read on several threads, the content id reads 16 MiB
at a time, a slice reads a few rows. :class:`MemberCrc` takes the CRC-32 of each piece as
it is read (whatever the order, overlaps counted once), joins adjacent pieces with
:func:`crc32_combine`, and once the pieces cover the member whole gives its CRC-32, to be
compared with the one the archive records. Nothing is read twice for it, and nothing is
kept but three numbers per run of bytes read.

Example:
    >>> import zlib
    >>> data = b"header" + bytes(range(100))
    >>> check = CrcCheck(6, 106, zlib.crc32(b"header"), zlib.crc32(data), "member w.npy")
    >>> m = MemberCrc(check)
    >>> m.add(56, memoryview(data)[56:]) is None  # the second half first
    True
    >>> m.add(6, memoryview(data)[6:56]) == check.expected  # now whole: the member's CRC
    True
    >>> crc32_combine(zlib.crc32(b"ab"), zlib.crc32(b"cd"), 2) == zlib.crc32(b"abcd")
    True
"""

from __future__ import annotations

import bisect
import threading
import zlib
from typing import NamedTuple

__all__ = ["MAX_RUNS", "CrcCheck", "MemberCrc", "crc32_combine"]

_POLY = 0xEDB88320  # CRC-32 (zip, zlib), bit-reflected


def _multiply(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial (bit-reflected: bit 31 is x^0)."""
    m, p = 1 << 31, 0
    while m and a:
        if a & m:
            p ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    """``x^(2^k)`` modulo the polynomial, for k = 0..63."""
    out, p = [], 1 << 30  # x^1
    for _ in range(64):
        out.append(p)
        p = _multiply(p, p)
    return out


_X2N = _powers()


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1`` (of ``A``), ``crc2`` (of ``B``) and ``len2``
    (``len(B)``): zlib's ``crc32_combine``, which Python's ``zlib`` does not expose."""
    shift, k, n = 1 << 31, 3, len2  # x^(8 * len2): the product of x^(2^k) over n's bits
    while n:
        if n & 1:
            shift = _multiply(_X2N[k % 64], shift)
        n >>= 1
        k += 1
    return _multiply(shift, crc1) ^ crc2


class CrcCheck(NamedTuple):
    """A zip member stored in place: its data ``[start, stop)`` in the file, the CRC-32 of
    the member's bytes before them (``prefix_crc``: the ``.npy`` header) and the CRC-32 the
    archive states for the whole member; ``what`` names it in messages."""

    start: int
    stop: int
    prefix_crc: int
    expected: int
    what: str


MAX_RUNS = 4096
"""The most separate runs of bytes a member keeps the CRC-32 of (reads of scattered
slices); past that it starts over, so that memory stays bounded (a whole read, whose
pieces are adjacent, still completes)."""


class MemberCrc:
    """The runs of one member's data read so far, each ``(start, stop, crc)``, disjoint and
    in order; safe to feed from several threads (the CRC-32s are taken outside the lock)."""

    def __init__(self, check: CrcCheck) -> None:
        self.check = check
        self._starts: list[int] = []
        self._runs: list[tuple[int, int, int]] = []
        self._lock = threading.Lock()

    def add(self, offset: int, data: memoryview) -> int | None:
        """Take bytes ``data`` read at file ``offset`` (only those inside the member
        count); the member's CRC-32 (its prefix included) once the runs cover it whole
        (returned once), else None."""
        lo = max(offset, self.check.start)
        hi = min(offset + data.nbytes, self.check.stop)
        if lo >= hi:
            return None
        with self._lock:
            gaps = self._gaps(lo, hi)  # the parts no run holds yet
        if not gaps:
            return None
        runs = [(a, b, zlib.crc32(data[a - offset : b - offset])) for a, b in gaps]
        with self._lock:
            for a, b, crc in runs:
                now = self._gaps(a, b)  # (another thread may have read some of it since)
                if now == [(a, b)]:
                    self._insert(a, b, crc)
                    continue
                for c, d in now:
                    self._insert(c, d, zlib.crc32(data[c - offset : d - offset]))
            if len(self._runs) > MAX_RUNS:
                self._starts, self._runs = [], []
                return None
            whole = self._runs[0] if len(self._runs) == 1 else None
        if whole is None or whole[:2] != (self.check.start, self.check.stop):
            return None
        return crc32_combine(self.check.prefix_crc, whole[2], whole[1] - whole[0])

    def _gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` no run covers."""
        out = []
        pos = lo
        i = max(0, bisect.bisect_right(self._starts, lo) - 1)
        while i < len(self._runs) and self._runs[i][0] < hi:
            start, stop, _ = self._runs[i]
            if start > pos:
                out.append((pos, start))
            pos = max(pos, stop)
            i += 1
        if pos < hi:
            out.append((pos, hi))
        return out

    def _insert(self, start: int, stop: int, crc: int) -> None:
        """Add the run ``[start, stop)`` (disjoint from the others), joined with the runs
        that end where it starts and start where it ends."""
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self._runs[i - 1][1] == start:  # joins the run before
            before = self._runs[i - 1]
            start, crc = before[0], crc32_combine(before[2], crc, stop - start)
            i -= 1
            del self._starts[i], self._runs[i]
        if i < len(self._runs) and self._runs[i][0] == stop:  # joins the run after
            after = self._runs[i]
            crc = crc32_combine(crc, after[2], after[1] - after[0])
            stop = after[1]
            del self._starts[i], self._runs[i]
        self._starts.insert(i, start)
        self._runs.insert(i, (start, stop, crc))
