"""One pool of HTTP connections per origin, shared by every file, shard and thread that goes
there (tensorfile.sources.http._conn.POOL): a real server on 127.0.0.1 counts the TCP
connections it accepts while a sharded checkpoint of eight shards is loaded, loaded again,
read from several threads, and loaded in a forked child (which must not reuse the parent's
sockets)."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile
from tensorfile.safetensors.numpy import save_sharded
from tests.helpers.servers import Server, start_range_server

INDEX = "model.safetensors.index.json"
SHARDS = 8
THREADS = 2
ARRAYS = {f"t{i}": np.full((64, 64), i, np.float32) for i in range(SHARDS)}  # one per shard


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    save_sharded(ARRAYS, tmp_path / "www" / "ck", max_shard_size="20KB")
    assert len(list((tmp_path / "www" / "ck").glob("*.safetensors"))) == SHARDS
    monkeypatch.setenv("TENSORFILE_IO_THREADS", str(THREADS))
    server, stopper = start_range_server(tmp_path / "www", tmp_path / "log")
    try:
        yield server
    finally:
        stopper.terminate()


def _load(url: str) -> dict[str, Any]:
    with tensorfile.open(f"{url}/ck/{INDEX}") as ck:
        return ck.get_tensors()


def _same(got: dict[str, Any]) -> None:
    assert sorted(got) == sorted(ARRAYS)
    for name, want in ARRAYS.items():
        assert np.array_equal(got[name], want), name


def _accepted(server: Server) -> int:
    assert server.accepted is not None
    return len(server.accepted)


def test_a_sharded_load_reuses_connections_across_shards(served: Server) -> None:
    _same(_load(served.url))
    first = _accepted(served)
    assert 1 <= first <= THREADS  # not one (or more) per shard: 9 files were read
    _same(_load(served.url))  # a second load of the checkpoint: the idle connections serve it
    assert _accepted(served) == first


def test_threads_reading_shards_share_the_pool(served: Server) -> None:
    failures: list[BaseException] = []

    def load() -> None:
        try:
            for _ in range(3):
                _same(_load(served.url))
        except BaseException as exc:  # reported below
            failures.append(exc)

    workers = [threading.Thread(target=load) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert failures == []
    assert _accepted(served) <= 4 * THREADS  # 4 loads at once, 12 in all, 108 files


def _child(url: str, out: Any) -> None:
    try:
        _same(_load(url))
        out.put("ok")
    except BaseException as exc:  # the parent asserts on it
        out.put(repr(exc))


def test_a_forked_child_makes_its_own_connections(served: Server) -> None:
    from tensorfile.sources.http._conn import POOL

    _same(_load(served.url))
    before = _accepted(served)
    assert POOL.idle((("http", "127.0.0.1", int(served.url.rsplit(":", 1)[1])), None, None))
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child, args=(served.url, out))
    child.start()
    assert out.get(timeout=60) == "ok"
    child.join(timeout=60)
    assert child.exitcode == 0
    assert _accepted(served) > before  # the child connected on its own
    _same(_load(served.url))  # the parent's connections are intact and still reused


def _connected(server: Server) -> Any:
    from tensorfile.sources.http._conn import new_connection
    from tensorfile.sources.http._urls import parse_http_url

    conn = new_connection(parse_http_url(server.url), None, 5.0, None)
    conn.connect()
    return conn


def test_the_pool_keeps_few_idle_connections_and_not_for_long(served: Server) -> None:
    from tensorfile.sources.http._conn import Pool

    pool = Pool(max_idle=2)
    conns = [_connected(served) for _ in range(3)]
    for conn in conns:
        pool.give("origin", conn)
    assert pool.idle("origin") == 2
    assert conns[2].sock is None  # the third was closed, not kept
    assert pool.take("origin") is conns[1]  # the most recently used first
    assert pool.take("other") is None
    stale = Pool(idle_seconds=0.0)
    conn = _connected(served)
    stale.give("origin", conn)
    assert stale.take("origin") is None  # idle too long: closed, a new one is made
    assert conn.sock is None


def test_s3_sources_of_one_endpoint_share_connections(seaweed: Any) -> None:
    from tensorfile.sources.http._conn import POOL, pool_key
    from tensorfile.sources.http._urls import parse_http_url
    from tensorfile.sources.s3.s3_source import S3Source

    place = seaweed.place()
    for key in ("a.bin", "b.bin"):
        seaweed.put(place, key, bytes(range(256)) * 1000)
    origin = pool_key(parse_http_url(seaweed.endpoint), None)
    with S3Source(f"s3://{place}/a.bin", **seaweed.options) as src:
        assert src.read(200_000, 10) == (bytes(range(256)) * 1000)[200_000:200_010]
    conn = POOL.take(origin)
    assert conn is not None
    port = conn.sock.getsockname()[1]
    POOL.give(origin, conn)
    with S3Source(f"s3://{place}/b.bin", **seaweed.options) as src:  # another object
        assert src.read(200_000, 10) == (bytes(range(256)) * 1000)[200_000:200_010]
    conn = POOL.take(origin)
    assert conn is not None
    assert conn.sock.getsockname()[1] == port  # the same TCP connection served it
    POOL.give(origin, conn)
