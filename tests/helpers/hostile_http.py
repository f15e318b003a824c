"""HTTP servers on 127.0.0.1 that misbehave on purpose, and an HTTP proxy, for the tests of
the HTTP stack's defences (no pytest needed here).

* :class:`HostileServer`: a raw TCP server (TLS with ``tls=``); each request's head is
  parsed and handed to a ``respond(request, conn)`` function the test writes, which sends
  whatever bytes it likes (lying headers, a dripping body, nothing at all) and returns True
  to keep the connection for another request. Every request is recorded (method, target,
  headers).
* :func:`reply`: the bytes of a response with the given status, headers and body.
* :func:`serve_bytes`: a ``respond`` function that honours single ranges of some bytes (an
  honest server, to combine with hostile ones).
* :class:`ForwardProxy`: a threaded forwarding proxy: absolute-form ``GET`` requests are
  relayed to the target (127.0.0.1 only), ``CONNECT 127.0.0.1:port`` opens a tunnel; it
  records every request line, ``Proxy-Authorization`` and ``User-Agent`` header, and can
  demand credentials (407).
* :func:`self_signed`: a certificate and key for 127.0.0.1 made with the ``openssl``
  command, and :func:`start_https_range_server`, the Range-honouring server of
  :mod:`.servers` behind TLS with it.

Written from HTTP/1.1 (RFC 9110/9112), not from tensorfile's code.
"""

from __future__ import annotations

import http.server
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .servers import Server, _Stopper, start_range_server


@dataclass
class Request:
    """A request as the server received it (header names lower-cased)."""

    method: str
    target: str
    headers: dict[str, str]


Respond = Callable[[Request, socket.socket], bool]


def reply(status: int, headers: dict[str, str] | list[tuple[str, str]], body: bytes = b"") -> bytes:
    """A whole response: status line, headers (in order, duplicates allowed), body."""
    items = headers.items() if isinstance(headers, dict) else headers
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in items) + "\r\n"
    return head.encode("utf-8") + body


def _read_head(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
        if len(data) > 1 << 20:
            return None
    return data


def _parse(head: bytes) -> Request:
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, target, headers)


class HostileServer:
    """A server on 127.0.0.1 answering every request with ``respond``; use as a context
    manager, or call :meth:`close`."""

    def __init__(self, respond: Respond, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self._tls = tls
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (dripping handlers stop then)."""
        return self._closed.is_set()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._tls is not None:
                try:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                except OSError:
                    conn.close()
                    continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                head = _read_head(conn)
                if head is None:
                    return
                request = _parse(head)
                with self._lock:
                    self.requests.append(request)
                if not self.respond(request, conn):
                    return
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        self._sock.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_range(spec: str | None, size: int) -> tuple[int, int] | None:
    """``[start, stop)`` of a single ``bytes=`` range of a ``size``-byte file, or None."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", spec or "")
    if m is None or not (m.group(1) or m.group(2)):
        return None
    if m.group(1):
        start = int(m.group(1))
        stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
        return start, stop
    return max(0, size - int(m.group(2))), size


def serve_bytes(data: bytes, *, keep_alive: bool = True, etag: str | None = None) -> Respond:
    """An honest ``respond``: single ranges of ``data`` (206), 416 past the end, 200 without
    a Range header; ``etag`` is the ``ETag`` of its 200 and 206 replies."""
    tagged = {} if etag is None else {"ETag": etag}

    def respond(request: Request, conn: socket.socket) -> bool:
        rng = parse_range(request.headers.get("range"), len(data))
        if rng is None:
            conn.sendall(reply(200, {"Content-Length": str(len(data)), **tagged}, data))
        elif rng[0] >= len(data):
            conn.sendall(
                reply(416, {"Content-Range": f"bytes */{len(data)}", "Content-Length": "0"})
            )
        else:
            start, stop = rng
            headers = {
                "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
                "Content-Length": str(stop - start),
                **tagged,
            }
            conn.sendall(reply(206, headers, data[start:stop]))
        return keep_alive

    return respond


def stream_zeros(conn: socket.socket, total: int, server: HostileServer | None = None) -> int:
    """Send up to ``total`` zero bytes until the client stops reading; returns how many were
    sent (into the kernel's buffers included)."""
    block = bytes(1 << 16)
    sent = 0
    try:
        while sent < total and not (server is not None and server.closed):
            n = min(len(block), total - sent)
            conn.sendall(block[:n])
            sent += n
    except OSError:
        pass
    return sent


def drip(conn: socket.socket, data: bytes, interval: float, server: HostileServer) -> None:
    """Send ``data`` one byte every ``interval`` seconds (until the client goes away or the
    server closes)."""
    try:
        for i in range(len(data)):
            if server.closed:
                return
            conn.sendall(data[i : i + 1])
            time.sleep(interval)
    except OSError:
        pass


# -- a forwarding proxy ------------------------------------------------------------------------


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass
class ForwardProxy:
    """A forwarding proxy on 127.0.0.1 (see the module's docstring)."""

    require: str | None = None  # the Proxy-Authorization value demanded, if any
    lines: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    agents: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = HostileServer(self._respond)
        self.port = self._server.port
        self.url = f"http://127.0.0.1:{self.port}"

    def _respond(self, request: Request, conn: socket.socket) -> bool:
        given = request.headers.get("proxy-authorization")
        with self._lock:
            self.lines.append(f"{request.method} {request.target}")
            self.auth.append(given)
            self.agents.append(request.headers.get("user-agent"))
        if self.require is not None and given != self.require:
            conn.sendall(reply(407, {"Proxy-Authenticate": "Basic", "Content-Length": "0"}))
            return False
        if request.method == "CONNECT":
            host, _, port = request.target.rpartition(":")
            if host != "127.0.0.1":
                conn.sendall(reply(403, {"Content-Length": "0"}))
                return False
            upstream = socket.create_connection((host, int(port)), timeout=10)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            threading.Thread(target=_pipe, args=(upstream, conn), daemon=True).start()
            _pipe(conn, upstream)
            return False
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/.*)", request.target)
        if m is None:
            conn.sendall(reply(400, {"Content-Length": "0"}))
            return False
        skip = {"proxy-authorization", "proxy-connection", "connection"}
        head = f"{request.method} {m.group(2)} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k not in skip)
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=10) as upstream:
            upstream.sendall((head + "Connection: close\r\n\r\n").encode("latin-1"))
            answer = _read_head(upstream)
            if answer is None:
                conn.sendall(reply(502, {"Content-Length": "0"}))
                return False
            length = re.search(rb"\r\ncontent-length: *(\d+)", answer, re.IGNORECASE)
            if length is None:  # relay until the origin closes, then close too
                conn.sendall(answer)
                _pipe(upstream, conn)
                return False
            end = answer.index(b"\r\n\r\n") + 4
            body, need = answer[end:], int(length.group(1))
            while len(body) < need:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                body += chunk
            conn.sendall(answer[:end] + body[:need])
        return True  # keep the client's connection, as proxies do

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self.lines)

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> ForwardProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- TLS ---------------------------------------------------------------------------------------


def self_signed(folder: Path) -> tuple[Path, Path] | None:
    """A certificate (also its own CA) and key for ``127.0.0.1``, or None without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def start_https_range_server(root: Path, log: Path, cert: Path, key: Path) -> tuple[Server, Any]:
    """The Range-honouring server of :mod:`.servers`, serving ``root`` over TLS."""
    server, stopper = start_range_server(root, log)
    httpd: http.server.ThreadingHTTPServer = stopper._httpd
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server.url = server.url.replace("http://", "https://")
    return server, _Stopper(httpd)
