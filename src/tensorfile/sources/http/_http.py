"""The HTTP transport: one range request per call, checked before its body is read.

:class:`HTTPFetcher` is all a remote source needs from HTTP: ``fetch(request)`` asks for a
byte range (or the end of the file) and returns exactly those bytes with the file's size;
``fetch_into(offset, buffers)`` receives a range's body straight into the caller's buffers
(the tensors being loaded: no copy, no buffer of its own), and asks again when a body breaks
off (``retries`` times). The request side (connections, redirects, retries of transient
failures, credentials) is :mod:`._exchange`.
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
* The file's version: the ``ETag`` of the first reply that has one. Every later reply must
  carry the same (a file replaced between two reads is an error, never a mix of two
  versions' bytes), and every later request to the URL that gave it says ``If-Match:
  <ETag>``, so that the server itself refuses to serve another version: its ``412
  Precondition Failed`` is the same "the file changed while it was being read" error. A weak
  ETag (``W/"..."``) is never sent: ``If-Match`` compares strongly, so it would never match;
  such a file has the per-reply comparison only. Nor is one sent to another URL (the first
  hop of a redirect, whose resource has an ETag of its own).
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
* Proxies from the environment (:mod:`._proxy`); the process's pool of connections per
  origin (:mod:`._conn`) lets threads share one fetcher (a load runs up to ``io_threads``
  requests at once) and fetchers of one origin share connections.

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

import select
import socket
import ssl
import threading
import time

from ...core.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from ...core.source import ByteRequest, RangeRequest, ReadStats, SuffixRequest, scatter
from ..local.advice import prefault
from . import _headers as hdr
from . import _prefix
from ._conn import DeadlineExceeded, clock_of
from ._exchange import FOREIGN as _FOREIGN
from ._exchange import Exchanges, Reply
from ._first_read import Fetched
from ._request import (
    USER_AGENT,
    Want,
    authorization,
    check_headers,
    check_request,
    positive,
)
from ._tokens import withheld
from ._urls import HttpURL, parse_http_url, redact, scrub

__all__ = ["MIN_SPEED", "Fetched", "HTTPFetcher", "redact"]

MIN_SPEED = 100_000.0
"""The slowest transfer (bytes per second) a request's deadline allows by default."""

_CHUNK = 1 << 20
_MAX_RETRIES = 10
_SNIFF = 1024  # the first bytes of a file looked at to tell a web page


