"""The HTTP transport: one range request per call, checked before its body is read.

:class:`HTTPFetcher` is all a remote source needs from HTTP: ``fetch(request)`` asks for a
byte range (or the end of the file) and returns exactly those bytes with the file's size.
A server can lie, so every reply is checked before its body is read, and no more body bytes
are ever read than were asked for (or, from a server that ignores ``Range``, than the head
of the file up to the end of what was asked for); nothing is allocated according to a size a
server claims:

* ``206``: the ``Content-Range`` must be exactly the range asked for (a range running past
  the end clipped to the file's size; a suffix ``bytes=-N`` the last ``min(N, size)``
  bytes), inside the file, with the size learnt earlier; a ``Content-Length`` must agree.
* ``200`` (the server ignores ``Range``): the body is the whole file, read only as far as
  needed and kept for later reads (:mod:`._prefix`): at most
  :data:`~._prefix.FULL_DOWNLOAD_LIMIT` bytes (64 MiB) unless ``allow_full_download``. Its
  ``Content-Length`` must be the file's size; a body shorter than it, or longer, is refused.
* A web page (``Content-Type: text/html`` and HTML bytes) where the file should start is a
  :class:`~._prefix.NotATensorFileError`: a directory listing is not a tensor file.
* ``416`` only for a range past the end; a compressed body (``Content-Encoding``) or an
  unknown ``Transfer-Encoding`` is refused; numbers in headers are strict ASCII.
* Every request says ``User-Agent: tensorfile/<version>``.
* Redirects: at most 5, never to another scheme than http(s) nor from https to http. A
  permanent one (``301``, ``308``) at the start of the chain is remembered: the fetcher's next
  requests go straight to its target (``302``, ``303`` and ``307`` are followed every time).
  Credentials (the token, ``user:password@`` of the URL, ``Authorization`` and ``Cookie``
  headers) go only to the origin (scheme, host and port) of the URL the caller gave.
* Time: each socket operation has ``timeout``; each request (connecting, a proxy tunnel, the
  TLS handshake, the headers and the body) has a deadline of ``deadline`` seconds plus the
  bytes asked for at ``min_speed`` bytes per second.
* Transient failures (connection errors, 429, 5xx) are retried with exponential backoff,
  honouring ``Retry-After`` up to the timeout (at most 30 s).
* Proxies from the environment (:mod:`._proxy`); a pool of connections (:mod:`._conn`)
  lets threads share one fetcher.

Exceptions of ``http.client``, ``ssl`` and ``socket`` are translated here, and only here,
into :class:`~tensorfile.errors.SourceError`, their text scrubbed of the URL's secrets.

Example:
    >>> redact("https://user:pw@host:8080/m.safetensors?sig=secret")
    'https://host:8080/m.safetensors'
    >>> try:
    ...     HTTPFetcher("http://user:pw@host:99999/m.safetensors?token=abc")
    ... except InvalidArgumentError as exc:
    ...     print(exc)
    http://host:99999/m.safetensors: the port must be a number from 1 to 65535
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
import urllib.parse

from ..core.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from ..core.source import ByteRequest, RangeRequest, ReadStats, SuffixRequest
from . import _headers as hdr
from . import _prefix
from ._cache import Fetched
from ._conn import Connection, DeadlineExceeded, Pool, clock_of, discard, new_connection
from ._conn import ssl_context as _ssl_context
from ._proxy import proxy_for
from ._request import (
    USER_AGENT,
    Want,
    authorization,
    check_headers,
    check_request,
    positive,
)
from ._urls import HttpURL, parse_http_url, redact, scrub

__all__ = ["MIN_SPEED", "Fetched", "HTTPFetcher", "redact"]

MIN_SPEED = 100_000.0
"""The slowest transfer (bytes per second) a request's deadline allows by default."""

_CHUNK = 1 << 20
_TRANSIENT = {429, 500, 502, 503, 504}
_REDIRECTS = {301, 302, 303, 307, 308}
_MAX_REDIRECTS = 5
_MAX_WAIT = 30.0
_MAX_RETRIES = 10


