"""Any fsspec URL (``s3://``, ``gs://``, ``hf://``, ...) as a Source, when fsspec and the
URL's filesystem package are installed. Reads are counted ``cat_file`` range reads behind the
same speculative first read as HTTP (:class:`~.remote.RemoteSource`).

Example:
    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/doc/x.bin", b"0123456789")
    >>> FsspecSource("memory://doc/x.bin").read(3, 4)
    b'3456'
"""

from __future__ import annotations

from typing import Any

from ..core.errors import SourceError, UnsupportedError
from ..core.source import ByteRequest, ReadStats, SuffixRequest
from ._http import Fetched
from .remote import RemoteSource

__all__ = ["FsspecFetcher", "FsspecSource"]


class FsspecFetcher:
    """Range reads of one file of an fsspec filesystem."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        try:
            import fsspec
        except ImportError as exc:
            raise UnsupportedError(
                f"{url}: reading this URL needs fsspec: pip install 'tensorfile[remote]'"
            ) from exc
        try:
            self._fs, self._path = fsspec.core.url_to_fs(url, **storage_options)
            self.size = int(self._fs.size(self._path))
        except ImportError as exc:
            raise UnsupportedError(f"{url}: the filesystem's package is missing: {exc}") from exc
        except (OSError, ValueError) as exc:
            raise SourceError(f"cannot open {url}: {exc}") from exc
        self.name = url
        self.stats = ReadStats()

    def fetch(self, request: ByteRequest) -> Fetched:
        """The bytes of ``request`` (clipped to the file)."""
        if isinstance(request, SuffixRequest):
            start, stop = max(0, self.size - request.length), self.size
        else:
            start, stop = request.start, min(request.stop, self.size)
        if stop <= start:
            return Fetched(start, b"", self.size)
        try:
            data: bytes = self._fs.cat_file(self._path, start=start, end=stop)
        except (OSError, ValueError) as exc:
            raise SourceError(f"{self.name}: read failed: {exc}") from exc
        if len(data) != stop - start:
            raise SourceError(f"{self.name}: short read: {len(data)} of {stop - start} bytes")
        self.stats.add(len(data))
        return Fetched(start, data, self.size)


class FsspecSource(RemoteSource):
    """A file on an fsspec filesystem, read with range requests."""

    def __init__(
        self, url: str, *, first: ByteRequest | None = None, **storage_options: Any
    ) -> None:
        fetcher = FsspecFetcher(url, **storage_options)
        super().__init__(fetcher, fetcher.name, fetcher.stats, first)
