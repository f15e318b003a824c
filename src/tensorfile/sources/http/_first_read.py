"""The speculative first read of a remote file, wrapped around a fetcher.

A *fetcher* is anything with ``fetch(request) -> Fetched`` (:class:`~._http.HTTPFetcher`,
the fsspec fetcher). :class:`FirstRead` makes the first request the one the caller
chose (the head of the file, or its end for a format whose index is there), learns the file
size from it and serves later reads that fall inside it without a request; the first bytes
(magic numbers, read by format detection) are kept once fetched.

Example:
    >>> from tensorfile.core.source import RangeRequest
    >>> class Bytes:
    ...     def __init__(self, data): self.data, self.calls = data, 0
    ...     def fetch(self, r):
    ...         self.calls += 1
    ...         start = r.start if isinstance(r, RangeRequest) else len(self.data) - r.length
    ...         stop = r.stop if isinstance(r, RangeRequest) else len(self.data)
    ...         return Fetched(start, self.data[start:stop], len(self.data))
    >>> f = Bytes(b"0123456789")
    >>> c = FirstRead(f, RangeRequest(0, 4))
    >>> c.size, c.read(1, 2), c.read(6, 3), f.calls
    (10, b'12', b'678', 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...core.errors import SourceError
from ...core.source import ByteRequest, RangeRequest

__all__ = ["HEAD_BYTES", "Fetched", "Fetcher", "FirstRead"]

HEAD_BYTES = 64
"""The first bytes of a file, fetched once and kept: format detection reads them twice."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """The bytes a fetch returned: ``data`` starts at offset ``start`` of a ``size``-byte
    file."""

    start: int
    data: bytes
    size: int


class Fetcher(Protocol):
    """One request for a range of a remote file."""

    def fetch(self, request: ByteRequest) -> Fetched:
        """The bytes of ``request`` and the file's size."""
        ...


class FirstRead:
    """Serve reads through ``fetcher``, keeping the reply to ``first`` and the file's head."""

    def __init__(self, fetcher: Fetcher, first: ByteRequest) -> None:
        self._fetcher = fetcher
        self._name: str = getattr(fetcher, "name", "the remote file")
        got = fetcher.fetch(first)
        if got.size < 0 or got.start < 0 or got.start + len(got.data) > got.size:
            raise SourceError(
                f"{self._name}: the transport returned bytes {got.start}+{len(got.data)} of a "
                f"{got.size}-byte file"
            )
        self.size = got.size
        self._start, self._data = got.start, got.data
        self._head: bytes | None = got.data[:HEAD_BYTES] if got.start == 0 else None

    def cached(self, offset: int, length: int) -> bytes | None:
        """The bytes at ``offset`` when the first reply (or the kept head) holds them all,
        else None (no request is made)."""
        pos = offset - self._start
        if pos >= 0 and pos + length <= len(self._data):
            return self._data[pos : pos + length]
        head = self._head
        if head is not None and offset + length <= len(head):
            return head[offset : offset + length]
        return None

    def _fetch(self, offset: int, length: int) -> bytes:
        got = self._fetcher.fetch(RangeRequest(offset, offset + length))
        if got.start != offset or len(got.data) != length:
            raise SourceError(
                f"{self._name}: asked for {length} bytes at {offset}, the transport returned "
                f"{len(got.data)} at {got.start}"
            )
        return got.data

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (bounds already checked by the source); safe to call
        from several threads (the fetcher must be)."""
        found = self.cached(offset, length)
        if found is not None:
            return found
        if offset + length <= HEAD_BYTES:
            head = self._fetch(0, min(self.size, HEAD_BYTES))
            self._head = head
            return head[offset : offset + length]
        return self._fetch(offset, length)
