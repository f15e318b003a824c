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

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ReadStats", "Source", "scatter"]


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
    """

    name: str
    stats: ReadStats

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


def scatter(data: bytes, buffers: list[memoryview]) -> None:
    """Copy consecutive ``data`` into ``buffers`` (for sources that read into one bytes)."""
    pos = 0
    for b in buffers:
        b.cast("B")[:] = data[pos : pos + b.nbytes]
        pos += b.nbytes
