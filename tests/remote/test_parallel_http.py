"""Loads over HTTP as the read planner runs them: many range requests at once, each body
received straight into its tensors' buffers (``readinto`` → ``HTTPFetcher.fetch_into``), every
reply checked as the first one is; against nginx and the hostile servers of
tests.helpers.hostile_http."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

import tensorfile.safetensors.numpy as tf_numpy
from tensorfile.errors import InvalidArgumentError, SourceError
from tensorfile.sources import HTTPSource
from tensorfile.sources.http.remote import DEFAULT_IO_CHUNK, DEFAULT_IO_THREADS
from tests.helpers.hostile_http import HostileServer, Request, drip, parse_range, reply

DATA = os.urandom(3 << 20)
PIECE = 1 << 20


def _pieces(src: HTTPSource, data_len: int, piece: int = PIECE) -> bytes:
    """Read the whole file as the planner would: pieces, from a pool of threads."""
    buf = bytearray(data_len)
    view = memoryview(buf)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda at: src.readinto(at, [view[at : at + piece]]), range(0, data_len, piece)
            )
        )
    return bytes(buf)


def test_tuning_defaults_and_overrides(nginx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (nginx.root / "t.bin").write_bytes(DATA[:1000])
    url = f"{nginx.url}/t.bin"
    with HTTPSource(url) as src:
        assert (src.io_threads, src.io_chunk) == (DEFAULT_IO_THREADS, DEFAULT_IO_CHUNK)
    monkeypatch.setenv("TENSORFILE_IO_THREADS", "3")
    monkeypatch.setenv("TENSORFILE_IO_CHUNK_MIB", "2")
    with HTTPSource(url) as src:
        assert (src.io_threads, src.io_chunk) == (3, 2 << 20)
    with HTTPSource(url, io_threads=5, io_chunk=65536) as src:
        assert (src.io_threads, src.io_chunk) == (5, 65536)
    monkeypatch.setenv("TENSORFILE_IO_THREADS", "many")
    with pytest.raises(InvalidArgumentError, match=r"\$TENSORFILE_IO_THREADS must be a whole"):
        HTTPSource(url)
    with pytest.raises(InvalidArgumentError, match="io_threads must be from 1 to 64"):
        HTTPSource(url, io_threads=0)


def test_pieces_from_threads_equal_the_file(nginx: Any) -> None:
    (nginx.root / "p.bin").write_bytes(DATA)
    nginx.reset()
    with HTTPSource(f"{nginx.url}/p.bin") as src:
        assert _pieces(src, len(DATA)) == DATA
        assert src.stats.bytes_read == len(DATA) + 100_000  # the first read, then each byte once
    ranges = sorted(r.range for r in nginx.requests())
    assert len(ranges) == 1 + 3 and all(r.startswith("bytes=") for r in ranges)


def test_load_file_in_pieces_equals_the_reference(
    nginx: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORFILE_IO_CHUNK_MIB", "1")
    rng = np.random.default_rng(0)
    arrays = {f"w{i}": rng.standard_normal(200_000, dtype=np.float32) for i in range(8)}
    safetensors.numpy.save_file(arrays, str(nginx.root / "m.safetensors"))
    nginx.reset()
    got = tf_numpy.load_file(f"{nginx.url}/m.safetensors")
    assert sorted(got) == sorted(arrays)
    assert all(np.array_equal(got[k], arrays[k]) for k in arrays)
    assert len(nginx.requests()) >= 1 + 6  # 6.4 MB in 1 MiB pieces, after the first read


def test_peak_memory_is_the_tensors(nginx: Any) -> None:
    """A fresh process loading 64 MiB over HTTP grows by the tensors, not twice them."""
    arrays = {f"w{i}": np.full(1 << 22, i, np.float32) for i in range(4)}  # 4 x 16 MiB
    safetensors.numpy.save_file(arrays, str(nginx.root / "mem.safetensors"))
    script = textwrap.dedent(
        """
        import sys
        import tensorfile.safetensors.numpy as t

        def status(field):
            for line in open("/proc/self/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

        from tensorfile.sources import HTTPSource  # the HTTP stack imported before
        base = status("VmRSS")
        out = t.load_file(sys.argv[1])
        print(status("VmHWM") - base, sum(a.nbytes for a in out.values()))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, f"{nginx.url}/mem.safetensors"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    grew, nbytes = map(int, proc.stdout.split())
    assert nbytes == 64 << 20
    assert grew <= 1.1 * nbytes + (8 << 20), grew


# -- hostile servers, on the pieces after the first read --------------------------------------


def _honest_then(hostile: Any, data: bytes = DATA, etag: str | None = None) -> Any:
    """A ``respond`` that serves the first read honestly and hands later ones to
    ``hostile(request, conn, start, stop)`` (which returns True to keep the connection)."""

    def respond(request: Request, conn: socket.socket) -> bool:
        rng = parse_range(request.headers.get("range"), len(data))
        assert rng is not None
        start, stop = rng
        if start == 0 and stop == 100_000:
            head = {"Content-Range": f"bytes 0-99999/{len(data)}", "Content-Length": "100000"}
            if etag:
                head["ETag"] = etag
            conn.sendall(reply(206, head, data[:100_000]))
            return True
        return bool(hostile(request, conn, start, stop))

    return respond


def _partial(start: int, stop: int, size: int, **extra: str) -> dict[str, str]:
    return {"Content-Range": f"bytes {start}-{stop - 1}/{size}",
            "Content-Length": str(stop - start), **extra}  # fmt: skip


def test_a_body_cut_short_is_asked_again_then_refused() -> None:
    cuts: list[int] = []

    def cut_first(request: Request, conn: socket.socket, start: int, stop: int) -> bool:
        whole = len(cuts) >= 1 and start in cuts  # the second request for a piece is whole
        cuts.append(start)
        body = DATA[start:stop] if whole else DATA[start : start + 1000]
        conn.sendall(reply(206, _partial(start, stop, len(DATA)), body))
        return whole

    with HostileServer(_honest_then(cut_first)) as server:
        src = HTTPSource(f"{server.url}/m.bin", retries=1, backoff=0, timeout=5)
        assert _pieces(src, len(DATA)) == DATA  # each piece cut once, then read whole

    def always_cut(request: Request, conn: socket.socket, start: int, stop: int) -> bool:
        conn.sendall(reply(206, _partial(start, stop, len(DATA)), DATA[start : start + 1000]))
        return False

    with HostileServer(_honest_then(always_cut)) as server:
        src = HTTPSource(f"{server.url}/m.bin", retries=2, backoff=0, timeout=5)
        with pytest.raises(SourceError, match=f"short read: expected {PIECE} bytes, got 1000"):
            src.readinto(PIECE, [memoryview(bytearray(PIECE))])
        assert len(server.requests) == 1 + 3  # the first read, then the piece three times


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        ("range", "Content-Range disagrees"),
        ("size", "size changed"),
        ("etag", "changed while it was being read"),
        ("long", "Content-Length 1048577 disagrees"),
    ],
)
def test_a_later_piece_that_lies_is_refused_without_retrying(lie: str, message: str) -> None:
    def respond(request: Request, conn: socket.socket, start: int, stop: int) -> bool:
        head = _partial(start, stop, len(DATA), ETag='"v1"')
        if lie == "range":
            head = _partial(start + 1, stop + 1, len(DATA), ETag='"v1"')
        elif lie == "size":
            head = _partial(start, stop, len(DATA) + 1, ETag='"v1"')
        elif lie == "etag":
            head["ETag"] = '"v2"'
        elif lie == "long":
            head["Content-Length"] = str(stop - start + 1)
        conn.sendall(reply(206, head, DATA[start:stop]))
        return False

    with HostileServer(_honest_then(respond, etag='"v1"')) as server:
        src = HTTPSource(f"{server.url}/m.bin", retries=3, backoff=0, timeout=5)
        buf = memoryview(bytearray(PIECE))
        with pytest.raises(SourceError, match=message):
            src.readinto(PIECE, [buf])
        assert len(server.requests) == 2  # a lie is not asked again


