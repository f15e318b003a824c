"""Any fsspec URL (``s3://``, ``gs://``, ``hf://``, ...) as a Source, when fsspec and the
URL's filesystem package are installed. Reads are counted ``cat_file`` range reads behind the
same speculative first read as HTTP (:class:`~..http.remote.RemoteSource`).

fsspec and its backends raise whatever they raise (``FileNotFoundError``, ``ValueError``,
``TypeError``, botocore's and aiohttp's own errors, ...), often with the URL in the text.
Every such exception is translated by :mod:`._fsspec` (the one mapper, shared with
:class:`~.fsspec_store.FsspecStore`) into tensorfile's own, naming the redacted URL with the
foreign text scrubbed of the URL's secrets.

Example:
    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/doc/x.bin", b"0123456789")
    >>> FsspecSource("memory://doc/x.bin").read(3, 4)
    b'3456'
    >>> try:
    ...     FsspecSource("memory://doc/none.bin?token=abcd1234")
    ... except SourceError as exc:
    ...     print(exc)
    cannot open memory://doc/none.bin: FileNotFoundError: /doc/none.bin?***
"""

from __future__ import annotations

import threading
from typing import Any

from ...core.errors import SourceError
from ...core.source import ByteRequest, ReadStats, SuffixRequest
from ..http import Fetched, redact
from ..http.remote import RemoteSource
from ._fsspec import connect, describe, failure

__all__ = ["FsspecFetcher", "FsspecSource"]


class FsspecFetcher:
    """Range reads of one file of an fsspec filesystem; safe to share between threads as far
    as the filesystem is."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        self.name = redact(url)
        self._url = url
        self.stats = ReadStats()
        self._lock = threading.Lock()
        self._fs, self._path = connect(url, storage_options, self.name, "reading this URL")
        try:
            info = self._fs.info(self._path)
        except Exception as exc:
            raise failure("open", self.name, exc, url) from None
        size = info.get("size") if isinstance(info, dict) else None
        self.version = _version_of(info) if isinstance(info, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise SourceError(f"cannot open {self.name}: the filesystem gives no usable size")
        self.size = size

    def fetch(self, request: ByteRequest) -> Fetched:
        """The bytes of ``request`` (clipped to the file)."""
        if isinstance(request, SuffixRequest):
            start, stop = max(0, self.size - request.length), self.size
        else:
            start, stop = request.start, min(request.stop, self.size)
        if stop <= start:
            return Fetched(start, b"", self.size)
        try:
            data = self._fs.cat_file(self._path, start=start, end=stop)
        except Exception as exc:
            raise SourceError(f"{self.name}: read failed: {describe(exc, self._url)}") from None
        if not isinstance(data, bytes) or len(data) != stop - start:
            got = len(data) if isinstance(data, bytes) else type(data).__name__
            raise SourceError(f"{self.name}: asked for {stop - start} bytes, got {got}")
        with self._lock:
            self.stats.add(len(data))
        return Fetched(start, data, self.size)


_VERSION_KEYS = ("ETag", "etag", "md5Hash", "generation", "version_id", "VersionId")
_TIME_KEYS = ("LastModified", "last_modified", "mtime", "updated", "created")


def _version_of(info: dict[str, Any]) -> str | None:
    """What identifies this content of the object: its ETag (or the store's equivalent),
    else its modification time, as the filesystem's ``info`` reports them."""
    for keys, prefix in ((_VERSION_KEYS, ""), (_TIME_KEYS, "mtime:")):
        for key in keys:
            value = info.get(key)
            if value is not None and not isinstance(value, bool) and str(value):
                return prefix + str(value)
    return None


class FsspecSource(RemoteSource):
    """A file on an fsspec filesystem, read with range requests: a load's pieces (of
    ``io_chunk`` bytes, ``io_threads`` at once: see :class:`~..http.remote.RemoteSource`) are
    concurrent ``cat_file`` calls."""

    def __init__(
        self,
        url: str,
        *,
        first: ByteRequest | None = None,
        io_threads: int | None = None,
        io_chunk: int | None = None,
        **storage_options: Any,
    ) -> None:
        fetcher = FsspecFetcher(url, **storage_options)
        super().__init__(
            fetcher, fetcher.name, fetcher.stats, first, io_threads=io_threads, io_chunk=io_chunk
        )
