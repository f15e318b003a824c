"""The HTTP transport: one range request per call, checked strictly.

:class:`HTTPFetcher` is all a remote source needs from HTTP: ``fetch(request)`` asks for a
byte range (or the end of the file) and returns exactly those bytes with the file's size.
It checks every reply: ``206`` with a ``Content-Range`` that matches what was asked, ``416``
and short bodies are errors; redirects are followed (at most 5; the token goes to the
original host only); transient failures (connection errors, 429, 5xx) are retried with
exponential backoff; every socket operation has a timeout. A server that ignores ``Range``
and answers ``200`` with the whole body is read only as far as needed and the connection is
closed, so a 10 GB file never costs more than the bytes asked for plus one network buffer.
Exceptions of ``http.client`` and ``socket`` are translated here, and only here, into
:class:`~tensorfile.errors.SourceError`.

Example:
    >>> redact("https://user:pw@host:8080/m.safetensors?sig=secret")
    'https://host:8080/m.safetensors'
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
from dataclasses import dataclass

from ..core.errors import InvalidArgumentError, SourceError
from ..core.source import ByteRequest, RangeRequest, ReadStats, SuffixRequest

__all__ = ["Fetched", "HTTPFetcher", "redact"]

_RECV_BUFFER = 256 << 10  # the socket buffer: the most a range-ignoring server can push ahead
_CHUNK = 1 << 20
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_TRANSIENT = {429, 500, 502, 503, 504}


@dataclass(frozen=True, slots=True)
class Fetched:
    """The bytes a fetch returned: ``data`` starts at offset ``start`` of a ``size``-byte
    file."""

    start: int
    data: bytes
    size: int


class _Reply:
    """A response being read: status, headers and the open connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.resp = resp
        self.status = resp.status

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)


class HTTPFetcher:
    """Range requests to one URL.

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``$TENSORFILE_TOKEN``, then ``$HF_TOKEN``); sent as
            ``Authorization: Bearer ...`` to the URL's host only, never printed.
        timeout: seconds for connecting and for each socket read.
        retries: attempts after the first for transient failures.
        backoff: first wait between attempts, doubled each time.
        headers: extra request headers.
        whole_file_limit: a server that ignores ``Range`` may send the whole body for a
            request that starts at 0 and asks for at most this many bytes.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        headers: dict[str, str] | None = None,
        whole_file_limit: int = 0,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidArgumentError(f"not an http(s) URL: {redact(url)}")
        self.url = url
        self.name = redact(url)
        self.stats = ReadStats()
        self._token = token or os.environ.get("TENSORFILE_TOKEN") or os.environ.get("HF_TOKEN")
        self._timeout = timeout
        self._retries = max(0, retries)
        self._backoff = backoff
        self._headers = dict(headers or {})
        self._whole_file_limit = whole_file_limit
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._conn_key: tuple[str, str, int] | None = None
        self._size: int | None = None

    # -- one request -------------------------------------------------------------------------

    def fetch(self, request: ByteRequest) -> Fetched:
        """The bytes of ``request``. The first fetch learns the file's size; a later reply
        that disagrees with it is an error."""
        if isinstance(request, SuffixRequest):
            spec = f"bytes=-{request.length}"
        else:
            spec = f"bytes={request.start}-{request.stop - 1}"
        reply = self._request(spec)
        try:
            if reply.status == 206:
                want = None if isinstance(request, SuffixRequest) else request
                start, stop, total = self._content_range(reply, want)
                return Fetched(start, self._read_body(reply, stop - start), total)
            if reply.status == 200:
                return self._whole_body(reply, request)
            if reply.status == 416 and self._size is None:
                self._size = 0  # an empty file: no range of it can be served
                return Fetched(0, b"", 0)
            if reply.status == 416:
                raise SourceError(
                    f"{self.name}: HTTP 416: the server cannot serve {spec} (the file may have "
                    "changed since it was opened)"
                )
            raise SourceError(f"{self.name}: HTTP {reply.status} {reply.resp.reason}")
        finally:
            self._finish(reply)

    def _whole_body(self, reply: _Reply, request: ByteRequest) -> Fetched:
        """A ``200``: the server ignored ``Range``. Read only the head that was asked for, when
        the request starts at 0; refuse anything else rather than download the whole file."""
        length = reply.header("Content-Length")
        if self._size is None:
            if length is None or not length.isdigit():
                raise SourceError(
                    f"{self.name}: the server ignores Range requests and sends no "
                    "Content-Length; refusing to download the whole file"
                )
            self._size = int(length)
        if isinstance(request, SuffixRequest):
            if self._size > request.length:
                raise SourceError(
                    f"{self.name}: the server ignores Range requests; reading the end of "
                    f"a {self._size:,}-byte file would download all of it"
                )
            request = RangeRequest(0, self._size)
        if request.start != 0 or request.stop > max(self._whole_file_limit, 0):
            raise SourceError(
                f"{self.name}: the server ignores Range requests (HTTP 200 for bytes "
                f"{request.start}-{request.stop - 1}); refusing to download the whole file"
            )
        want = min(request.stop, self._size)
        return Fetched(0, self._read_body(reply, want, partial=True), self._size)

    def _content_range(self, reply: _Reply, want: RangeRequest | None) -> tuple[int, int, int]:
        text = reply.header("Content-Range") or ""
        m = _RANGE.fullmatch(text.strip())
        if m is None:
            raise SourceError(f"{self.name}: a 206 reply with a malformed Content-Range {text!r}")
        start, last = int(m.group(1)), int(m.group(2))
        total = int(m.group(3)) if m.group(3) != "*" else (self._size or last + 1)
        # a range running past the end is served up to the end (the first, speculative read)
        if want is not None and (start, last + 1) != (want.start, min(want.stop, total)):
            raise SourceError(
                f"{self.name}: asked for bytes {want.start}-{want.stop - 1}, the server sent "
                f"{start}-{last} (Content-Range disagrees)"
            )
        if self._size is not None and total != self._size:
            raise SourceError(
                f"{self.name}: the file's size changed from {self._size} to {total} bytes"
            )
        self._size = total
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

    # -- the retry and redirect loop ---------------------------------------------------------

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

    def close(self) -> None:
        """Close the connection."""
        self._drop_connection()


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


def redact(url: str) -> str:
    """``url`` without credentials or query string (which may hold tokens)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
