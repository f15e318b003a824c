"""Real HTTP servers on 127.0.0.1 for the tests and the benchmarks (no pytest needed here;
the fixtures that wrap them are in tests/remote/conftest.py and tests/sources/conftest.py).

* :func:`start_nginx`: nginx, which honours Range requests; installed from Debian's packages
  when missing. Its access log records each request's Range header, status and body bytes,
  so tests can assert how many requests a read cost and how much it transferred. Under
  ``/moved/``, ``/permanent/``, ``/p308/`` and ``/t307/`` it redirects (302, 301, 308, 307:
  :data:`REDIRECTS`) to the same path without the prefix.
* :func:`start_range_server`: a Python server that honours single byte ranges like nginx and
  writes the same access log (nginx's stand-in where it cannot be installed).
* :func:`start_plain_server`: Python's ``http.server``, which ignores Range and always sends
  the whole file; it counts the bytes it managed to send.

Each returns the :class:`Server` and a handle with ``terminate()`` and ``wait(timeout)``.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _which_nginx() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None


def _nginx_binary() -> str | None:
    """nginx, installed from Debian's packages when missing (None when that fails, or when
    ``TENSORFILE_TEST_NO_NGINX`` is set, to exercise the stand-in)."""
    if os.environ.get("TENSORFILE_TEST_NO_NGINX"):
        return None
    found = _which_nginx()
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "install", "-y", "-q", "nginx-light"],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "nginx-light"],
    ):
        try:
            subprocess.run(command, check=False, env=env, timeout=600,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        found = _which_nginx()
        if found:
            return found
    return None


@dataclass
class Logged:
    method: str
    uri: str
    range: str
    status: int
    body_bytes: int


@dataclass
class Server:
    url: str
    root: Path
    log: Path | None = None
    sent: list[int] | None = None
    accepted: list[int] | None = None
    """The client ports of the TCP connections the Python range server accepted, in order."""

    def requests(self) -> list[Logged]:
        """Requests since the last ``reset()`` (nginx only)."""
        assert self.log is not None
        time.sleep(0.05)  # nginx writes its log line right after the response
        out = []
        for line in self.log.read_text().splitlines():
            method, uri, rng, status, body = line.split("\t")
            out.append(Logged(method, uri, rng, int(status), int(body)))
        return out

    def reset(self) -> None:
        if self.log is not None:
            time.sleep(0.05)  # let the server log the last request before forgetting it
            self.log.write_text("")
        if self.sent is not None:
            self.sent.clear()


class _Stopper:
    """Stops a Python server the way ``terminate()``/``wait()`` stop nginx's process."""

    def __init__(self, httpd: http.server.ThreadingHTTPServer) -> None:
        self._httpd = httpd

    def terminate(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def wait(self, timeout: float | None = None) -> None:
        pass


NGINX_CONF = """
worker_processes 1;
daemon off;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 64; }}
http {{
    log_format tf '$request_method\\t$uri\\t$http_range\\t$status\\t$body_bytes_sent';
    access_log {tmp}/access.log tf;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    types {{ }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location /moved/ {{ rewrite ^/moved/(.*)$ /$1 redirect; }}
        location /permanent/ {{ rewrite ^/permanent/(.*)$ /$1 permanent; }}
        location ~ ^/p308/(.*)$ {{ return 308 /$1; }}
        location ~ ^/t307/(.*)$ {{ return 307 /$1; }}
    }}
}}
"""


def start_nginx(tmp: Path) -> tuple[Server, Any]:
    """Start nginx serving ``tmp/www`` on a free port (also used by the benchmark runner).

    Where nginx cannot be installed, a Range-honouring Python server with the same access
    log stands in (and says so on stderr)."""
    root = tmp / "www"
    root.mkdir(exist_ok=True)
    log = tmp / "access.log"
    log.write_text("")
    binary = _nginx_binary()
    if binary is None:
        print("nginx unavailable: using the Python range server", file=sys.stderr)
        return start_range_server(root, log)
    port = _free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, root=root))
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(tmp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"nginx did not start: {err}") from None
            time.sleep(0.05)
    return Server(f"http://127.0.0.1:{port}", root, log=log), proc