def test_a_dripping_piece_stops_at_its_deadline() -> None:
    def respond(request: Request, conn: socket.socket, start: int, stop: int) -> bool:
        conn.sendall(reply(206, _partial(start, stop, len(DATA))))
        drip(conn, DATA[start:stop], 0.05, server)
        return False

    server = HostileServer(_honest_then(respond))
    with server:
        src = HTTPSource(f"{server.url}/m.bin", retries=3, timeout=1, deadline=1, min_speed=1e6)
        t0 = time.monotonic()
        with pytest.raises(SourceError, match=r"no complete reply within 2\.05 s"):
            src.readinto(PIECE, [memoryview(bytearray(PIECE))])  # 1 s + 1 MiB at 1 MB/s
        assert time.monotonic() - t0 < 8


def test_a_piece_answered_with_the_whole_file_is_served_from_it() -> None:
    """A server that honours the first range, then ignores Range: a small file is read whole
    (within the full-download limit) and the pieces are cut from it."""

    def whole(request: Request, conn: socket.socket, start: int, stop: int) -> bool:
        conn.sendall(reply(200, {"Content-Length": str(len(DATA))}, DATA))
        return False

    with HostileServer(_honest_then(whole)) as server:
        src = HTTPSource(f"{server.url}/m.bin", retries=0, timeout=5)
        assert _pieces(src, len(DATA)) == DATA