def _wait(seconds: float, stop_at: float) -> float:
    """A wait before a retry: capped, and never past the end of the fetch."""
    return max(0.0, min(seconds, _MAX_WAIT, stop_at - time.monotonic()))


_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_FOREIGN = (OSError, http.client.HTTPException, ValueError)


class _Reply:
    """A response being read: status, headers, the connection it holds and where it goes
    back to."""

    def __init__(
        self,
        conn: Connection,
        resp: http.client.HTTPResponse,
        key: object,
        url: HttpURL,
        nbytes: int,
    ) -> None:
        self.nbytes = nbytes  # what was asked for: the deadline's allowance
        self.conn = conn
        self.resp = resp
        self.key = key
        self.url = url
        self.status = resp.status

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)


class HTTPFetcher:
    """Range requests to one URL; safe to share between threads.

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``user:password@`` of the URL as basic auth, then
            ``$TENSORFILE_TOKEN``, then ``$HF_TOKEN``); sent to the URL's origin (scheme,
            host and port) only, never printed.
        timeout: seconds for connecting and for each socket operation.
        retries: attempts after the first for transient failures.
        backoff: first wait between attempts, doubled each time.
        headers: extra request headers (``Authorization`` and ``Cookie`` go to the origin
            only; a ``User-Agent`` replaces ``tensorfile/<version>``).
        allow_full_download: a server that ignores ``Range`` sends the whole file for every
            request; tensorfile reads it only up to the end of what is needed, and at most
            :data:`~._prefix.FULL_DOWNLOAD_LIMIT` bytes (64 MiB) unless this is True (None:
            ``$TENSORFILE_ALLOW_FULL_DOWNLOAD``).
        deadline: seconds each request may take on top of its transfer time at
            ``min_speed`` (default: ``timeout``).
        min_speed: bytes per second: a request for ``n`` bytes fails after ``deadline + n /
            min_speed`` seconds.
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
        allow_full_download: bool | None = None,
        deadline: float | None = None,
        min_speed: float = MIN_SPEED,
    ) -> None:
        self._url = parse_http_url(url)
        self.url = url
        self.name = self._url.name
        self.stats = ReadStats()
        self._timeout = positive("timeout", timeout)
        self._deadline = self._timeout if deadline is None else positive("deadline", deadline)
        self._min_speed = positive("min_speed", min_speed)
        if isinstance(retries, bool) or not isinstance(retries, int):
            raise InvalidArgumentError(f"retries must be an int, not {type(retries).__name__}")
        if not 0 <= retries <= _MAX_RETRIES:
            raise InvalidArgumentError(f"retries must be from 0 to {_MAX_RETRIES}, not {retries}")
        self._retries = retries
        self._backoff = positive("backoff", backoff, zero=True)
        self._auth = authorization(self._url, token)
        self._headers, self._origin_headers = check_headers(self.name, headers or {})
        if not any(k.lower() == "user-agent" for k in self._headers):
            self._headers = {"User-Agent": USER_AGENT, **self._headers}
        self._allow_full = _prefix.allow_full_download(allow_full_download)
        self._prefix = _prefix.Prefix()  # what a server that ignores Range sent
        self._lock = threading.Lock()
        self._start = self._url  # where requests go: past the permanent redirects seen
        self._pool = Pool()
        self._context: ssl.SSLContext | None = None
        self._size: int | None = None
        self.version: str | None = None
        """The file's ``ETag`` from the first reply that has one (None before, or when the
        server sends none); a later reply with another ETag is an error: the file changed."""
        self._versioned = False

    # -- one request -------------------------------------------------------------------------

    def fetch(self, request: ByteRequest) -> Fetched:
        """The bytes of ``request`` (a range running past the end clipped to it). The first
        fetch learns the file's size; a later reply that disagrees with it is an error."""
        want = check_request(request)
        kept = self._prefix.serve(request)
        if kept is not None:
            return kept
        reply = self._request(want)
        ok = False
        try:
            if reply.status == 206:
                got = self._partial(reply, want)
            elif reply.status == 200:
                got = self._whole_body(reply, want)
            elif reply.status == 416:
                got = self._unsatisfiable(reply, want)
            else:
                reason = hdr.show(scrub(reply.resp.reason, self.url))  # a server may echo
                gone = reply.status in (404, 410)  # a FileNotFoundError, as a missing file
                kind = SourceNotFoundError if gone else SourceError
                raise kind(f"{self.name}: HTTP {reply.status} {reason}")
            ok = True
            return got
        finally:
            self._finish(reply, ok and reply.status != 200)  # see _trailing

    def _framing(self, reply: _Reply) -> int | None:
        """The body's ``Content-Length`` (None when absent), after refusing compressed
        bodies and framings tensorfile does not read."""
        encoding = reply.header("Content-Encoding")
        if encoding is not None and encoding.strip(" \t").lower() not in ("", "identity"):
            raise SourceError(
                f"{self.name}: the server compressed the reply (Content-Encoding "
                f"{hdr.show(encoding)}) although it was asked for the identity encoding"
            )
        transfer = reply.header("Transfer-Encoding")
        text = reply.header("Content-Length")
        if transfer is not None:
            if transfer.strip(" \t").lower() != "chunked":
                raise SourceError(
                    f"{self.name}: unsupported Transfer-Encoding {hdr.show(transfer)}"
                )
            if text is not None:
                raise SourceError(f"{self.name}: a reply with both Content-Length and chunks")
        if text is None:
            return None
        length = hdr.number(text)
        if length is None:
            raise SourceError(f"{self.name}: malformed Content-Length {hdr.show(text)}")
        return length

    def _partial(self, reply: _Reply, want: Want) -> Fetched:
        """A ``206``: checked against what was asked before its body is read."""
        length = self._framing(reply)
        text = reply.header("Content-Range")
        parsed = hdr.content_range(text)
        if parsed is None:
            raise SourceError(
                f"{self.name}: a 206 reply with a malformed Content-Range {hdr.show(text)}"
            )
        first, last, claimed = parsed
        with self._lock:
            total = claimed if claimed is not None else self._size
        if total is None:
            raise SourceError(f"{self.name}: the server does not tell the file's size ({text!r})")
        if last < first or last >= total:
            raise SourceError(
                f"{self.name}: Content-Range {hdr.show(text)} is not a range of a {total}-byte file"
            )
        if want.expected(total) != (first, last + 1):
            raise SourceError(
                f"{self.name}: asked for {want.spec}, the server sent bytes {first}-{last} of "
                f"{total} (Content-Range disagrees)"
            )
        n = last + 1 - first
        if length is not None and length != n:
            raise SourceError(
                f"{self.name}: Content-Length {length} disagrees with Content-Range {first}-{last}"
            )
        self._learn_size(total)
        self._learn_version(reply)
        data = self._read_body(reply, n)
        if first == 0:
            self._check_page(reply, data, total)
        return Fetched(first, data, total)

    def _whole_body(self, reply: _Reply, want: Want) -> Fetched:
        """A ``200``: the server ignored ``Range`` and sends the whole file. Read it only as
        far as needed (:func:`~._prefix.plan`: at most 64 MiB unless allowed), keep what was
        read for later reads, and serve the request from it."""
        length = self._framing(reply)
        with self._lock:
            size = self._size
        if size is not None and length is not None and length != size:
            raise SourceError(
                f"{self.name}: the server sent the whole file as {length} bytes; it had "
                f"{size} (the file changed, or the server lies)"
            )
        total = length if length is not None else size
        request = want.request
        need = None
        if total is not None:
            need = total if isinstance(request, SuffixRequest) else min(request.stop, total)
        kept = self._prefix.data
        stop = _prefix.plan(
            need=need, size=total, kept=len(kept), allow=self._allow_full, name=self.name
        )
        data = self._read_head(reply, kept, stop, length)
        if total is None:  # no Content-Length: the body's end is the file's end
            total = len(data)
        self._learn_size(total)
        self._learn_version(reply)
        self._check_page(reply, data, total)
        self._prefix.keep(data, total)
        if isinstance(request, SuffixRequest):
            return Fetched(max(0, total - request.length), data[-request.length :], total)
        start = min(request.start, total)
        return Fetched(start, data[start : min(request.stop, total)], total)

    def _read_head(self, reply: _Reply, kept: bytes, stop: int | None, length: int | None) -> bytes:
        """The first ``stop`` bytes of a whole-file body (None: all of it, refused past the
        limit unless allowed), in chunks, never allocated ahead. The bytes already ``kept``
        are compared, not kept twice; the deadline grows with the bytes read."""
        cap = stop
        if stop is None and not self._allow_full:
            cap = _prefix.FULL_DOWNLOAD_LIMIT + 1
        clock = clock_of(reply.conn)
        t0 = time.monotonic()
        chunks = [kept[: cap if cap is not None else len(kept)]]
        pos = 0  # bytes of the body read
        try:
            while cap is None or pos < cap:
                n = _CHUNK if cap is None else min(_CHUNK, cap - pos)
                clock.deadline = t0 + self._deadline + (pos + n) / self._min_speed
                if length is not None and pos + n == length:
                    self._trailing(reply, n)  # the body's last bytes: anything after them?
                chunk = reply.resp.read(n)
                if not chunk:
                    break
                same = max(0, min(len(kept) - pos, len(chunk)))
                if chunk[:same] != kept[pos : pos + same]:
                    raise SourceError(
                        f"{self.name}: the file changed while it was read (its first bytes "
                        "differ from one reply to the next)"
                    )
                if same < len(chunk):
                    chunks.append(chunk[same:])
                pos += len(chunk)
            if length is not None and stop == length == pos:
                self._trailing(reply, 0)
        except DeadlineExceeded:
            raise self._late(pos) from None
        except _FOREIGN as exc:
            raise SourceError(f"{self.name}: the transfer failed: {self._say(exc)}") from None
        with self._lock:
            self.stats.bytes_read += pos
        if cap is not None and stop is None and pos >= cap:
            raise _prefix.over_limit(self.name, pos)
        if stop is not None and pos < stop:
            claim = f"its Content-Length is {length:,}" if length is not None else "it had more"
            raise SourceError(
                f"{self.name}: short read: the server ignores Range requests and its reply "
                f"ended after {pos:,} bytes of the {stop:,} needed ({claim})"
            )
        return b"".join(chunks)

    def _trailing(self, reply: _Reply, left: int) -> None:
        """Refuse a body longer than its ``Content-Length``: with ``left`` bytes of it still
        to read, the buffered bytes must be no more (and, once all are read, no byte may
        wait on the socket). Bytes still in flight cannot be seen: a later reply on the
        connection would be garbage, so connections of whole-file replies are never reused."""
        extra = False
        fp = reply.resp.fp
        if left:
            extra = fp is not None and len(fp.peek(left + 1)) > left
        else:
            sock = reply.conn.sock
            if isinstance(sock, ssl.SSLSocket):
                extra = sock.pending() > 0
            elif sock is not None and select.select([sock], [], [], 0)[0]:
                extra = bool(sock.recv(1, socket.MSG_PEEK))
        if extra:
            raise SourceError(
                f"{self.name}: the server sent more than the {reply.header('Content-Length')} "
                "bytes its Content-Length claims (the file's size is uncertain)"
            )

    def _check_page(self, reply: _Reply, head: bytes, total: int) -> None:
        """Refuse a web page where the file should start (a directory listing...)."""
        content_type = reply.header("Content-Type")
        if content_type is not None and _prefix.html_page(content_type, head):
            raise _prefix.not_a_tensor_file(self.name, content_type, head, total)

    def _unsatisfiable(self, reply: _Reply, want: Want) -> Fetched:
        """A ``416``: right only for a range that starts past the end of the file."""
        claimed = hdr.unsatisfied_range(reply.header("Content-Range"))
        with self._lock:
            size = self._size
        total = claimed if claimed is not None else (0 if size is None else size)
        if want.expected(total) is not None:
            raise SourceError(
                f"{self.name}: HTTP 416: the server cannot serve {want.spec} of a {total}-byte "
                "file (the file may have changed since it was opened)"
            )
        self._learn_size(total)
        start = want.request.start if isinstance(want.request, RangeRequest) else 0
        return Fetched(min(start, total), b"", total)

    def _learn_version(self, reply: _Reply) -> None:
        """Remember the first reply's ``ETag``; refuse a later reply whose ETag differs (the
        file was replaced between two reads of it)."""
        tag = reply.header("ETag")
        tag = tag.strip(" \t") if tag is not None else None
        with self._lock:
            if not self._versioned:
                self._versioned = True
                self.version = tag or None
                return
            known = self.version
        if known is not None and tag and tag != known:
            raise SourceError(
                f"{self.name}: the file changed while it was being read (ETag {hdr.show(known)}, "
                f"then {hdr.show(tag)})"
            )

    def _learn_size(self, total: int) -> None:
        with self._lock:
            if self._size is not None and total != self._size:
                raise SourceError(
                    f"{self.name}: the file's size changed from {self._size} to {total} bytes"
                )
            self._size = total

    def _read_body(self, reply: _Reply, n: int) -> bytes:
        """Exactly ``n`` bytes of the body (never more), or a :class:`SourceError`."""
        chunks = []
        got = 0
        try:
            while got < n:
                chunk = reply.resp.read(min(_CHUNK, n - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except DeadlineExceeded:
            raise self._late(reply.nbytes) from None
        except _FOREIGN as exc:
            raise SourceError(f"{self.name}: the transfer failed: {self._say(exc)}") from None
        if got < n:
            raise SourceError(f"{self.name}: short read: expected {n} bytes, got {got}")
        with self._lock:
            self.stats.bytes_read += got
        return b"".join(chunks)

    def _finish(self, reply: _Reply, ok: bool) -> None:
        """Give the connection back when its reply was read to the end; else close it rather
        than read the rest."""
        if ok and reply.resp.isclosed() and not reply.resp.will_close:
            self._pool.give(reply.key, reply.conn)
        else:
            discard(reply.conn)

    def _late(self, nbytes: int) -> SourceError:
        budget = self._deadline + nbytes / self._min_speed
        return SourceError(
            f"{self.name}: no complete reply within {budget:.3g} s (the deadline of a request "
            f"for {nbytes:,} bytes: {self._deadline:g} s plus {self._min_speed:,.0f} bytes/s)"
        )

    def _say(self, exc: BaseException) -> str:
        """A foreign exception as text, scrubbed of the URL and its secrets."""
        text = scrub(str(exc), self.url) or "(no details)"
        return f"{type(exc).__name__}: {text}"

    # -- the retry and redirect loop ---------------------------------------------------------

    def _request(self, want: Want) -> _Reply:
        with self._lock:
            url = self._start
        start = url
        permanent: HttpURL | None = url  # past the permanent redirects the chain began with
        attempt = 0
        redirects = 0
        # the whole fetch, retries and redirects included, ends within twice one attempt's
        # deadline: retries use what is left, never more
        budget = self._deadline + want.nbytes / self._min_speed
        stop_at = time.monotonic() + 2 * budget
        while True:
            if attempt and time.monotonic() >= stop_at:
                raise self._late(want.nbytes)
            try:
                reply = self._exchange(url, want, stop_at)
            except DeadlineExceeded:
                raise self._late(want.nbytes) from None
            except _FOREIGN as exc:
                if attempt < self._retries:
                    time.sleep(_wait(self._backoff * (2**attempt), stop_at))
                    attempt += 1
                    continue
                raise SourceError(f"{self.name}: {self._say(exc)}") from None
            if reply.status in _REDIRECTS:
                location = reply.header("Location")
                discard(reply.conn)
                if redirects >= _MAX_REDIRECTS:
                    raise SourceError(f"{self.name}: more than {_MAX_REDIRECTS} redirects")
                url = self._redirect(url, location)
                redirects += 1
                permanent = url if permanent is not None and reply.status in (301, 308) else None
                continue
            if reply.status in _TRANSIENT and attempt < self._retries:
                wait = hdr.retry_after(reply.header("Retry-After"))
                discard(reply.conn)
                if wait is None:
                    wait = self._backoff * (2**attempt)
                time.sleep(_wait(min(wait, self._timeout), stop_at))
                attempt += 1
                continue
            if permanent is not None and permanent != start:
                with self._lock:
                    self._start = permanent  # the next requests go straight there
            return reply

    def _redirect(self, url: HttpURL, location: str | None) -> HttpURL:
        """The next URL; credentials in ``location`` are never used nor shown."""
        if location is None or not location.strip(" \t"):
            raise SourceError(f"{self.name}: a redirect without a Location")
        try:
            joined = urllib.parse.urljoin(url.raw, location.strip(" \t"))
            scheme = urllib.parse.urlsplit(joined).scheme if "://" in joined else ""
        except ValueError:
            raise SourceError(f"{self.name}: a redirect to a malformed URL") from None
        if scheme not in ("http", "https"):
            raise SourceError(f"{self.name}: redirected to a non-HTTP URL ({redact(joined)})")
        if url.scheme == "https" and scheme == "http":
            raise SourceError(f"{self.name}: redirected from https to plain http; refused")
        try:
            return parse_http_url(joined)
        except InvalidArgumentError as exc:
            raise SourceError(f"{self.name}: redirected to an unusable URL: {exc}") from None

    def _ssl(self) -> ssl.SSLContext:
        with self._lock:
            if self._context is None:
                self._context = _ssl_context()
            return self._context

    def _exchange(self, url: HttpURL, want: Want, stop_at: float) -> _Reply:
        """Send one request and read the reply's headers, on a pooled connection (replayed
        once on a new one when a kept-alive connection turns out closed)."""
        proxy = proxy_for(url)
        key = (url.origin, proxy.key if proxy is not None else None)
        headers = dict(self._headers)
        if url.origin == self._url.origin:
            headers.update(self._origin_headers)
            if self._auth is not None:
                headers["Authorization"] = self._auth
        target = url.target
        if proxy is not None and url.scheme == "http":
            target = url.absolute
            if proxy.authorization is not None:
                headers["Proxy-Authorization"] = proxy.authorization
        headers |= {"Host": url.authority, "Range": want.spec, "Accept-Encoding": "identity"}
        deadline = min(time.monotonic() + self._deadline + want.nbytes / self._min_speed, stop_at)
        conn = self._pool.take(key)
        while True:
            reused = conn is not None and conn.sock is not None
            if conn is None:
                context = self._ssl() if url.scheme == "https" else None
                conn = new_connection(url, proxy, self._timeout, context)
            clock_of(conn).deadline = deadline
            try:
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except _STALE:
                discard(conn)
                if reused:
                    conn = None
                    continue
                self._count()
                raise
            except TimeoutError:  # the TLS handshake's timeout, set to the time left
                discard(conn)
                self._count()
                if time.monotonic() >= deadline:
                    raise DeadlineExceeded("the request's deadline passed") from None
                raise
            except BaseException:
                discard(conn)
                self._count()
                raise
            self._count()
            return _Reply(conn, resp, key, url, want.nbytes)

    def _count(self) -> None:
        with self._lock:
            self.stats.requests += 1

    def close(self) -> None:
        """Close the idle connections (and those of requests in flight, when they end)."""
        self._pool.close()
