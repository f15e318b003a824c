"""One remote reader shared by threads: every read correct (each request has a connection of
its own), against the Range-honouring server of tests.helpers.servers on 127.0.0.1."""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

import tensorfile
from tensorfile.safetensors.numpy import save_file
from tensorfile.sources import HTTPSource
from tests.helpers.servers import Server

THREADS = 8
READS = 200


def _serve(server: Server, suffix: str) -> tuple[Path, str]:
    path = server.root / f"{uuid.uuid4().hex}{suffix}"
    return path, f"{server.url}/{path.name}"


def test_200_reads_from_8_threads_on_one_reader(range_server: Server) -> None:
    path, url = _serve(range_server, ".safetensors")
    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.standard_normal((64, 32), dtype=np.float32) for i in range(64)}
    save_file(arrays, str(path))  # 512 kB: most tensors are past the speculative first read
    names = sorted(arrays)
    plan = [(random.Random(i).choice(names), i % 3) for i in range(READS)]
    try:
        with tensorfile.open(url) as f:
            before = f.source.stats.requests

            def read(step: tuple[str, int]) -> bool:
                name, how = step
                if how == 0:
                    return bool(np.array_equal(f.get_tensor(name), arrays[name]))
                if how == 1:
                    rows = f.read_slice(name, slice(10, 20))
                    return bool(np.array_equal(rows, arrays[name][10:20]))
                pair = f.get_tensors([name, "t63"])
                return all(np.array_equal(pair[k], arrays[k]) for k in (name, "t63"))

            with ThreadPoolExecutor(THREADS) as pool:
                results = list(pool.map(read, plan))
            assert results == [True] * READS
            assert f.source.stats.requests > before
    finally:
        path.unlink()


def test_raw_reads_from_8_threads_on_one_source(range_server: Server) -> None:
    path, url = _serve(range_server, ".bin")
    data = random.Random(1).randbytes(3 << 20)
    path.write_bytes(data)
    spots = [(random.Random(i).randrange(len(data) - 70_000), 1 + i * 347) for i in range(READS)]
    try:
        with HTTPSource(url) as src:
            with ThreadPoolExecutor(THREADS) as pool:
                got = list(pool.map(lambda s: src.read(*s), spots))
            assert got == [data[o : o + n] for o, n in spots]
            assert src.stats.requests <= 1 + READS
    finally:
        path.unlink()
