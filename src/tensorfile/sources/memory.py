"""A source over bytes already in memory."""

from __future__ import annotations

from ..errors import SourceError
from .base import ReadStats

__all__ = ["MemorySource"]


class MemorySource:
    """Serve ranges of a bytes-like object without copying it.

    Example:
        >>> MemorySource(b"abcdef").read(1, 2)
        b'bc'
    """

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<memory>") -> None:
        self._view = memoryview(data).cast("B")
        self.name = name
        self.stats = ReadStats()

    @property
    def size(self) -> int:
        """Total size in bytes."""
        return self._view.nbytes

    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self._view.nbytes:
            raise SourceError(
                f"{self.name}: read of {length} bytes at offset {offset} is outside the "
                f"{self._view.nbytes}-byte buffer"
            )

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``."""
        self._check(offset, length)
        self.stats.add(length)
        return bytes(self._view[offset : offset + length])

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset``."""
        total = sum(b.nbytes for b in buffers)
        self._check(offset, total)
        self.stats.add(total)
        pos = offset
        for b in buffers:
            n = b.nbytes
            b[:] = self._view[pos : pos + n]
            pos += n

    def buffer(self) -> memoryview:
        """The whole buffer, zero-copy."""
        return self._view

    def close(self) -> None:
        """Nothing to release: views already handed out keep the buffer alive."""
