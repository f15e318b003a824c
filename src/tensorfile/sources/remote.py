"""Read files over HTTP(S) with range requests: the Source protocol for URLs.

Every read goes through one fetch function (:meth:`HTTPSource._fetch`) that asks for a byte
range and checks the reply strictly: ``206`` with a ``Content-Range`` that matches what was
asked, ``416`` and short bodies are errors, redirects are followed (at most 5; the token is
not sent to another host), transient failures (connection errors, 429, 5xx) are retried with
exponential backoff, and every socket operation has a timeout. A server that ignores
``Range`` and answers ``200`` with the whole body is read only as far as needed and the
connection is closed, so a 10 GB file never costs more than the bytes asked for plus one
network buffer.

The first read is speculative: the first 100,000 bytes (or, for a zTensor file, the last),
kept in a cache, so a header that fits costs one request. Counters of requests and bytes
(:attr:`stats`) let tests and benchmarks see what a call cost.

Example:
    >>> is_url("https://huggingface.co/m/resolve/main/model.safetensors"), is_url("model.zt")
    (True, False)
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse

from ..errors import InvalidArgumentError, SourceError
from .base import ReadStats, scatter

__all__ = ["SPECULATIVE_BYTES", "HTTPSource", "is_url"]

SPECULATIVE_BYTES = 100_000
"""The first read of a remote file: huggingface_hub's speculative header read."""

_HEAD_BYTES = 64  # the first bytes, kept once read: format detection reads them twice
_RECV_BUFFER = 256 << 10  # the socket buffer: the most a range-ignoring server can push ahead
_CHUNK = 1 << 20
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_TRANSIENT = {429, 500, 502, 503, 504}


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path and not os.path.exists(path)


