"""The read planner: tensors asked for → byte ranges → merged runs → pieces → threads.

Every multi-tensor load goes through here (``load_file``, ``safe_open.read_tensors``,
``Reader.get_tensors``, sharded checkpoints, convert): a reader turns the tensors into
``(name, byte range, destination)`` jobs; :func:`plan` sorts them, merges neighbours into
runs (adjacent ranges always; ranges separated by a gap of at most the source's
``coalesce_gap`` when the bytes read for nothing stay below the bytes wanted, so a run never
reads more than twice what it needs), cuts each run into pieces at multiples of the source's
``io_chunk`` (absolute file offsets, so pieces line up with a chunk cache's grid) and
:func:`execute` runs the pieces on up to ``io_threads`` threads, every piece read straight
into its destination buffers.

Memory: the destinations are the caller's (the tensors being loaded); the planner adds one
scratch buffer that every skipped gap is read into (at most ``coalesce_gap`` bytes, shared
by all gaps and threads, its content thrown away), and nothing else. A source may hold a
bounded buffer per thread (a remote reply being received, an aligned bounce buffer).

A source tunes the plan with optional attributes (absent: the defaults):

* ``coalesce_gap`` (part of the Source protocol): the largest gap worth reading over;
* ``coalesce_waste``: how many bytes read for nothing a run may carry, as a fraction of
  the bytes it wants (default 1.0: a run never reads more than twice what it needs);
* ``io_chunk``: the piece size (default :data:`DEFAULT_CHUNK`);
* ``io_threads``: how many pieces may be read at once (default 1);
* ``will_read(ranges)``: called once before the reads with the runs' ``(start, stop)``
  byte ranges in order, for read-ahead hints.

Example:
    >>> from tensorfile.core.catalog import ByteRange
    >>> from tensorfile.sources import MemorySource
    >>> src = MemorySource(bytes(range(10)))
    >>> a, b = memoryview(bytearray(2)), memoryview(bytearray(3))
    >>> pieces = plan(src, src.readinto, [("a", ByteRange(0, 2), a), ("b", ByteRange(2, 5), b)])
    >>> len(pieces), execute(pieces), bytes(a), bytes(b)
    (1, None, b'\\x00\\x01', b'\\x02\\x03\\x04')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from . import progress
from .catalog import ByteRange
from .errors import InvalidArgumentError
from .parallel import in_threads

__all__ = [
    "DEFAULT_CHUNK",
    "Job",
    "Pending",
    "Piece",
    "execute",
    "is_scratch",
    "plan",
    "threads_for",
]

T = TypeVar("T")

DEFAULT_CHUNK = 16 << 20
"""Bytes per piece for a source that does not say (``io_chunk``)."""

PROGRESS_MIN_BYTES = 64 << 20
"""Plans smaller than this never show progress (nor start its thread)."""

MAX_THREADS = 64
"""The most threads one plan runs, whatever its sources ask for."""

Job = tuple[str, ByteRange, memoryview]
"""One tensor's bytes: its name (for messages), where they are, where they go."""

ReadFn = Callable[[int, list[memoryview]], None]
"""What reads a piece: ``read(offset, buffers)`` fills the buffers from consecutive bytes."""


@dataclass(frozen=True, slots=True)
class Piece:
    """One read: ``buffers`` filled from consecutive bytes at ``offset`` by ``read``."""

    read: ReadFn
    offset: int
    buffers: list[memoryview]
    nbytes: int
    source: Any = field(repr=False, default=None)


@dataclass(slots=True)
class Pending(Generic[T]):
    """A read planned but not run: :func:`execute` the pieces (possibly together with other
    readers' pieces), then call ``finish`` for the results (checks, decoding, wrapping)."""

    pieces: list[Piece]
    finish: Callable[[], list[T]]

    def run(self) -> list[T]:
        """Execute the pieces, then finish."""
        execute(self.pieces)
        return self.finish()


class _Scratch(bytearray):
    """The shared buffer skipped gaps are read into (a type of its own, so that a reader can
    tell it from a destination: :func:`is_scratch`)."""


def is_scratch(view: memoryview) -> bool:
    """Whether ``view`` is (part of) a plan's scratch buffer: bytes read for nothing, which
    another thread may be overwriting (a reader that looks at what it read skips them).

    Example:
        >>> is_scratch(memoryview(bytearray(4))), is_scratch(memoryview(_Scratch(4))[1:])
        (False, True)
    """
    return isinstance(view.obj, _Scratch)


def _hint(source: object, attr: str, default: int) -> int:
    value = getattr(source, attr, default)
    usable = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if usable else default