class HTTPFetcher(Exchanges):
    """Range requests to one URL; safe to share between threads.

    Args:
        url: ``http://`` or ``https://`` URL of the file.
        token: bearer token (default: ``user:password@`` of the URL as basic auth, then
            ``$TENSORFILE_TOKEN`` when ``$TENSORFILE_TOKEN_HOSTS`` names the URL's origin,
            then ``$HF_TOKEN`` when it is the Hugging Face Hub's: see :mod:`._tokens`);
            sent to the URL's origin (scheme, host and port) only, never printed.
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
        self._auth = self._authorization(token)
        self._headers, self._origin_headers = check_headers(self.name, headers or {})
        if not any(k.lower() == "user-agent" for k in self._headers):
            self._headers = {"User-Agent": USER_AGENT, **self._headers}
        self._allow_full = _prefix.allow_full_download(allow_full_download)
        self._prefix = _prefix.Prefix()  # what a server that ignores Range sent
        self._init_exchanges()
        self._whole = threading.Lock()  # one whole-file reply at a time (Range ignored)
        self._planned = 0  # the end of what the load being planned reads (will_read)
        self._wanted = 0  # the bytes it reads (a whole-file reply costs more: a warning)
        self._refused: tuple[int, str] | None = None  # a whole-file read refused: how far
        self._size: int | None = None
        self.version: str | None = None
        """The file's ``ETag`` from the first reply that has one (None before, or when the
        server sends none); a later reply with another ETag is an error: the file changed."""
        self._versioned = False
        self._version_at: tuple[tuple[str, str, int], str] | None = None  # whose ETag it is

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
                first, total = self._check_partial(reply, want)
                data = self._read_body(reply, want.expected(total), total)
                got = Fetched(first, data, total)
            else:
                got = self._not_partial(reply, want)
            ok = True
            return got
        finally:
            self._finish(reply, ok and reply.status != 200)  # see _trailing

    def fetch_into(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` (flat, writable byte views) from consecutive bytes at ``offset``,
        all inside the file: the body of a ``206`` is received straight into them, with no
        copy; a reply that breaks off mid-body is asked for again (``retries`` times). The
        reply of a server that ignores ``Range`` is read as :meth:`fetch` reads it."""
        n = sum(b.nbytes for b in buffers)
        want = check_request(RangeRequest(offset, offset + n))
        if len(self._prefix) and self._from_whole_file(offset, offset + n, buffers):
            return
        attempt = 0
        while True:
            kept = self._prefix.serve(want.request)
            if kept is not None:
                self._scatter(kept, offset, buffers)
                return
            reply = self._request(want)
            ok = False
            try:
                if reply.status != 206:
                    self._scatter(self._not_partial(reply, want), offset, buffers)
                    ok = True
                    return
                first, total = self._check_partial(reply, want)
                # fresh destination pages allocated in one call per buffer, while the body
                # is already arriving in the socket's buffer (measured: a 1 GiB load over
                # loopback HTTP ~20% faster than faulting them in one by one in the copy)
                prefault(buffers)
                try:
                    self._receive(reply, buffers)
                except _Broken as exc:
                    if attempt >= self._retries:
                        raise exc.error from None
                    time.sleep(self._backoff * (2**attempt))
                    attempt += 1
                    continue
                if first == 0:
                    self._check_page(reply, _head(buffers), total)
                ok = True
                return
            finally:
                self._finish(reply, ok and reply.status != 200)  # see _trailing

    def will_read(self, ranges: list[tuple[int, int]]) -> None:
        """The ``(start, stop)`` byte ranges a load is about to read (the read planner says
        so): from a server that ignores ``Range``, one reply is read as far as the last."""
        self._planned = max((stop for _start, stop in ranges), default=0)
        self._wanted = sum(stop - start for start, stop in ranges)

    def _from_whole_file(self, start: int, stop: int, buffers: list[memoryview]) -> bool:
        """The server ignores ``Range`` (its replies are the whole file): pieces of a load
        are served from one reply read as far as the load needs, one such reply at a time
        (not one per piece, each from the file's first byte); a read over the limit is
        refused once, without asking again. False: the server sent a range after all."""
        piece = RangeRequest(start, stop)
        with self._whole:
            kept = self._prefix.serve(piece)
            if kept is None:
                end = max(stop, self._planned)
                if self._refused is not None and end >= self._refused[0]:
                    raise SourceError(self._refused[1])
                try:
                    # the last byte the load needs: a whole-file reply is read (and kept)
                    # from the file's first byte to there
                    self.fetch(RangeRequest(end - 1, end))
                except SourceError as exc:
                    if end > _prefix.FULL_DOWNLOAD_LIMIT and not self._allow_full:
                        self._refused = (end, str(exc))  # the same read is refused again
                    raise
                kept = self._prefix.serve(piece)
        if kept is None:
            return False
        self._scatter(kept, start, buffers)
        return True

    def _scatter(self, got: Fetched, offset: int, buffers: list[memoryview]) -> None:
        """Copy bytes fetched (not received in place) into ``buffers``, when they are the
        bytes asked for."""
        n = sum(b.nbytes for b in buffers)
        if got.start != offset or len(got.data) != n:
            raise SourceError(
                f"{self.name}: asked for {n} bytes at {offset}, got {len(got.data)} bytes at "
                f"{got.start} of a {got.size}-byte file"
            )
        scatter(got.data, buffers)

    def _not_partial(self, reply: Reply, want: Want) -> Fetched:
        """The reply to a range request that is not a ``206``: the whole file, a ``416``,
        or an error."""
        if reply.status == 200:
            return self._whole_body(reply, want)
        if reply.status == 416:
            return self._unsatisfiable(reply, want)
        if reply.status == 412 and reply.if_match is not None:
            raise SourceError(
                f"{self.name}: the file changed while it was being read (HTTP 412: its ETag is "
                f"no longer {hdr.show(reply.if_match)})"
            )
        reason = hdr.show(scrub(reply.resp.reason, self.url))  # a server may echo
        gone = reply.status in (404, 410)  # a FileNotFoundError, as a missing file
        kind = SourceNotFoundError if gone else SourceError
        raise kind(f"{self.name}: HTTP {reply.status} {reason}{self._error_detail(reply)}")

    def _authorization(self, token: str | None) -> str | None:
        """The ``Authorization`` header of requests to the origin (see ``token``)."""
        return authorization(self._url, token)

    def _error_detail(self, reply: Reply) -> str:
        """What an error reply says beyond its status (an object store's error code): for a
        ``401`` or ``403`` to a request without credentials, why none was sent."""
        if reply.status in (401, 403) and self._auth is None:
            return withheld(self._url)
        return ""

    def _framing(self, reply: Reply) -> int | None:
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

    def _check_partial(self, reply: Reply, want: Want) -> tuple[int, int]:
        """A ``206``, checked against what was asked before its body is read: the first
        byte it holds and the file's size."""
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
        self._ranges_honoured = True
        return first, total

    def _whole_body(self, reply: Reply, want: Want) -> Fetched:
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
            got = Fetched(max(0, total - request.length), data[-request.length :], total)
        else:
            start = min(request.start, total)
            got = Fetched(start, data[start : min(request.stop, total)], total)
        asked = max(len(got.data), self._wanted)  # a load asks for its tensors at once
        _prefix.warn_download(self.name, self._url.origin, asked=asked, read=len(data))
        return got

    def _read_head(self, reply: Reply, kept: bytes, stop: int | None, length: int | None) -> bytes:
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

    def _trailing(self, reply: Reply, left: int) -> None:
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

    def _check_page(self, reply: Reply, head: bytes, total: int) -> None:
        """Refuse a web page where the file should start (a directory listing...)."""
        content_type = reply.header("Content-Type")
        if content_type is not None and _prefix.html_page(content_type, head):
            raise _prefix.not_a_tensor_file(self.name, content_type, head, total)

    def _unsatisfiable(self, reply: Reply, want: Want) -> Fetched:
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

    def _learn_version(self, reply: Reply) -> None:
        """Remember the first reply's ``ETag``; refuse a later reply whose ETag differs or is
        missing (the file was replaced between two reads of it, or the reply cannot show it
        was not: its bytes may be another version's, and a cache would keep them)."""
        tag = reply.header("ETag")
        tag = tag.strip(" \t") if tag is not None else None
        with self._lock:
            if not self._versioned:
                self._versioned = True
                self.version = tag or None
                self._version_at = _resource(reply.url)
                return
            known = self.version
        if known is not None and tag != known:
            then = f"then {hdr.show(tag)}" if tag else "then a reply without one"
            raise SourceError(
                f"{self.name}: the file changed while it was being read (ETag {hdr.show(known)}, "
                f"{then})"
            )

    def _conditions(self, url: HttpURL) -> dict[str, str]:
        """``If-Match`` with the file's strong ETag, once a reply gave one, on requests to
        the URL (scheme, host, port and path) whose reply gave it."""
        with self._lock:
            tag, at = self.version, self._version_at
        if tag is None or at != _resource(url) or not hdr.strong_etag(tag):
            return {}
        return {"If-Match": tag}

    def _learn_size(self, total: int) -> None:
        with self._lock:
            if self._size is not None and total != self._size:
                raise SourceError(
                    f"{self.name}: the file's size changed from {self._size} to {total} bytes"
                )
            self._size = total

    def _read_body(self, reply: Reply, span: tuple[int, int] | None, total: int) -> bytes:
        """Exactly the bytes of ``span`` (never more), or a :class:`SourceError`."""
        first, stop = span if span is not None else (0, 0)
        n = stop - first
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
        data = b"".join(chunks)
        if first == 0:
            self._check_page(reply, data, total)
        return data

    def _receive(self, reply: Reply, buffers: list[memoryview]) -> None:
        """The body, straight into ``buffers`` (exactly their size, checked against the
        ``Content-Range`` already); a transfer that breaks off is :class:`_Broken`."""
        n = sum(b.nbytes for b in buffers)
        got = 0
        try:
            for b in buffers:
                pos = 0
                while pos < b.nbytes:
                    k = reply.resp.readinto(b[pos:])
                    if not k:
                        raise _Broken(
                            SourceError(
                                f"{self.name}: short read: expected {n} bytes, got {got + pos}"
                            )
                        )
                    pos += k
                got += pos
        except DeadlineExceeded:
            raise self._late(reply.nbytes) from None
        except _FOREIGN as exc:
            error = SourceError(f"{self.name}: the transfer failed: {self._say(exc)}")
            raise _Broken(error) from None
        with self._lock:
            self.stats.bytes_read += got


class _Broken(Exception):
    """A body that broke off (short, or a connection error): worth asking again."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(str(error))
        self.error = error


def _resource(url: HttpURL) -> tuple[tuple[str, str, int], str]:
    """The resource ``url`` names: its origin and path (not the query, which a presigned URL
    changes at each signing)."""
    return url.origin, url.target.partition("?")[0]


def _head(buffers: list[memoryview]) -> bytes:
    """The first bytes of consecutive ``buffers`` (enough to tell a web page)."""
    out = b""
    for b in buffers:
        out += bytes(b[: _SNIFF - len(out)])
        if len(out) >= _SNIFF:
            break
    return out
