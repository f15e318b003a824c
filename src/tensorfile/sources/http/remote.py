"""Remote files as Sources: a transport (a fetcher of byte ranges) behind a first read.

:class:`RemoteSource` is the Source protocol over any fetcher: the first request is the one
the caller chose (by default the first 100,000 bytes, huggingface_hub's speculative header
read; the end of the file for zTensor, whose manifest is there), kept in a
:class:`~._first_read.FirstRead`, so a header that fits costs one request. Nearby reads are
merged by readers (:attr:`coalesce_gap`). :class:`HTTPSource` uses the strict HTTP transport
of :mod:`._http`; :class:`~..stores.fsspec_source.FsspecSource` uses fsspec.

Loads at the speed of the link: the read planner (:mod:`tensorfile.core.plan`) cuts a load
into pieces of :attr:`~RemoteSource.io_chunk` bytes (default 8 MiB) and reads up to
:attr:`~RemoteSource.io_threads` of them at once (default 16), each with a request of its
own; ``readinto`` hands each piece's destination buffers to the fetcher, which receives the
reply's body straight into them where it can (``fetch_into``: no intermediate copy, so a
load's peak memory is the tensors). Both are tunable per source (``io_threads=``,
``io_chunk=``) or for the process (``$TENSORFILE_IO_THREADS``, ``$TENSORFILE_IO_CHUNK_MIB``).

Example:
    >>> RemoteSource.coalesce_gap
    1048576
    >>> io_setting("io_threads", 4, IO_THREADS_ENV, DEFAULT_IO_THREADS, 1, 64)
    4
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ...core.errors import InvalidArgumentError
from ...core.source import FIRST_READ, ByteRequest, RangeRequest, ReadStats, SourceBase, scatter
from ._first_read import Fetcher, FirstRead
from ._http import MIN_SPEED, HTTPFetcher
from ._urls import redact

__all__ = [
    "DEFAULT_IO_CHUNK",
    "DEFAULT_IO_THREADS",
    "HTTP_OPTIONS",
    "IO_CHUNK_ENV",
    "IO_THREADS_ENV",
    "SPECULATIVE_BYTES",
    "HTTPSource",
    "RemoteSource",
    "check_http_options",
    "io_setting",
]

SPECULATIVE_BYTES = FIRST_READ
"""The first read of a remote file: huggingface_hub's speculative header read."""

DEFAULT_IO_THREADS = 16
"""Requests of one load in flight at once (the Run:ai streamer's object-store clients: 8)."""
DEFAULT_IO_CHUNK = 8 << 20
"""Bytes per request of a load (the Run:ai streamer's object-store chunk: 8 MiB)."""
IO_THREADS_ENV = "TENSORFILE_IO_THREADS"
"""Environment variable: requests in flight at once for a remote load (1 to 64)."""
IO_CHUNK_ENV = "TENSORFILE_IO_CHUNK_MIB"
"""Environment variable: MiB per request of a remote load (1 to 256)."""


def io_setting(name: str, value: int | None, env: str, default: int, low: int, high: int) -> int:
    """``value``, else the environment variable ``env``, else ``default``; an int from
    ``low`` to ``high`` (a bad value, given or in the environment, is an
    :class:`~tensorfile.errors.InvalidArgumentError` naming it)."""
    where = name
    if value is None:
        text = os.environ.get(env, "").strip()
        if not text:
            return default
        where = f"${env}"
        try:
            value = int(text)
        except ValueError:
            raise InvalidArgumentError(f"{where} must be a whole number, not {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{where} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{where} must be from {low} to {high}, not {value}")
    return value


