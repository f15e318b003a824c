"""Connections for the HTTP transport: small receive buffers, a deadline on every socket
operation, an optional proxy, and a pool that gives each request a connection of its own.

* A socket to a server not yet known to honour ``Range`` is created with a small receive
  buffer (:data:`RECV_BUFFER`) before it connects, so a server that ignores ``Range`` cannot
  push much ahead of what is read; once the server has answered a range request with
  ``206`` (``big_buffers``), sockets keep the kernel's self-tuning buffers: the small one
  caps a stream's throughput (measured on loopback: 0.7-0.8 GB/s against 1.0-1.3 GB/s).
* A :class:`Clock` belongs to each connection: ``timeout`` bounds each socket operation and
  ``deadline`` (a :func:`time.monotonic` instant, set per request) bounds them all. Before
  each receive or send the socket's timeout is set to what is left, so neither a silent
  server nor one dripping a byte at a time holds a request past its deadline: while
  connecting, through a proxy's ``CONNECT``, the TLS handshake, the headers and the body.
* :class:`Pool` hands out idle connections under a lock and takes them back when their reply
  was read to the end, so threads sharing a reader never share a connection. There is one
  for the process, :data:`POOL`, keyed by origin (scheme, host, port), proxy and TLS
  settings (:func:`pool_key`): every file, shard and thread that goes to an origin shares
  its connections, so the shards of a checkpoint, the files of a dataset and the objects of
  an S3 bucket reuse them. At most :data:`MAX_IDLE` connections per key wait idle, none
  longer than :data:`IDLE_SECONDS`; a forked child drops the parent's (it must never write
  to the parent's sockets) and makes its own.

Example:
    >>> clock = Clock(5.0)
    >>> clock.left() == 5.0
    True
    >>> clock.deadline = time.monotonic() - 1
    >>> clock.left()
    Traceback (most recent call last):
    ...
    tensorfile.sources.http._conn.DeadlineExceeded: the request's deadline passed
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ._proxy import Proxy
from ._request import USER_AGENT
from ._urls import HttpURL

__all__ = [
    "IDLE_SECONDS",
    "MAX_IDLE",
    "POOL",
    "RECV_BUFFER",
    "Clock",
    "DeadlineExceeded",
    "Pool",
    "new_connection",
    "pool_key",
    "shared_context",
    "ssl_context",
]

RECV_BUFFER = 256 << 10  # the socket buffer: the most a range-ignoring server can push ahead
MAX_IDLE = 64
"""Idle connections kept per origin (more than a load's ``io_threads``, whose limit is 64)."""
IDLE_SECONDS = 30.0
"""A connection idle longer is closed rather than reused (servers close idle keep-alive
connections after 5 to 75 s; one closed under a request is replayed once on a new one)."""


class DeadlineExceeded(TimeoutError):
    """A request ran past its deadline."""


class Clock:
    """The time limits of one connection: ``timeout`` per socket operation, ``deadline`` for
    the request in progress (None: no deadline)."""

    __slots__ = ("deadline", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline: float | None = None

    def left(self) -> float:
        """Seconds the next socket operation may take; raises :class:`DeadlineExceeded` when
        the deadline has passed."""
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded("the request's deadline passed")
        return min(self.timeout, left)

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline


class _Armed:
    """Receives and sends with the clock's time left; a timeout at the deadline is a
    :class:`DeadlineExceeded`."""

    clock: Clock | None = None

    def _call(self, op: Callable[..., Any], *args: Any) -> Any:
        clock = self.clock
        if clock is None:
            return op(*args)
        self.settimeout(clock.left())  # type: ignore[attr-defined]
        try:
            return op(*args)
        except TimeoutError:
            if clock.expired():
                raise DeadlineExceeded("the request's deadline passed") from None
            raise


class _Socket(_Armed, socket.socket):
    """A socket whose timeout is set from its clock before each receive and send."""

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        n: int = self._call(super().recv_into, buffer, nbytes, flags)
        return n

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data: bytes = self._call(super().recv, bufsize, flags)
        return data

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._call(super().sendall, data, flags)


class _SSLSocket(_Armed, ssl.SSLSocket):
    """The TLS socket, with the same clock."""

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        n: int = self._call(super().recv_into, buffer, nbytes, flags)
        return n

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        data: bytes = self._call(super().recv, buflen, flags)
        return data

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._call(super().sendall, data, flags)


def ssl_context() -> ssl.SSLContext:
    """The default verifying context (system CAs, ``$SSL_CERT_FILE``), with sockets that
    keep the deadline."""
    context = ssl.create_default_context()
    context.sslsocket_class = _SSLSocket
    return context


def _open_socket(host: str, port: int, clock: Clock, small: bool) -> socket.socket:
    """A connected socket; ``small``: its receive buffer is set before connecting, so the TCP
    window (what a server can push before we read) stays small."""
    error: OSError | None = None
    for family, kind, proto, _name, address in socket.getaddrinfo(
        host, port, 0, socket.SOCK_STREAM
    ):
        sock = _Socket(family, kind, proto)
        try:
            if small:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            sock.settimeout(clock.left())
            sock.connect(address)
            sock.clock = clock
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"cannot resolve {host}")


class _HTTPConnection(http.client.HTTPConnection):
    _create_connection: Callable[..., socket.socket]

    def __init__(self, host: str, port: int, clock: Clock, small: bool) -> None:
        super().__init__(host, port, timeout=clock.timeout)
        self.clock = clock

        def create(address: tuple[str, int], *_args: Any) -> socket.socket:
            return _open_socket(address[0], address[1], clock, small)

        self._create_connection = create


class _HTTPSConnection(http.client.HTTPSConnection):
    _create_connection: Callable[..., socket.socket]

    def __init__(
        self, host: str, port: int, clock: Clock, small: bool, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, timeout=clock.timeout, context=context)
        self.clock = clock

        def create(address: tuple[str, int], *_args: Any) -> socket.socket:
            return _open_socket(address[0], address[1], clock, small)

        self._create_connection = create

    def connect(self) -> None:
        super().connect()  # TCP (through the proxy's tunnel), then the TLS handshake
        if isinstance(self.sock, _SSLSocket):
            self.sock.clock = self.clock


Connection = http.client.HTTPConnection


def new_connection(
    url: HttpURL,
    proxy: Proxy | None,
    timeout: float,
    context: ssl.SSLContext | None,
    big_buffers: bool = False,
) -> Connection:
    """An unconnected connection for ``url``: straight to its host, to the proxy (plain
    HTTP, absolute-form requests), or through the proxy's ``CONNECT`` tunnel (HTTPS, which
    needs ``context``). Its :class:`Clock` is ``conn.clock``; its socket gets the small
    receive buffer unless ``big_buffers``."""
    clock = Clock(timeout)
    small = not big_buffers
    conn: Connection
    if url.scheme == "https":
        if context is None:
            raise ValueError("an https connection needs an SSL context")
        if proxy is None:
            conn = _HTTPSConnection(url.host, url.port, clock, small, context)
        else:
            conn = _HTTPSConnection(proxy.host, proxy.port, clock, small, context)
            tunnel = {"User-Agent": USER_AGENT}
            if proxy.authorization:
                tunnel["Proxy-Authorization"] = proxy.authorization
            conn.set_tunnel(url.host, url.port, headers=tunnel)
    elif proxy is None:
        conn = _HTTPConnection(url.host, url.port, clock, small)
    else:
        conn = _HTTPConnection(proxy.host, proxy.port, clock, small)
    return conn


def clock_of(conn: Connection) -> Clock:
    """The clock of a connection made by :func:`new_connection`."""
    clock: Clock = conn.clock  # type: ignore[attr-defined]
    return clock


def tls_settings() -> tuple[str | None, str | None]:
    """What the default context trusts besides the system's CAs: ``$SSL_CERT_FILE`` and
    ``$SSL_CERT_DIR`` (read by :func:`ssl.create_default_context`)."""
    return os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")


_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def shared_context(tls: tuple[str | None, str | None]) -> ssl.SSLContext:
    """The one verifying context for the TLS settings ``tls`` (:func:`tls_settings`), made
    on first use."""
    with _contexts_lock:
        context = _contexts.get(tls)
        if context is None:
            context = _contexts[tls] = ssl_context()
        return context


def pool_key(url: HttpURL, proxy: Proxy | None) -> Hashable:
    """Which connections a request to ``url`` through ``proxy`` may use: those to the same
    origin (scheme, host, port), through the same proxy (and its credentials), verified with
    the same TLS settings.

    Example:
        >>> from ._urls import parse_http_url
        >>> a = pool_key(parse_http_url("http://h:8080/a.bin"), None)
        >>> a == pool_key(parse_http_url("http://h:8080/b/c.bin"), None)
        True
        >>> a == pool_key(parse_http_url("http://h:8081/a.bin"), None)
        False
    """
    tls = tls_settings() if url.scheme == "https" else None
    return (url.origin, proxy.key if proxy is not None else None, tls)


class Pool:
    """Idle connections by key, at most ``max_idle`` per key and none idle longer than
    ``idle_seconds``; safe to share between threads. A connection is either checked out
    (used by one request) or idle here.

    Example:
        >>> pool = Pool(max_idle=1)
        >>> pool.take("origin") is None
        True
    """

    def __init__(self, max_idle: int = MAX_IDLE, idle_seconds: float = IDLE_SECONDS) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Hashable, list[tuple[float, Connection]]] = {}
        self._max_idle = max_idle
        self._idle_seconds = idle_seconds

    def take(self, key: Hashable) -> Connection | None:
        """The most recently used idle connection for ``key`` (closing those idle too long),
        or None."""
        stale: list[Connection] = []
        found: Connection | None = None
        oldest = time.monotonic() - self._idle_seconds
        with self._lock:
            idle = self._idle.get(key)
            while idle:  # newest last: once one is stale, so are those before it
                since, conn = idle.pop()
                if since >= oldest:
                    found = conn
                    break
                stale.append(conn)
        for conn in stale:
            discard(conn)
        return found

    def give(self, key: Hashable, conn: Connection) -> None:
        """Take back a connection whose last reply was read to the end (closed if the pool
        is full)."""
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                clock_of(conn).deadline = None
                idle.append((time.monotonic(), conn))
                return
        discard(conn)

    def idle(self, key: Hashable) -> int:
        """How many connections for ``key`` wait idle."""
        with self._lock:
            return len(self._idle.get(key, ()))

    def forget(self) -> None:
        """In a forked child: drop the parent's connections (closing only the child's copies
        of their descriptors, which leaves the parent's sockets as they are) without the lock,
        which a thread of the parent may have held at the fork."""
        idle, self._idle = self._idle, {}
        self._lock = threading.Lock()
        for conns in idle.values():
            for _, conn in conns:
                discard(conn)


POOL = Pool()
"""The process's connections: every HTTP and S3 source takes and gives back here."""
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.forget)


def discard(conn: Connection) -> None:
    """Close a connection, ignoring errors."""
    try:
        conn.close()
    except OSError:
        pass
