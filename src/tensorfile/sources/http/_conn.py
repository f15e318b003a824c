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
  was read to the end, so threads sharing a reader never share a connection.

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
import socket
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ._proxy import Proxy
from ._request import USER_AGENT
from ._urls import HttpURL

__all__ = ["RECV_BUFFER", "Clock", "DeadlineExceeded", "Pool", "new_connection", "ssl_context"]

RECV_BUFFER = 256 << 10  # the socket buffer: the most a range-ignoring server can push ahead


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


class Pool:
    """Idle connections by key, at most ``max_idle`` per key; safe to share between
    threads. A connection is either checked out (used by one request) or idle here."""

    def __init__(self, max_idle: int = 8) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Hashable, list[Connection]] = {}
        self._max_idle = max_idle
        self._closed = False

    def take(self, key: Hashable) -> Connection | None:
        """An idle connection for ``key``, or None."""
        with self._lock:
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def give(self, key: Hashable, conn: Connection) -> None:
        """Take back a connection whose last reply was read to the end (closed if the pool
        is closed or full)."""
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self._closed and len(idle) < self._max_idle:
                clock_of(conn).deadline = None
                idle.append(conn)
                return
        discard(conn)

    def close(self) -> None:
        """Close every idle connection; connections given back later are closed."""
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            discard(conn)


def discard(conn: Connection) -> None:
    """Close a connection, ignoring errors."""
    try:
        conn.close()
    except OSError:
        pass