class RemoteSource(SourceBase):
    """A remote file: reads go through ``fetcher`` behind a speculative first read. Safe to
    read from several threads when the fetcher is (the HTTP one is).

    Args:
        fetcher: the transport; one with ``fetch_into(offset, buffers)`` receives
            :meth:`readinto`'s bytes straight into the buffers.
        name: what messages call the file (credentials removed).
        stats: the fetcher's counters.
        first: the first request (default: the first :data:`SPECULATIVE_BYTES`).
        io_threads: requests of a load in flight at once (default
            ``$TENSORFILE_IO_THREADS``, else :data:`DEFAULT_IO_THREADS`).
        io_chunk: bytes per request of a load (default ``$TENSORFILE_IO_CHUNK_MIB`` MiB,
            else :data:`DEFAULT_IO_CHUNK`).
    """

    coalesce_gap = 1 << 20
    """Reads separated by at most this many bytes are merged into one request."""

    def __init__(
        self,
        fetcher: Fetcher,
        name: str,
        stats: ReadStats,
        first: ByteRequest | None = None,
        *,
        io_threads: int | None = None,
        io_chunk: int | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.stats = stats
        self.io_threads = io_setting(
            "io_threads", io_threads, IO_THREADS_ENV, DEFAULT_IO_THREADS, 1, 64
        )
        """How many pieces of a load the read planner reads at once."""
        if io_chunk is None:
            mib = io_setting("io_chunk", None, IO_CHUNK_ENV, DEFAULT_IO_CHUNK >> 20, 1, 256)
            io_chunk = mib << 20
        self.io_chunk = io_setting("io_chunk", io_chunk, IO_CHUNK_ENV, 0, 4096, 1 << 30)
        """Bytes per piece of a load (one request each)."""
        self._fetcher = fetcher
        self._into = getattr(fetcher, "fetch_into", None)
        self._first = FirstRead(fetcher, first or RangeRequest(0, SPECULATIVE_BYTES))

    @property
    def size(self) -> int:
        """The file's size, learned from the first reply."""
        return self._first.size

    @property
    def version(self) -> str | None:
        """What identifies this content of the file (its ``ETag``, or the store's
        equivalent), learned from the first reply; None when the server gives none."""
        found = getattr(self._fetcher, "version", None)
        return found if isinstance(found, str) else None

    def _read(self, offset: int, length: int) -> bytes:
        return self._first.read(offset, length)

    def will_read(self, ranges: list[tuple[int, int]]) -> None:
        """What a load is about to read (the read planner's hint), passed to the fetcher
        when it takes it (the HTTP one reads a range-ignoring server's reply that far)."""
        hint = getattr(self._fetcher, "will_read", None)
        if callable(hint):
            hint(ranges)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset``: from the first reply when
        it holds them, else with one request whose body goes straight into the buffers
        (when the fetcher can). Safe from several threads on disjoint buffers."""
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if not total:
            return
        found = self._first.cached(offset, total)
        if found is not None:
            scatter(found, flat)
        elif self._into is not None:
            self._into(offset, [b for b in flat if b.nbytes])
        else:
            scatter(self._first.read(offset, total), flat)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


HTTP_OPTIONS = frozenset({"token", "timeout", "retries", "backoff", "speculative", "headers",
                          "deadline", "min_speed", "allow_full_download", "io_threads",
                          "io_chunk"})  # fmt: skip
"""The options of :class:`HTTPSource` a caller may pass with an ``http(s)://`` URL."""


def check_http_options(url: str, options: Iterable[str]) -> None:
    """Refuse (an :class:`~tensorfile.errors.InvalidArgumentError`) options the HTTP transport
    does not take: an ``http(s)://`` URL is read by it alone, whatever asks (the router, a
    store), so that its checks (a server that ignores ``Range``, above all) always hold.

    Example:
        >>> from tensorfile.errors import InvalidArgumentError
        >>> try:
        ...     check_http_options("https://h/m", ["client_kwargs", "timeout"])
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        https://h/m: client_kwargs: options tensorfile's HTTP transport does not take
    """
    unknown = sorted(set(options) - HTTP_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"{redact(url)}: {', '.join(unknown)}: options tensorfile's HTTP transport does "
            "not take"
        )


class HTTPSource(RemoteSource):
    """A file read with HTTP range requests (see :class:`~._http.HTTPFetcher` for the checks),
    through the proxy the environment names (``https_proxy``, ``no_proxy``, ...). One source
    may be read from several threads: each request has a connection of its own, from the
    process's pool of the URL's origin (:data:`~._conn.POOL`), which other files share.

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``user:password@`` of the URL as basic auth, then
            ``$TENSORFILE_TOKEN`` when ``$TENSORFILE_TOKEN_HOSTS`` names the URL's origin,
            then ``$HF_TOKEN`` when it is the Hugging Face Hub's or ``$HF_ENDPOINT``'s);
            sent to the URL's origin (scheme, host and port) only, not after a redirect
            elsewhere; never printed.
        timeout: seconds for connecting and for each socket operation.
        retries: attempts after the first for transient failures.
        backoff: first wait between attempts, doubled each time.
        speculative: bytes of the default first read (at most 100,000).
        first: the first request instead (a format whose index is at the end asks for a
            :class:`~tensorfile.core.source.SuffixRequest`).
        headers: extra request headers (``Authorization`` and ``Cookie`` to the origin only).
        deadline: seconds each request may take on top of its transfer time at
            ``min_speed`` (default: ``timeout``).
        min_speed: bytes per second: a request for ``n`` bytes fails after ``deadline + n /
            min_speed`` seconds, however the server drips its reply.
        allow_full_download: a server that ignores ``Range`` (``python -m http.server``)
            sends the whole file for every request. tensorfile then reads each reply only up
            to the end of what a read needs, keeps those first bytes for the reads that
            follow, and reads at most :data:`~._prefix.FULL_DOWNLOAD_LIMIT` (64 MiB) of it:
            a small file is read whole, a big one as far as its header. True lifts the
            limit; None (the default) takes ``$TENSORFILE_ALLOW_FULL_DOWNLOAD`` (``1``).
        io_threads: requests of a load in flight at once (see :class:`RemoteSource`).
        io_chunk: bytes per request of a load (see :class:`RemoteSource`).

    Every request carries ``User-Agent: tensorfile/<version>``; a permanent redirect
    (``301``, ``308``) is remembered for the source's next requests.

    Example:
        >>> from tensorfile.errors import InvalidArgumentError
        >>> try:
        ...     HTTPSource("http://user:pw@127.0.0.1:0/m.safetensors", deadline=10)
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        http://127.0.0.1:0/m.safetensors: the port must be a number from 1 to 65535
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
        deadline: float | None = None,
        min_speed: float = MIN_SPEED,
        allow_full_download: bool | None = None,
        io_threads: int | None = None,
        io_chunk: int | None = None,
    ) -> None:
        fetcher = HTTPFetcher(
            url,
            token=token,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            headers=headers,
            allow_full_download=allow_full_download,
            deadline=deadline,
            min_speed=min_speed,
        )
        self.url = url
        n = min(speculative, SPECULATIVE_BYTES) if speculative > 0 else 1
        self._http = fetcher
        super().__init__(
            fetcher,
            fetcher.name,
            fetcher.stats,
            first or RangeRequest(0, n),
            io_threads=io_threads,
            io_chunk=io_chunk,
        )

    def close(self) -> None:
        """Close the source (its connections wait in the pool for the next file)."""
        super().close()
        self._http.close()
