"""Remote files as Sources: a transport (a fetcher of byte ranges) under a cache policy.

:class:`RemoteSource` is the Source protocol over any fetcher: the first request is the one
the caller chose (by default the first 100,000 bytes, huggingface_hub's speculative header
read; the end of the file for zTensor, whose manifest is there), kept in a
:class:`~._cache.SpeculativeCache`, so a header that fits costs one request. Nearby reads are
merged by readers (:attr:`coalesce_gap`). :class:`HTTPSource` uses the strict HTTP transport
of :mod:`._http`; :class:`~.fsspec_source.FsspecSource` uses fsspec.

Example:
    >>> RemoteSource.coalesce_gap
    1048576
"""

from __future__ import annotations

from ..core.source import ByteRequest, RangeRequest, ReadStats, SourceBase
from ._cache import Fetcher, SpeculativeCache
from ._http import HTTPFetcher

__all__ = ["SPECULATIVE_BYTES", "HTTPSource", "RemoteSource"]

SPECULATIVE_BYTES = 100_000
"""The first read of a remote file: huggingface_hub's speculative header read."""


class RemoteSource(SourceBase):
    """A remote file: reads go through ``fetcher`` behind a speculative first read.

    Args:
        fetcher: the transport.
        name: what messages call the file (credentials removed).
        stats: the fetcher's counters.
        first: the first request (default: the first :data:`SPECULATIVE_BYTES`).
    """

    coalesce_gap = 1 << 20
    """Reads separated by at most this many bytes are merged into one request."""

    def __init__(
        self, fetcher: Fetcher, name: str, stats: ReadStats, first: ByteRequest | None = None
    ) -> None:
        super().__init__()
        self.name = name
        self.stats = stats
        self._fetcher = fetcher
        self._cache = SpeculativeCache(fetcher, first or RangeRequest(0, SPECULATIVE_BYTES))

    @property
    def size(self) -> int:
        """The file's size, learned from the first reply."""
        return self._cache.size

    def _read(self, offset: int, length: int) -> bytes:
        return self._cache.read(offset, length)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class HTTPSource(RemoteSource):
    """A file read with HTTP range requests (see :class:`~._http.HTTPFetcher` for the checks).

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``$TENSORFILE_TOKEN``, then ``$HF_TOKEN``); sent as
            ``Authorization: Bearer ...`` to the URL's host only, never printed.
        timeout: seconds for connecting and for each socket read.
        retries: attempts after the first for transient failures.
        backoff: first wait between attempts, doubled each time.
        speculative: bytes of the default first read (at most 100,000).
        first: the first request instead (a format whose index is at the end asks for a
            :class:`~tensorfile.core.source.SuffixRequest`).
        headers: extra request headers.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        speculative: int = SPECULATIVE_BYTES,
        first: ByteRequest | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        fetcher = HTTPFetcher(
            url,
            token=token,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            headers=headers,
            whole_file_limit=SPECULATIVE_BYTES,
        )
        self.url = url
        n = min(speculative, SPECULATIVE_BYTES) if speculative > 0 else 1
        self._http = fetcher
        super().__init__(fetcher, fetcher.name, fetcher.stats, first or RangeRequest(0, n))

    def close(self) -> None:
        """Close the connection."""
        super().close()
        self._http.close()
