"""The Source protocol: where a reader gets bytes from.

A source hands out byte ranges of one file-like object: a local file, a buffer in memory or
(later) a URL. Format readers and consumers use only this protocol, so every reading path
works on every kind of source. Sources count what they read (:class:`ReadStats`), so tests
can assert how much of a file an operation touched.

Example:
    >>> from tensorfile.sources import MemorySource
    >>> src = MemorySource(b"0123456789")
    >>> src.read(2, 3), src.stats.bytes_read
    (b'234', 3)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

from .errors import InvalidArgumentError, SourceError

FIRST_READ = 100_000
"""Bytes of the first request to a remote file (huggingface_hub's speculative read): a
header that fits costs one request."""

__all__ = [
    "FIRST_READ",
    "ByteRequest",
    "RangeRequest",
    "ReadStats",
    "Source",
    "SourceBase",
    "SuffixRequest",
    "scatter",
]


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """Bytes ``[start, stop)`` of a file."""

    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class SuffixRequest:
    """The last ``length`` bytes of a file (all of it when it is shorter)."""

    length: int


ByteRequest = RangeRequest | SuffixRequest
"""What a caller asks a remote source for first: a range, or the end of the file (a format
that keeps its index at the end, zTensor, asks for a suffix)."""


@dataclass(slots=True)
class ReadStats:
    """Counters of the reads a source served."""

    requests: int = 0
    bytes_read: int = 0

    def add(self, nbytes: int) -> None:
        """Count one read of ``nbytes`` bytes."""
        self.requests += 1
        self.bytes_read += nbytes


@runtime_checkable
class Source(Protocol):
    """Random access to the bytes of one file.

    ``read`` and ``readinto`` either return exactly the bytes asked for or raise
    :class:`~tensorfile.errors.SourceError`; ``buffer`` returns the whole content as a
    zero-copy ``memoryview`` when the source can (a mapped file, bytes in memory), else None.
    ``coalesce_gap`` is how many unneeded bytes between two wanted ranges are cheaper to read
    than a second request (0 for local files and memory; about a megabyte for remote ones):
    readers merge nearby ranges by it. ``stats`` counts the reads that reached the storage:
    a remote source counts its speculative first read when it opens and serves reads inside
    it without a request; a read of zero bytes counts nothing. After ``close`` every method
    but ``close`` raises :class:`~tensorfile.errors.SourceError`; arrays handed out earlier
    stay valid.
    """

    name: str
    stats: ReadStats
    coalesce_gap: int

    @property
    def size(self) -> int:
        """Total size in bytes."""
        ...

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes starting at ``offset``."""
        ...

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` (writable, byte-shaped) from consecutive bytes at ``offset``."""
        ...

    def buffer(self) -> memoryview | None:
        """The whole content as a zero-copy, writable-copy-on-write view, or None."""
        ...

    def close(self) -> None:
        """Release the file or buffer; views already handed out stay valid."""
        ...


class SourceBase(ABC):
    """What every source shares: the bounds check, counters, a default ``readinto`` on top of
    ``read``, no mapping, and the context manager. Subclasses set ``name`` and implement
    ``size`` and ``_read``."""

    name: str = "<source>"
    coalesce_gap: int = 0
    _closed: bool = False

    def __init__(self) -> None:
        self.stats = ReadStats()

    @property
    @abstractmethod
    def size(self) -> int:
        """Total size in bytes."""

    def check(self, offset: int, length: int) -> None:
        """Raise :class:`SourceError` unless ``[offset, offset + length)`` is in the file and
        the source is open."""
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        size = self.size
        if offset < 0 or length < 0 or offset + length > size:
            raise SourceError(
                f"{self.name}: read of {length} bytes at offset {offset} is past the end of "
                f"the {size}-byte file"
            )

    @abstractmethod
    def _read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, already bounds-checked (at least one byte), counted
        in :attr:`stats` by the subclass (a cache hit may cost no request)."""

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``."""
        self.check(offset, length)
        if length == 0:
            return b""
        return self._read(offset, length)

    def byte_buffers(self, offset: int, buffers: list[memoryview]) -> list[memoryview]:
        """``buffers`` as flat writable byte views, after checking they are writable and that
        their total fits the file at ``offset``."""
        flat = []
        for b in buffers:
            if b.readonly:
                raise InvalidArgumentError(f"{self.name}: readinto needs writable buffers")
            flat.append(b if b.ndim == 1 and b.format == "B" else b.cast("B"))
        self.check(offset, sum(b.nbytes for b in flat))
        return flat

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` (one read)."""
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if total:
            scatter(self._read(offset, total), flat)

    def buffer(self) -> memoryview | None:
        """Not mappable (sources that are override this); a closed source refuses."""
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        return None

    def close(self) -> None:
        """Mark the source closed."""
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scatter(data: bytes | memoryview, buffers: list[memoryview]) -> None:
    """Copy consecutive ``data`` into ``buffers`` (for sources that read into one bytes)."""
    pos = 0
    for b in buffers:
        b.cast("B")[:] = data[pos : pos + b.nbytes]
        pos += b.nbytes