class _Reply:
    """A response being read: status, headers and the open connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.resp = resp
        self.status = resp.status

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)


class HTTPSource:
    """A remote file read with HTTP range requests.

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``$TENSORFILE_TOKEN``, then ``$HF_TOKEN``); sent as
            ``Authorization: Bearer ...``, never printed.
        timeout: seconds for connecting and for each socket read.
        retries: attempts after the first for transient failures.
        backoff: first wait between attempts, doubled each time.
        speculative: bytes of the first read (at most 100,000 by default).
        tail_first: make the speculative read the end of the file (zTensor keeps its
            manifest there).
    """

    coalesce_gap = 1 << 20
    """Reads separated by at most this many bytes are merged into one request."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        speculative: int = SPECULATIVE_BYTES,
        tail_first: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidArgumentError(f"not an http(s) URL: {_redact(url)}")
        self.url = url
        self.name = _redact(url)
        self._token = token or os.environ.get("TENSORFILE_TOKEN") or os.environ.get("HF_TOKEN")
        self._timeout = timeout
        self._retries = max(0, retries)
        self._backoff = backoff
        self._headers = dict(headers or {})
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._conn_key: tuple[str, str, int] | None = None
        self.stats = ReadStats()
        self._cache_start = 0
        self._cache = b""
        self._size: int | None = None
        self._head: bytes | None = None
        self._closed = False
        self._speculate(min(speculative, SPECULATIVE_BYTES) if speculative > 0 else 1, tail_first)

    # -- the Source protocol -------------------------------------------------------------

    @property
    def size(self) -> int:
        """The file's size, learned from the first reply."""
        assert self._size is not None
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` (from the cache when it holds them)."""
        self._check(offset, length)
        cached = self._from_cache(offset, length)
        if cached is not None:
            return cached
        if offset + length <= _HEAD_BYTES:
            # magic numbers: fetch the first bytes once (a tail-first read did not hold them)
            if self._head is None:
                self._head = self._fetch(0, min(self.size, _HEAD_BYTES))
            return self._head[offset : offset + length]
        return self._fetch(offset, offset + length)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` in one request."""
        total = sum(b.nbytes for b in buffers)
        self._check(offset, total)
        if total == 0:
            return
        data = self._from_cache(offset, total)
        if data is None:
            data = self._fetch(offset, offset + total)
        scatter(data, buffers)

    def buffer(self) -> memoryview | None:
        """Remote files cannot be mapped."""
        return None

    def close(self) -> None:
        """Close the connection."""
        self._closed = True
        self._drop_connection()

    def __enter__(self) -> HTTPSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<HTTPSource {self.name}>"

    # -- internals ---------------------------------------------------------------------------

    def _check(self, offset: int, length: int) -> None:
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise SourceError(
                f"{self.name}: read of {length} bytes at offset {offset} is past the end of "
                f"the {self.size}-byte file"
            )

    def _from_cache(self, offset: int, length: int) -> bytes | None:
        start = offset - self._cache_start
        if start >= 0 and start + length <= len(self._cache):
            return self._cache[start : start + length]
        return None

    def _speculate(self, n: int, tail: bool) -> None:
        """The first request: learn the size and cache the head (or the tail)."""
        spec = f"bytes=-{n}" if tail else f"bytes=0-{n - 1}"
        reply = self._request(spec)
        try:
            if reply.status == 206:
                start, stop, total = self._content_range(reply, None)
                body = self._read_body(reply, stop - start)
                self._size, self._cache_start, self._cache = total, start, body
            elif reply.status == 200:
                length = reply.header("Content-Length")
                if length is None or not length.isdigit():
                    raise SourceError(
                        f"{self.name}: the server ignores Range requests and sends no "
                        "Content-Length; refusing to download the whole file"
                    )
                self._size = int(length)
                want = min(n, self._size)
                if tail and self._size > want:
                    raise SourceError(
                        f"{self.name}: the server ignores Range requests; reading the end of "
                        f"a {self._size:,}-byte file would download all of it"
                    )
                self._cache_start, self._cache = 0, self._read_body(reply, want, partial=True)
            elif reply.status == 416:
                self._size, self._cache = 0, b""  # an empty file
            else:
                raise SourceError(f"{self.name}: HTTP {reply.status} {reply.resp.reason}")
        finally:
            self._finish(reply)

    def _fetch(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` in one range request, checked strictly."""
        reply = self._request(f"bytes={start}-{stop - 1}")
        try:
            if reply.status == 206:
                got_start, got_stop, _total = self._content_range(reply, (start, stop))
                return self._read_body(reply, got_stop - got_start)
            if reply.status == 200:
                if start == 0 and stop <= SPECULATIVE_BYTES:
                    return self._read_body(reply, stop, partial=True)
                raise SourceError(
                    f"{self.name}: the server ignores Range requests (HTTP 200 for bytes "
                    f"{start}-{stop - 1}); refusing to download the whole file"
                )
            if reply.status == 416:
                raise SourceError(
                    f"{self.name}: HTTP 416: the server cannot serve bytes {start}-{stop - 1} "
                    f"(the file may have changed since it was opened)"
                )
            raise SourceError(f"{self.name}: HTTP {reply.status} {reply.resp.reason}")
        finally:
            self._finish(reply)

    def _content_range(self, reply: _Reply, want: tuple[int, int] | None) -> tuple[int, int, int]:
        text = reply.header("Content-Range") or ""
        m = _RANGE.fullmatch(text.strip())
        if m is None:
            raise SourceError(f"{self.name}: a 206 reply with a malformed Content-Range {text!r}")
        start, last = int(m.group(1)), int(m.group(2))
        total = int(m.group(3)) if m.group(3) != "*" else (self._size or last + 1)
        if want is not None and (start, last + 1) != want:
            raise SourceError(
                f"{self.name}: asked for bytes {want[0]}-{want[1] - 1}, the server sent "
                f"{start}-{last} (Content-Range disagrees)"
            )
        if self._size is not None and total != self._size:
            raise SourceError(
                f"{self.name}: the file's size changed from {self._size} to {total} bytes"
            )
        return start, last + 1, total

    def _read_body(self, reply: _Reply, n: int, *, partial: bool = False) -> bytes:
        chunks = []
        got = 0
        try:
            while got < n:
                chunk = reply.resp.read(min(_CHUNK, n - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except (OSError, http.client.HTTPException) as exc:
            self._drop_connection()
            raise SourceError(f"{self.name}: the transfer failed: {exc}") from exc
        if got < n:
            self._drop_connection()
            raise SourceError(f"{self.name}: short read: expected {n} bytes, got {got}")
        if partial:
            self._drop_connection()  # do not let the rest of a whole-file reply come in
        self.stats.bytes_read += got
        return b"".join(chunks)

    def _finish(self, reply: _Reply) -> None:
        if not reply.resp.isclosed():
            self._drop_connection()  # leftover body: drop the connection rather than read it

    def _request(self, byte_range: str) -> _Reply:
        url = self.url
        attempt = 0
        redirects = 0
        while True:
            try:
                reply = self._send(url, byte_range)
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                if attempt < self._retries:
                    time.sleep(self._backoff * (2**attempt))
                    attempt += 1
                    continue
                raise SourceError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            if reply.status in (301, 302, 303, 307, 308):
                location = reply.header("Location")
                self._drop_connection()
                if not location or redirects >= 5:
                    raise SourceError(f"{self.name}: too many or broken redirects")
                url = urllib.parse.urljoin(url, location)
                if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                    raise SourceError(f"{self.name}: redirected to a non-HTTP URL")
                redirects += 1
                continue
            if reply.status in _TRANSIENT and attempt < self._retries:
                self._drop_connection()
                wait = reply.header("Retry-After")
                delay = float(wait) if wait and wait.isdigit() else self._backoff * (2**attempt)
                time.sleep(min(delay, 30.0))
                attempt += 1
                continue
            return reply

    def _send(self, url: str, byte_range: str) -> _Reply:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = (parts.scheme, host, port)
        with self._lock:
            if self._conn is None or self._conn_key != key:
                self._drop_connection()
                self._conn = self._connect(parts.scheme, host, port)
                self._conn_key = key
            conn = self._conn
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        headers = {"Range": byte_range, "Accept-Encoding": "identity", **self._headers}
        origin = urllib.parse.urlsplit(self.url).hostname
        if self._token and host == origin:
            headers["Authorization"] = f"Bearer {self._token}"
        conn.request("GET", path, headers=headers)
        self.stats.requests += 1
        return _Reply(conn, conn.getresponse())

    def _connect(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = _HTTPSConnection(
                host, port, timeout=self._timeout, context=ssl.create_default_context()
            )
        else:
            conn = _HTTPConnection(host, port, timeout=self._timeout)
        conn.connect()
        return conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass


def _small_buffer_socket(host: str, port: int, timeout: float) -> socket.socket:
    """A connected socket whose receive buffer is set before connecting, so the TCP window
    (what a server can push before we read) stays small."""
    error: OSError | None = None
    for family, kind, proto, _name, address in socket.getaddrinfo(
        host, port, 0, socket.SOCK_STREAM
    ):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECV_BUFFER)
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"cannot resolve {host}")


class _HTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = _small_buffer_socket(self.host, self.port, float(self.timeout or 30))


class _HTTPSConnection(http.client.HTTPSConnection):
    def connect(self) -> None:
        sock = _small_buffer_socket(self.host, self.port, float(self.timeout or 30))
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _redact(url: str) -> str:
    """``url`` without credentials or query string (which may hold tokens)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
