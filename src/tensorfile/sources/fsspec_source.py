"""Any fsspec URL (``s3://``, ``gs://``, ``hf://``, ...) as a Source, when fsspec and the
URL's filesystem package are installed. Reads are ``cat_file`` range reads, counted.

Example:
    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/doc/x.bin", b"0123456789")
    >>> FsspecSource("memory://doc/x.bin").read(3, 4)
    b'3456'
"""

from __future__ import annotations

from typing import Any

from ..errors import SourceError, UnsupportedError
from .base import ReadStats, scatter

__all__ = ["FsspecSource"]


class FsspecSource:
    """A file on an fsspec filesystem, read with range requests."""

    coalesce_gap = 1 << 20

    def __init__(self, url: str, **storage_options: Any) -> None:
        try:
            import fsspec
        except ImportError as exc:
            raise UnsupportedError(
                f"{url}: reading this URL needs fsspec: pip install 'tensorfile[remote]'"
            ) from exc
        try:
            self._fs, self._path = fsspec.core.url_to_fs(url, **storage_options)
            self._size = int(self._fs.size(self._path))
        except ImportError as exc:
            raise UnsupportedError(f"{url}: the filesystem's package is missing: {exc}") from exc
        except (OSError, ValueError) as exc:
            raise SourceError(f"cannot open {url}: {exc}") from exc
        self.name = url
        self.stats = ReadStats()

    @property
    def size(self) -> int:
        """File size in bytes."""
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``."""
        if offset < 0 or length < 0 or offset + length > self._size:
            raise SourceError(f"{self.name}: read of {length} bytes at {offset} is past the end")
        if length == 0:
            return b""
        try:
            data: bytes = self._fs.cat_file(self._path, start=offset, end=offset + length)
        except (OSError, ValueError) as exc:
            raise SourceError(f"{self.name}: read failed: {exc}") from exc
        if len(data) != length:
            raise SourceError(f"{self.name}: short read: {len(data)} of {length} bytes")
        self.stats.add(length)
        return data

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` in one read."""
        data = self.read(offset, sum(b.nbytes for b in buffers))
        scatter(data, buffers)

    def buffer(self) -> memoryview | None:
        """Not mappable."""
        return None

    def close(self) -> None:
        """Nothing to release."""
