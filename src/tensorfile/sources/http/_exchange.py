"""The request side of the HTTP transport: one request sent and its reply's headers read,
through the retry and redirect loop.

:class:`Exchanges` is the part of :class:`~._http.HTTPFetcher` that talks to servers: it
picks a pooled connection (:mod:`._conn`) for the URL and proxy (:mod:`._proxy`), sends a
``GET`` with the ``Range`` asked for (and ``If-Match`` with the version already read, see
:mod:`._http`), follows redirects (at most 5, never to another scheme than http(s) nor
from https to http; a permanent one at the start of the chain is remembered), retries
transient failures with exponential backoff (honouring ``Retry-After``), and returns the
reply once its headers are read; the body is the fetcher's to read. Credentials go to the
origin of the URL the caller gave, never elsewhere.

Receive buffers: until a server has answered a range request with ``206``, connections are
made with the small receive buffer of :data:`~._conn.RECV_BUFFER` (a server that ignores
``Range`` cannot push far ahead of what is read); once it has, new connections get the
kernel's self-tuning buffers, which a whole-file load needs for full speed (measured: the
small buffer costs a third of a loopback stream's throughput).

Example:
    >>> _wait(100.0, time.monotonic() + 1) <= 1
    True
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse

from ...core.errors import InvalidArgumentError, SourceError
from ...core.source import ReadStats
from . import _headers as hdr
from ._conn import (
    POOL,
    Connection,
    DeadlineExceeded,
    clock_of,
    discard,
    new_connection,
    pool_key,
    shared_context,
    tls_settings,
)
from ._proxy import proxy_for
from ._request import Want
from ._urls import HttpURL, parse_http_url, redact, scrub

__all__ = ["FOREIGN", "Exchanges", "Reply"]

_TRANSIENT = {429, 500, 502, 503, 504}
_REDIRECTS = {301, 302, 303, 307, 308}
_MAX_REDIRECTS = 5
_MAX_WAIT = 30.0

_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
FOREIGN = (OSError, http.client.HTTPException, ValueError)
"""What ``http.client``, ``ssl`` and ``socket`` raise: translated into SourceError."""


def _wait(seconds: float, stop_at: float) -> float:
    """A wait before a retry: capped, and never past the end of the fetch."""
    return max(0.0, min(seconds, _MAX_WAIT, stop_at - time.monotonic()))


class Reply:
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
        self.if_match: str | None = None  # the ETag the request was conditional on

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)


class Exchanges:
    """Requests to one URL and its redirects, shared by threads (the fetcher's base)."""

    name: str
    url: str
    stats: ReadStats
    _url: HttpURL
    _timeout: float
    _deadline: float
    _min_speed: float
    _retries: int
    _backoff: float
    _auth: str | None
    _headers: dict[str, str]
    _origin_headers: dict[str, str]

    def _init_exchanges(self) -> None:
        self._lock = threading.Lock()
        self._start = self._url  # where requests go: past the permanent redirects seen
        self._pool = POOL  # the process's: shared with every source of the same origin
        self._ranges_honoured = False  # a 206 was seen: new connections get big buffers

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

    def _request(self, want: Want) -> Reply:
        """The reply to ``want`` (headers read), past redirects and transient failures."""
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
            except FOREIGN as exc:
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

    def _exchange(self, url: HttpURL, want: Want, stop_at: float) -> Reply:
        """Send one request and read the reply's headers, on a pooled connection (replayed
        once on a new one when a kept-alive connection turns out closed)."""
        proxy = proxy_for(url)
        key = pool_key(url, proxy)
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
        conditions = self._conditions(url)
        headers |= conditions
        if url.origin == self._url.origin:
            headers |= self._signed(url)
        deadline = min(time.monotonic() + self._deadline + want.nbytes / self._min_speed, stop_at)
        conn = self._pool.take(key)
        while True:
            reused = conn is not None and conn.sock is not None
            if conn is None:
                context = shared_context(tls_settings()) if url.scheme == "https" else None
                conn = new_connection(url, proxy, self._timeout, context, self._ranges_honoured)
            clock = clock_of(conn)
            clock.timeout = self._timeout  # (a pooled connection may come from another source)
            clock.deadline = deadline
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
            reply = Reply(conn, resp, key, url, want.nbytes)
            reply.if_match = conditions.get("If-Match")
            return reply

    def _conditions(self, url: HttpURL) -> dict[str, str]:
        """Headers that make a request conditional on the version already read (the
        fetcher's ``If-Match``); none by default."""
        return {}

    def _signed(self, url: HttpURL) -> dict[str, str]:
        """Headers that sign a request to the origin (an object store's signature); none
        for plain HTTP."""
        return {}

    def _count(self) -> None:
        with self._lock:
            self.stats.requests += 1

    def _finish(self, reply: Reply, ok: bool) -> None:
        """Give the connection back when its reply was read to the end; else close it rather
        than read the rest."""
        if ok and reply.resp.isclosed() and not reply.resp.will_close:
            self._pool.give(reply.key, reply.conn)
        else:
            discard(reply.conn)

    def close(self) -> None:
        """Nothing to release: the connections are the process's (:data:`~._conn.POOL`),
        waiting idle for the next source of the same origin."""
