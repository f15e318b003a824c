"""Which HTTP client reads ranges fastest here: tensorfile's transport against urllib3, obstore
(Rust's object_store) and boto3, and the floors of the servers (curl to /dev/null).

Every client reads the same 1 GiB file as the read planner would: pieces of 8 MiB, 16 at a
time, each into its place in one destination buffer that is touched beforehand (so fresh
memory costs nothing and only the transport is timed). Clients whose replies are their own
buffers (obstore's ``Bytes``, boto3's stream) are copied into the destination, as a load
would have to. The clients alternate; medians of ``--repeat`` runs. Servers: nginx
(``tests/helpers/servers.start_nginx``) and SeaweedFS's S3 gateway
(``tests/helpers/seaweed``), both on 127.0.0.1 and sharing the machine's cores with the
client.

Usage: ``python -m benchmarks.transports [--repeat 5] [--data bench-data]`` (the 1 GiB file
of ``make bench``; generated when missing).
"""

from __future__ import annotations

import argparse
import atexit
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import REPO, Config, make_big

THREADS = 16
CHUNK = 8 << 20


def _pieces(size: int, read: Callable[[int, int], None]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda at: read(at, min(at + CHUNK, size)), range(0, size, CHUNK)))


def _curl(url: str, size: int, streams: int) -> None:
    step = -(-size // streams)
    procs = [
        subprocess.Popen(
            ["curl", "-s", "-o", "/dev/null", "-r", f"{a}-{min(a + step, size) - 1}", url]
        )
        for a in range(0, size, step)
    ]
    for p in procs:
        p.wait()


def http_clients(url: str, size: int, view: memoryview) -> dict[str, Callable[[], None]]:
    """The HTTP readers of ``url`` into ``view``."""
    import obstore
    import urllib3
    from obstore.store import HTTPStore

    from tensorfile.sources import HTTPSource

    def tf() -> None:
        with HTTPSource(url) as src:
            _pieces(size, lambda a, b: src.readinto(a, [view[a:b]]))

    pool = urllib3.PoolManager(maxsize=THREADS)

    def u3() -> None:
        def read(a: int, b: int) -> None:
            reply = pool.request("GET", url, headers={"Range": f"bytes={a}-{b - 1}"},
                                 preload_content=False)  # fmt: skip
            assert reply.status == 206
            pos = a
            while pos < b:
                n = reply.readinto(view[pos:b])
                assert n
                pos += n
            reply.release_conn()

        _pieces(size, read)

    base, name = url.rsplit("/", 1)
    store = HTTPStore.from_url(base, client_options={"allow_http": True})

    def obs() -> None:
        def read(a: int, b: int) -> None:
            view[a:b] = memoryview(obstore.get_range(store, name, start=a, end=b))

        _pieces(size, read)

    return {
        "tensorfile": tf,
        "urllib3": u3,
        "obstore get_range": obs,
        "curl x1 (floor, /dev/null)": lambda: _curl(url, size, 1),
        "curl x16 (floor, /dev/null)": lambda: _curl(url, size, 16),
    }


def s3_clients(srv: Any, bucket: str, key: str, size: int, view: memoryview) -> dict[str, Any]:
    """The S3 readers of ``bucket/key`` into ``view``."""
    import boto3
    import obstore
    from botocore.config import Config as BotoConfig
    from obstore.store import S3Store

    from tensorfile.sources.s3.s3_source import S3Source

    url = f"s3://{bucket}/{key}"

    def tf() -> None:
        with S3Source(url, **srv.options) as src:
            _pieces(size, lambda a, b: src.readinto(a, [view[a:b]]))

    store = S3Store(bucket, endpoint=srv.endpoint, region="us-east-1",
                    access_key_id=srv.key, secret_access_key=srv.secret,
                    client_options={"allow_http": True})  # fmt: skip

    def obs() -> None:
        def read(a: int, b: int) -> None:
            view[a:b] = memoryview(obstore.get_range(store, key, start=a, end=b))

        _pieces(size, read)

    client = boto3.client("s3", endpoint_url=srv.endpoint, aws_access_key_id=srv.key,
                          aws_secret_access_key=srv.secret, region_name="us-east-1",
                          config=BotoConfig(max_pool_connections=THREADS))  # fmt: skip

    def boto() -> None:
        def read(a: int, b: int) -> None:
            body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={a}-{b - 1}")["Body"]
            pos = a
            while pos < b:
                n = body._raw_stream.readinto(view[pos:b])
                assert n
                pos += n

        _pieces(size, read)

    plain = f"{srv.endpoint}/{bucket}/{key}"
    return {
        "tensorfile": tf,
        "obstore get_range": obs,
        "boto3 get_object(Range)": boto,
        "curl x1 (floor, /dev/null)": lambda: _curl(plain, size, 1),
        "curl x16 (floor, /dev/null)": lambda: _curl(plain, size, 16),
    }


def measure(clients: dict[str, Callable[[], None]], repeat: int) -> dict[str, float]:
    """Median seconds of each client, alternated."""
    times: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(repeat):
        for name, run in clients.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=REPO / "bench-data")
    args = parser.parse_args()
    cfg = Config(args.data.resolve(), 1 << 24, 0, 1, 1)
    cfg.data.mkdir(parents=True, exist_ok=True)
    make_big(cfg)
    size = cfg.big_path.stat().st_size
    buf = np.ones(size, np.uint8)  # touched: fresh memory is not what is compared
    view = memoryview(buf)
    want = np.fromfile(cfg.big_path, np.uint8)

    from tests.helpers import seaweed
    from tests.helpers.servers import start_nginx

    web, proc = start_nginx(Path(tempfile.mkdtemp(prefix="tf-transports-")))
    atexit.register(proc.terminate)
    os.symlink(cfg.big_path, web.root / "big.safetensors")
    srv = seaweed.start(data=cfg.data / "seaweed")
    atexit.register(srv.stop)
    try:
        srv.client.create_bucket(Bucket="tf-bench")
    except srv.client.exceptions.ClientError:
        pass
    try:
        stored = srv.client.head_object(Bucket="tf-bench", Key=cfg.big_path.name)["ContentLength"]
    except srv.client.exceptions.ClientError:
        stored = None
    if stored != size:
        srv.client.upload_file(str(cfg.big_path), "tf-bench", cfg.big_path.name)
    rows = {
        "HTTP (nginx)": http_clients(f"{web.url}/big.safetensors", size, view),
        "S3 (SeaweedFS)": s3_clients(srv, "tf-bench", cfg.big_path.name, size, view),
    }
    print(f"1 GiB in {CHUNK >> 20} MiB pieces, {THREADS} at a time, into a touched buffer; "
          f"medians of {args.repeat}, alternated\n")  # fmt: skip
    print("| server | client | seconds | GB/s |\n|---|---|---:|---:|")
    for server, clients in rows.items():
        for name, run in clients.items():
            if "curl" not in name:
                buf.fill(0)
                run()
                assert np.array_equal(buf, want), f"{server} {name}: wrong bytes"
        for name, seconds in measure(clients, args.repeat).items():
            print(f"| {server} | {name} | {seconds:.2f} | {size / seconds / 1e9:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