def plan(source: object, read: ReadFn, jobs: Sequence[Job]) -> list[Piece]:
    """The pieces that fill every job's buffer from ``source`` through ``read``.

    Jobs may come in any order and may be empty; a buffer whose size is not its range's
    length is an :class:`~tensorfile.errors.InvalidArgumentError`. ``read`` is usually
    the reader's (its errors are the format's), ``source`` gives the tuning attributes.
    """
    ordered = sorted(jobs, key=lambda job: job[1].start)
    gap_limit = max(0, _hint(source, "coalesce_gap", 0))
    waste = getattr(source, "coalesce_waste", 1.0)
    if not isinstance(waste, int | float) or isinstance(waste, bool) or not 0 <= waste <= 1:
        waste = 1.0
    chunk = _hint(source, "io_chunk", DEFAULT_CHUNK)
    scratch: memoryview | None = None
    runs: list[tuple[int, list[memoryview]]] = []
    run: list[memoryview] = []
    run_start = run_stop = 0
    wanted = skipped = 0
    for name, rng, view in ordered:
        if view.nbytes != rng.length:
            raise InvalidArgumentError(
                f"buffer for {name!r} is {view.nbytes} bytes, expected {rng.length}"
            )
        if rng.length == 0:
            continue
        flat = view if view.ndim == 1 and view.format == "B" else view.cast("B")
        gap = rng.start - run_stop
        if run and gap == 0:
            run.append(flat)
        elif run and 0 < gap <= gap_limit and skipped + gap <= waste * (wanted + rng.length):
            # one request over a small gap beats two (remote sources): the gap's bytes go
            # to the shared scratch buffer, and never more than the bytes wanted
            if scratch is None:
                scratch = memoryview(_Scratch(gap_limit))
            run.append(scratch[:gap])
            run.append(flat)
            skipped += gap
        else:
            if run:
                runs.append((run_start, run))
            run, run_start, wanted, skipped = [flat], rng.start, 0, 0
        run_stop = rng.stop
        wanted += rng.length
    if run:
        runs.append((run_start, run))
    will_read = getattr(source, "will_read", None)
    if callable(will_read) and runs:
        will_read([(start, start + sum(b.nbytes for b in bufs)) for start, bufs in runs])
    return [
        Piece(read, offset, bufs, sum(b.nbytes for b in bufs), source)
        for start, bufs in runs
        for offset, bufs in _cut(start, bufs, chunk)
    ]


def _cut(start: int, buffers: list[memoryview], chunk: int) -> list[tuple[int, list[memoryview]]]:
    """``buffers`` (consecutive bytes from ``start``) cut at multiples of ``chunk``."""
    out: list[tuple[int, list[memoryview]]] = []
    pos = start
    piece: list[memoryview] = []
    piece_start = start
    room = chunk - start % chunk
    for buf in buffers:
        at = 0
        while at < buf.nbytes:
            take = min(room, buf.nbytes - at)
            piece.append(buf[at : at + take])
            at += take
            pos += take
            room -= take
            if room == 0:
                out.append((piece_start, piece))
                piece, piece_start, room = [], pos, chunk
    if piece:
        out.append((piece_start, piece))
    return out


def threads_for(pieces: Sequence[Piece]) -> int:
    """How many threads run ``pieces``: the most any of their sources asks for
    (``io_threads``), at most one per piece and at most :data:`MAX_THREADS`."""
    if len(pieces) < 2:
        return 1
    wanted = max(_hint(p.source, "io_threads", 1) for p in pieces)
    return max(1, min(wanted, len(pieces), MAX_THREADS))


def execute(pieces: Sequence[Piece], threads: int | None = None) -> None:
    """Run every piece, on up to ``threads`` threads (default :func:`threads_for`); the
    first failure stops the pieces not yet started and is raised once all threads are done
    (no thread outlives the call).

    Pieces are taken in order, so the file is read front to back by the pool as a whole, and
    a thread that the host deschedules holds up one piece, not a fixed share of the load.
    A plan of :data:`PROGRESS_MIN_BYTES` or more reports its bytes to
    :func:`tensorfile.core.progress.task` (a line on a terminal once it runs a few seconds).
    """
    n = threads_for(pieces) if threads is None else max(1, threads)
    total = sum(p.nbytes for p in pieces)
    if total < PROGRESS_MIN_BYTES:
        _run(pieces, n, None)
        return
    name = getattr(pieces[0].source, "name", "")
    label = f"loading {name}" if isinstance(name, str) and name else "loading"
    with progress.task(total, label, delay=progress.DELAY) as bar:
        _run(pieces, n, bar)


def _run(pieces: Sequence[Piece], n: int, bar: progress.Task | None) -> None:
    """Read every piece on ``n`` threads, telling ``bar`` the bytes of each one done."""

    def read(p: Piece) -> None:
        p.read(p.offset, p.buffers)
        if bar is not None:
            bar.advance(p.nbytes)

    if n == 1:
        for p in pieces:
            read(p)
    else:
        in_threads(n, pieces, read)