REDIRECTS = {"/moved/": 302, "/permanent/": 301, "/p308/": 308, "/t307/": 307}
"""Paths under which both servers redirect to the same path without the prefix, by status."""


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves single byte ranges (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``) like nginx, and
    logs each request in the nginx fixture's format. With ``etag`` set it also sends an
    ``ETag`` (the file's size and mtime, as nginx makes it), so clients can cache."""

    log_path: Path
    etag = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _log(self, status: int, body: int) -> None:
        rng = self.headers.get("Range") or "-"
        with open(self.log_path, "a") as f:
            f.write(f"{self.command}\t{self.path}\t{rng}\t{status}\t{body}\n")

    def do_GET(self) -> None:
        for prefix, status in REDIRECTS.items():
            if self.path.startswith(prefix):
                self.send_response(status)
                self.send_header("Location", self.path[len(prefix) - 1 :])
                self.send_header("Content-Length", "0")
                self.end_headers()
                self._log(status, 0)
                return
        path = self.translate_path(self.path.split("?")[0])
        if not os.path.isfile(path):
            self.send_error(404)
            self._log(404, 0)
            return
        size = os.path.getsize(path)
        start, stop, status = 0, size, 200
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range") or "")
        if m is not None and (m.group(1) or m.group(2)):
            if m.group(1):
                start = int(m.group(1))
                stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:
                start = max(0, size - int(m.group(2)))
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                self._log(416, 0)
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(stop - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        if self.etag:
            self.send_header("ETag", f'"{os.stat(path).st_mtime_ns:x}-{size:x}"')
        self.end_headers()
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(stop - start)
        self._log(status, len(body))  # before the reply: the client never sees it unlogged
        try:
            self.wfile.write(body)
        except OSError:
            pass


class _CountingServer(http.server.ThreadingHTTPServer):
    """Records the client port of every TCP connection it accepts (``accepted``)."""

    accepted: list[int]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        self.accepted.append(address[1])
        return sock, address


def start_range_server(root: Path, log: Path, etag: bool = False) -> tuple[Server, _Stopper]:
    """Serve ``root`` with Range support on a free port, logging to ``log`` as nginx does
    (with an ``ETag`` on each reply if ``etag``); ``Server.accepted`` counts the connections
    it accepts."""

    class Handler(_RangeHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

    Handler.log_path = log
    Handler.etag = etag
    Handler.protocol_version = "HTTP/1.1"
    httpd = _CountingServer(("127.0.0.1", 0), Handler)
    httpd.accepted = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = Server(f"http://127.0.0.1:{httpd.server_address[1]}", root, log=log)
    server.accepted = httpd.accepted
    return server, _Stopper(httpd)


class _NoRangeHandler(http.server.SimpleHTTPRequestHandler):
    """http.server ignores Range: it always answers 200 with the whole file."""

    sent: list[int]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def copyfile(self, source: Any, outputfile: Any) -> None:
        total = 0
        try:
            while True:
                chunk = source.read(64 * 1024)
                if not chunk:
                    break
                outputfile.write(chunk)
                total += len(chunk)
        except OSError:
            pass  # the client closed the connection
        finally:
            self.sent.append(total)


def start_plain_server(root: Path) -> tuple[Server, _Stopper]:
    """Serve ``root`` with Python's ``http.server`` (Range ignored) on a free port; the
    server's ``sent`` list records the bytes sent per reply."""
    sent: list[int] = []

    class Handler(_NoRangeHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

    Handler.sent = sent
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    server = Server(f"http://127.0.0.1:{httpd.server_address[1]}", root, sent=sent)
    return server, _Stopper(httpd)
