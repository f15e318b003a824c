"""Servers that lie, drip, stall or flood (tests.helpers.hostile): every reply is checked
before its body is read, every failure is a SourceError, in bounded time and memory."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tensorfile.core.source import RangeRequest, SuffixRequest
from tensorfile.errors import SourceError
from tensorfile.safetensors.numpy import save
from tensorfile.sources import HTTPSource
from tensorfile.sources.http.remote import SPECULATIVE_BYTES
from tests.helpers.hostile_http import (
    HostileServer,
    Request,
    drip,
    reply,
    serve_bytes,
    stream_zeros,
)

GIB = 1 << 30
FIRST = f"bytes=0-{SPECULATIVE_BYTES - 1}"
MB = bytes(range(256)) * 4096  # 1 MiB of known bytes


def _send(*parts: bytes, keep: bool = False) -> Callable[[Request, socket.socket], bool]:
    def respond(request: Request, conn: socket.socket) -> bool:
        for p in parts:
            conn.sendall(p)
        return keep

    return respond


def _open(server: HostileServer, **options: Any) -> HTTPSource:
    return HTTPSource(f"{server.url}/m.bin", **({"retries": 0, "timeout": 5} | options))


# -- the first (speculative) reply, checked before its body ----------------------------------

LIES: dict[str, tuple[bytes, str]] = {
    "206-claims-the-whole-file": (
        reply(206, {"Content-Range": f"bytes 0-{GIB - 1}/{GIB}", "Content-Length": str(GIB)}),
        "Content-Range disagrees",
    ),
    "206-length-disagrees": (
        reply(206, {"Content-Range": f"bytes 0-99999/{GIB}", "Content-Length": str(GIB)}),
        "Content-Length 1073741824 disagrees",
    ),
    "206-wrong-start": (
        reply(206, {"Content-Range": "bytes 1-100000/1000000", "Content-Length": "100000"}),
        "Content-Range disagrees",
    ),
    "206-start-after-end": (
        reply(206, {"Content-Range": "bytes 500-100/1000000", "Content-Length": "0"}),
        "not a range of a 1000000-byte file",
    ),
    "206-total-before-end": (
        reply(206, {"Content-Range": "bytes 0-99999/5000", "Content-Length": "100000"}),
        "not a range of a 5000-byte file",
    ),
    "206-negative": (
        reply(206, {"Content-Range": "bytes -5-99999/1000000"}),
        "malformed Content-Range",
    ),
    "206-superscript-digit": (
        reply(206, {"Content-Range": "bytes 0-99999/1²"}),
        "malformed Content-Range",
    ),
    "206-5000-digit-total": (
        reply(206, {"Content-Range": "bytes 0-99999/" + "9" * 5000}),
        "malformed Content-Range",
    ),
    "206-two-content-ranges": (
        reply(206, [("Content-Range", "bytes 0-99999/1000000")] * 2),
        "malformed Content-Range",
    ),
    "206-unknown-size": (
        reply(206, {"Content-Range": "bytes 0-99999/*", "Content-Length": "100000"}),
        "does not tell the file's size",
    ),
    "206-no-content-range": (reply(206, {"Content-Length": "100000"}), "malformed Content-Range"),
    "206-gzip": (
        reply(206, {"Content-Range": "bytes 0-99999/1000000", "Content-Encoding": "gzip"}),
        "compressed",
    ),
    "206-transfer-encoding-gzip": (
        reply(206, {"Content-Range": "bytes 0-99999/1000000", "Transfer-Encoding": "gzip"}),
        "unsupported Transfer-Encoding",
    ),
    "206-chunked-and-length": (
        reply(
            206,
            {
                "Content-Range": "bytes 0-99999/1000000",
                "Transfer-Encoding": "chunked",
                "Content-Length": "100000",
            },
        ),
        "both Content-Length and chunks",
    ),
    "206-short-body": (
        reply(206, {"Content-Range": "bytes 0-99999/1000000", "Content-Length": "100000"}, b"x"),
        "short read",
    ),
    "206-chunked-short": (
        reply(
            206,
            {"Content-Range": "bytes 0-99999/1000000", "Transfer-Encoding": "chunked"},
            b"5\r\nhello\r\n0\r\n\r\n",
        ),
        "short read",
    ),
    "206-chunked-bad-size": (
        reply(
            206,
            {"Content-Range": "bytes 0-99999/1000000", "Transfer-Encoding": "chunked"},
            b"zz\r\nhello\r\n",
        ),
        "transfer failed",
    ),
    "200-superscript-length": (reply(200, {"Content-Length": "²"}), "malformed Content-Length"),
    "200-5000-digit-length": (
        reply(200, {"Content-Length": "9" * 5000}),
        "malformed Content-Length",
    ),
    "200-negative-length": (reply(200, {"Content-Length": "-1"}), "malformed Content-Length"),
    # a 200 without Content-Length is read to its end, up to the limit (test_range_ignored)
    "200-shorter-than-its-length": (
        reply(200, {"Content-Length": "1000"}, b"x" * 10),
        "ended after 10 bytes of the 1,000 needed",
    ),
    "200-gzip": (
        reply(200, {"Content-Length": "10", "Content-Encoding": "gzip"}, bytes(10)),
        "compressed",
    ),
    "416-for-a-range-inside-the-file": (
        reply(416, {"Content-Range": "bytes */5000", "Content-Length": "0"}),
        "HTTP 416",
    ),
    "204": (reply(204, {}), "HTTP 204"),
    "superscript-status": (b"HTTP/1.1 \xc2\xb200 OK\r\n\r\n", "BadStatusLine"),
    "not-http": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "BadStatusLine"),
    "closes-at-once": (b"", "RemoteDisconnected"),
    "too-many-headers": (
        b"HTTP/1.1 206 X\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        "got more than 100 headers",
    ),
    "header-line-over-64k": (
        b"HTTP/1.1 206 X\r\nX-A: " + b"a" * 70000 + b"\r\n\r\n",
        "LineTooLong",
    ),
}


@pytest.mark.parametrize("name", list(LIES))
def test_a_lying_first_reply_is_a_source_error(name: str) -> None:
    response, message = LIES[name]
    with HostileServer(_send(response)) as server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match=message) as info:
            _open(server)
        assert time.monotonic() - t0 < 10
        assert server.requests[0].headers["range"] == FIRST
        assert server.url.split("//")[1] in str(info.value)  # says where


def test_a_206_claiming_a_huge_range_is_not_read(tmp_path: object) -> None:
    """The server claims and streams the whole 1 GiB for bytes=0-99999: the client refuses it
    after the headers; its memory (VmHWM of a fresh process) does not grow."""
    sent: list[int] = []

    def respond(request: Request, conn: socket.socket) -> bool:
        head = {"Content-Range": f"bytes 0-{GIB - 1}/{GIB}", "Content-Length": str(GIB)}
        if request.headers.get("x-case") == "length":
            head = {"Content-Range": f"bytes 0-99999/{GIB}", "Content-Length": str(GIB)}
        conn.sendall(reply(206, head))
        sent.append(stream_zeros(conn, GIB, server))
        return False

    script = textwrap.dedent(
        """
        import sys
        from tensorfile.errors import SourceError
        from tensorfile.sources import HTTPSource

        def hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

        before = hwm()
        for case in ("range", "length"):
            try:
                HTTPSource(sys.argv[1], retries=0, headers={"X-Case": case})
            except SourceError as exc:
                print("refused:", exc, file=sys.stderr)
            else:
                sys.exit("accepted")
        print(hwm() - before)
        """
    )
    with HostileServer(respond) as server:
        out = subprocess.run([sys.executable, "-c", script, f"{server.url}/huge.bin"],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("refused:") == 2, out.stderr
    grew = int(out.stdout)
    assert grew < 32 << 20, grew
    assert all(s < 64 << 20 for s in sent), sent  # the kernel's buffers, not the file


# -- suffix requests (bytes=-N) ---------------------------------------------------------------


def test_suffix_reply_must_be_the_last_bytes() -> None:
    wrong = reply(206, {"Content-Range": "bytes 0-99/1000000", "Content-Length": "100"}, bytes(100))
    with HostileServer(_send(wrong)) as server:
        with pytest.raises(SourceError, match="asked for bytes=-100, the server sent bytes 0-99"):
            _open(server, first=SuffixRequest(100))
    fewer = reply(206, {"Content-Range": "bytes 999950-999999/1000000", "Content-Length": "50"})
    with HostileServer(_send(fewer + bytes(50))) as server:
        with pytest.raises(SourceError, match="Content-Range disagrees"):
            _open(server, first=SuffixRequest(100))


@pytest.mark.parametrize("size", [50, 100, 5000])
def test_suffix_reply_of_an_honest_server_is_min_n_size(size: int) -> None:
    data = MB[:size]
    with HostileServer(serve_bytes(data)) as server:
        src = _open(server, first=SuffixRequest(100))
        assert src.size == size
        assert src.read(0, size) == data
        assert server.requests[0].headers["range"] == "bytes=-100"


def test_chunked_206_of_the_right_length_is_read() -> None:
    body = MB[:SPECULATIVE_BYTES]
    chunked = b"".join(
        f"{len(body[i : i + 30000]):x}\r\n".encode() + body[i : i + 30000] + b"\r\n"
        for i in range(0, len(body), 30000)
    )
    head = {"Content-Range": f"bytes 0-{SPECULATIVE_BYTES - 1}/{len(MB)}",
            "Transfer-Encoding": "chunked"}  # fmt: skip
    with HostileServer(_send(reply(206, head, chunked + b"0\r\n\r\n"))) as server:
        src = _open(server)
        assert src.size == len(MB) and src.read(0, 1000) == MB[:1000]


# -- later replies ----------------------------------------------------------------------------


def test_a_later_whole_file_reply_larger_than_the_file_is_refused() -> None:
    size = 1_000_000

    def respond(request: Request, conn: socket.socket) -> bool:
        if request.headers["range"].startswith("bytes=-"):
            return serve_bytes(MB[:size])(request, conn)
        conn.sendall(reply(200, {"Content-Length": str(2 * size)}))
        stream_zeros(conn, 2 * size)
        return False

    with HostileServer(respond) as server:
        src = _open(server, first=SuffixRequest(1000))
        with pytest.raises(SourceError, match="whole file as 2000000 bytes; it had 1000000"):
            src.read(0, 10)  # the head: bytes=0-63


def test_a_later_reply_with_another_size_or_cut_short_is_refused() -> None:
    size = len(MB)

    def respond(request: Request, conn: socket.socket) -> bool:
        rng = request.headers["range"]
        if rng == FIRST:
            return serve_bytes(MB)(request, conn)
        if rng == "bytes=500000-500009":
            conn.sendall(reply(206, {"Content-Range": f"bytes 500000-500009/{size + 1}"}))
            return False
        conn.sendall(reply(206, {"Content-Range": f"bytes 600000-600999/{size}",
                                 "Content-Length": "1000"}, b"x" * 10))  # fmt: skip
        return False  # closes mid-body

    with HostileServer(respond) as server:
        src = _open(server)
        with pytest.raises(SourceError, match="size changed from 1048576 to 1048577"):
            src.read(500_000, 10)
        with pytest.raises(SourceError, match="short read: expected 1000 bytes, got 10"):
            src.read(600_000, 1000)


# -- time: deadlines, timeouts, Retry-After ---------------------------------------------------


def _dripping_body(request: Request, conn: socket.socket, server: HostileServer) -> bool:
    head = {"Content-Range": f"bytes 0-{SPECULATIVE_BYTES - 1}/{GIB}",
            "Content-Length": str(SPECULATIVE_BYTES)}  # fmt: skip
    conn.sendall(reply(206, head))
    drip(conn, bytes(SPECULATIVE_BYTES), 0.05, server)
    return False


def test_a_dripping_body_stops_at_the_deadline() -> None:
    server = HostileServer(lambda r, c: _dripping_body(r, c, server))
    with server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="no complete reply within 2 s"):
            _open(server, timeout=1, deadline=1)  # 1 s + 100,000 bytes at 100 kB/s
        assert time.monotonic() - t0 < 8


def test_dripping_headers_stop_at_the_deadline() -> None:
    def respond(request: Request, conn: socket.socket) -> bool:
        drip(conn, b"HTTP/1.1 206 X\r\n" + b"X-Slow: y\r\n" * 10000, 0.02, server)
        return False

    server = HostileServer(respond)
    with server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="no complete reply within"):
            _open(server, timeout=1, deadline=0.5, min_speed=1e9)
        assert time.monotonic() - t0 < 8


def test_endless_100_continue_stops_at_the_deadline() -> None:
    def respond(request: Request, conn: socket.socket) -> bool:
        try:
            while not server.closed:
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 100)
        except OSError:
            pass
        return False

    server = HostileServer(respond)
    with server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="no complete reply within"):
            _open(server, timeout=1, deadline=0.5, min_speed=1e9)
        assert time.monotonic() - t0 < 8


def test_a_server_that_never_answers_times_out() -> None:
    def respond(request: Request, conn: socket.socket) -> bool:
        while not server.closed:
            time.sleep(0.05)
        return False

    server = HostileServer(respond)
    with server:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match=r"timed out|no complete reply"):
            HTTPSource(f"{server.url}/m.bin", timeout=0.5, retries=1, backoff=0.01)
        assert time.monotonic() - t0 < 8
        assert len(server.requests) == 2  # one retry


def test_a_slow_but_steady_server_is_not_cut_off() -> None:
    def respond(request: Request, conn: socket.socket) -> bool:
        head = {"Content-Range": f"bytes 0-99999/{len(MB)}", "Content-Length": "100000"}
        conn.sendall(reply(206, head))
        for i in range(0, SPECULATIVE_BYTES, 20000):
            time.sleep(0.1)
            conn.sendall(MB[i : i + 20000])
        return False

    with HostileServer(respond) as server:
        assert _open(server, timeout=1, deadline=1).read(0, 100) == MB[:100]


@pytest.mark.parametrize("value", ["1000000000", "²", "9" * 5000, "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_retry_after_is_parsed_strictly_and_capped(value: str) -> None:
    honest = serve_bytes(MB)

    def respond(request: Request, conn: socket.socket) -> bool:
        if len(server.requests) == 1:
            conn.sendall(reply(503, {"Retry-After": value, "Content-Length": "0"}))
            return False
        return honest(request, conn)

    server = HostileServer(respond)
    with server:
        t0 = time.monotonic()
        src = HTTPSource(f"{server.url}/m.bin", timeout=1, retries=1, backoff=0.01)
        assert src.read(0, 10) == MB[:10]
        assert time.monotonic() - t0 < 8  # at most the timeout, not 10**9 s


# -- redirects ---------------------------------------------------------------------------------


def test_a_redirect_loop_ends() -> None:
    loop = reply(302, {"Location": "/m.bin", "Content-Length": "0"})
    with HostileServer(_send(loop, keep=True)) as server:
        with pytest.raises(SourceError, match="more than 5 redirects"):
            _open(server)
        assert len(server.requests) == 6


@pytest.mark.parametrize(
    "location",
    [
        "ftp://mallory:hunter2pw@127.0.0.1/m.bin?sig=t0ken-s3cret",
        "file:///etc/passwd?sig=t0ken-s3cret",
        "http://mallory:hunter2pw@[::1/m.bin?sig=t0ken-s3cret",
        "http://mallory:hunter2pw@127.0.0.1:99999/m.bin?sig=t0ken-s3cret",
        "",
    ],
)
def test_a_bad_redirect_is_refused_without_showing_its_secrets(location: str) -> None:
    moved = reply(302, {"Location": location, "Content-Length": "0"})
    with HostileServer(_send(moved)) as server:
        with pytest.raises(SourceError, match="redirect") as info:
            _open(server)
    assert "hunter2pw" not in str(info.value) and "t0ken-s3cret" not in str(info.value)


def test_requests_are_checked_before_they_are_sent() -> None:
    with HostileServer(serve_bytes(MB)) as server:
        src = _open(server)
        before = len(server.requests)
        for bad in (RangeRequest(5, 5), RangeRequest(-1, 3), SuffixRequest(0)):
            with pytest.raises(ValueError, match="not a non-empty byte range"):
                src._http.fetch(bad)
        assert len(server.requests) == before


def test_a_safetensors_file_behind_a_hostile_server_is_refused_cleanly() -> None:
    """The same checks through tensorfile.open: a reader never sees a lying reply."""
    data = save({"a": np.arange(10, dtype=np.float32)})
    lie = reply(206, {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data) + 1}",
                      "Content-Length": str(len(data))}, data)  # fmt: skip
    import tensorfile

    with HostileServer(_send(lie)) as server:
        with pytest.raises(SourceError, match="Content-Range disagrees"):
            tensorfile.open(f"{server.url}/m.safetensors")


def test_a_kept_alive_connection_the_server_closed_is_replaced() -> None:
    """The server closes every connection after one reply without saying so: the next
    request on the pooled connection fails before any reply and is sent again on a new one,
    without counting as a retry."""
    honest = serve_bytes(MB)

    def respond(request: Request, conn: socket.socket) -> bool:
        honest(request, conn)
        return False  # closes, although the reply did not say "Connection: close"

    with HostileServer(respond) as server:
        src = _open(server)  # retries=0: a stale connection must not need one
        for offset in (200_000, 400_000, 600_000, 800_000):
            assert src.read(offset, 1000) == MB[offset : offset + 1000]
        assert len(server.requests) == 5 == src.stats.requests


def test_credentials_in_a_location_are_neither_used_nor_shown() -> None:
    with HostileServer(serve_bytes(MB)) as b:
        moved = reply(302, {"Location": f"http://mallory:hunter2pw@127.0.0.1:{b.port}/m.bin",
                            "Content-Length": "0"})  # fmt: skip
        with HostileServer(_send(moved)) as a:
            src = _open(a, token="t0ken-s3cret")
            assert src.read(0, 10) == MB[:10]
            assert "hunter2pw" not in src.name and "hunter2pw" not in repr(src)
        assert b.requests and all("authorization" not in r.headers for r in b.requests)


def test_retries_are_bounded_by_the_fetch_deadline() -> None:
    """A refused port with many retries, or a server that never answers: the whole read ends
    within twice one attempt's deadline, retries included."""
    import time as _time

    from tensorfile.errors import InvalidArgumentError as _Bad
    from tensorfile.sources import HTTPSource as _Source

    with pytest.raises(_Bad, match="retries"):
        _Source("http://127.0.0.1:1/x.safetensors", retries=10**9)
    with pytest.raises(_Bad, match="retries"):
        _Source("http://127.0.0.1:1/x.safetensors", retries=-1)
    start = _time.monotonic()
    with pytest.raises(SourceError):
        _Source("http://127.0.0.1:1/x.safetensors", retries=10, backoff=0.5, timeout=1, deadline=1)
    assert _time.monotonic() - start < 2 * (1 + 100_000 / 100_000) + 1.5
