"""A source over bytes already in memory."""

from __future__ import annotations

from ...core.errors import InvalidTypeError
from ...core.source import SourceBase

__all__ = ["MemorySource"]


class MemorySource(SourceBase):
    """Serve ranges of a bytes-like object without copying it.

    ``data`` is any C-contiguous buffer (bytes, bytearray, memoryview, numpy array...);
    anything else is an :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> MemorySource(b"abcdef").read(1, 2)
        b'bc'
    """

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<memory>") -> None:
        super().__init__()
        try:
            view = memoryview(data)
            if not view.c_contiguous:
                raise TypeError("the buffer is strided")
            self._view = view if view.format == "B" and view.ndim == 1 else view.cast("B")
        except TypeError as exc:  # not a buffer, or a strided one
            raise InvalidTypeError(
                f"expected the bytes of a file as one contiguous buffer (bytes, bytearray, "
                f"memoryview), got {type(data).__name__}: {exc}"
            ) from None
        self.name = name

    @property
    def size(self) -> int:
        """Total size in bytes."""
        return self._view.nbytes

    def _read(self, offset: int, length: int) -> bytes:
        self.stats.add(length)
        return bytes(self._view[offset : offset + length])

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` (one copy, no bytes object)."""
        pos = offset
        for b in self.byte_buffers(offset, buffers):
            n = b.nbytes
            b[:] = self._view[pos : pos + n]
            pos += n
        if pos > offset:
            self.stats.add(pos - offset)

    def buffer(self) -> memoryview:
        """The whole buffer, zero-copy (views already handed out keep it alive)."""
        super().buffer()  # refuses when closed
        return self._view
