"""A source over a local file: positional reads for copies, a private mapping for views."""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Iterator

from ..core.errors import SourceError
from ..core.parallel import run_parallel
from ..core.source import SourceBase

__all__ = ["LocalSource"]

# Linux moves at most ~2 GiB per read call and takes at most IOV_MAX buffers per preadv.
_MAX_CALL_BYTES = 1 << 30
_MAX_IOV = 1024


def _split(buffers: list[memoryview]) -> Iterator[list[memoryview]]:
    """Group buffers into preadv-sized batches, cutting buffers larger than one call."""
    batch: list[memoryview] = []
    size = 0
    for buf in buffers:
        for start in range(0, max(buf.nbytes, 1), _MAX_CALL_BYTES):
            piece = buf[start : start + _MAX_CALL_BYTES]
            if piece.nbytes == 0:
                continue
            if batch and (len(batch) == _MAX_IOV or size + piece.nbytes > _MAX_CALL_BYTES):
                yield batch
                batch, size = [], 0
            batch.append(piece)
            size += piece.nbytes
    if batch:
        yield batch


class LocalSource(SourceBase):
    """Read a local file with ``pread``/``preadv``; map it privately for zero-copy views.

    The mapping is copy-on-write (``MAP_PRIVATE``): arrays built on it may even be written
    to without ever touching the file.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
        >>> _ = open(path, "wb").write(b"hello world")
        >>> with LocalSource(path) as src:
        ...     src.read(6, 5)
        b'world'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._closed = True  # until the file is open
        self.name = os.fspath(path)
        try:
            self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise SourceError(f"cannot open {self.name}: {exc.strerror or exc}") from exc
        try:
            st = os.fstat(self._fd)
        except OSError as exc:
            os.close(self._fd)
            raise SourceError(f"cannot stat {self.name}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(st.st_mode):
            os.close(self._fd)
            raise SourceError(f"{self.name} is not a regular file")
        self._size = st.st_size
        self._map: mmap.mmap | None = None
        self._closed = False

    @property
    def size(self) -> int:
        """File size in bytes, as it was when the source was opened."""
        return self._size

    def _read(self, offset: int, length: int) -> bytes:
        out = bytearray(length)
        self._preadv_exact([memoryview(out)], offset)
        self.stats.add(length)
        return bytes(out)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` (scatter read, no copies)."""
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if total:
            run_parallel(offset, flat, self._readinto_serial)
            self.stats.add(total)

    def _readinto_serial(self, offset: int, buffers: list[memoryview]) -> None:
        for batch in _split(buffers):
            self._preadv_exact(batch, offset)
            offset += sum(b.nbytes for b in batch)

    def _preadv_exact(self, bufs: list[memoryview], offset: int) -> None:
        bufs = [b for b in bufs if b.nbytes]
        while bufs:
            try:
                n = os.preadv(self._fd, bufs, offset)
            except OSError as exc:
                raise SourceError(
                    f"{self.name}: read at offset {offset} failed: {exc.strerror or exc}"
                ) from exc
            if n == 0:
                raise SourceError(
                    f"{self.name}: the file ended at offset {offset}; it was truncated "
                    "after it was opened"
                )
            offset += n
            while bufs and n >= bufs[0].nbytes:
                n -= bufs[0].nbytes
                bufs = bufs[1:]
            if n:
                bufs = [bufs[0][n:], *bufs[1:]]

    def buffer(self) -> memoryview:
        """The whole file, privately mapped (zero-copy, copy-on-write)."""
        super().buffer()  # refuses when closed
        if self._size == 0:
            return memoryview(b"")
        if self._map is None:
            try:
                self._map = mmap.mmap(self._fd, self._size, access=mmap.ACCESS_COPY)
            except (OSError, ValueError) as exc:
                raise SourceError(f"cannot map {self.name}: {exc}") from exc
        return memoryview(self._map)

    def close(self) -> None:
        """Close the file. Views already handed out keep their mapping alive."""
        if self._closed:
            return
        self._closed = True
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # arrays still use the mapping; it is released when they are
            self._map = None
        os.close(self._fd)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()
