"""review38b: second hostile tests of plans read alone (``tensorfile.distributed.load``
without a group, :mod:`tensorfile.core.selection`) after the review38a fixes: a real HTTP
server on 127.0.0.1 counts the requests a region costs. The oracle is numpy indexing.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from tensorfile import open as tensorfile_open
from tensorfile.distributed import load
from tensorfile.errors import SafetensorError
from tests.helpers.hostile_http import HostileServer, parse_range, reply


def _counting(data: bytes, hits: list[int]) -> Any:
    def respond(request: Any, conn: Any) -> bool:
        rng = parse_range(request.headers.get("range"), len(data))
        a, b = (0, len(data)) if rng is None else rng
        hits.append(b - a)
        head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
        conn.sendall(reply(206, head, data[a:b]))
        return True

    return respond


def test_a_column_of_a_tall_matrix_over_http_costs_few_requests(tmp_path: Path) -> None:
    from tensorfile.safetensors.numpy import save_file

    a = np.arange(5000 * 16, dtype=np.float32).reshape(5000, 16)
    save_file({"w": a}, tmp_path / "tall.safetensors")
    data = (tmp_path / "tall.safetensors").read_bytes()
    hits: list[int] = []
    with HostileServer(_counting(data, hits)) as server:
        url = f"{server.url}/tall.safetensors"
        got = load(url, {"w": (slice(None), 0)})["w"].numpy()
        assert np.array_equal(got, a[:, 0])
        column = len(hits)
        hits.clear()
        assert np.array_equal(load(url, {"w": (slice(None), slice(0, 2))})["w"].numpy(), a[:, :2])
    assert column <= 64, (column, len(hits))


def test_remote_slices_read_over_at_most_the_documented_span(tmp_path: Path) -> None:
    """(R38B-6) A column block of a tall matrix from a remote file: its runs are close
    together, so the rows they span are one read, bounded by the documented rule (at most
    SPAN_WASTE x the bytes wanted, SPAN_FLOOR, or RUN_BYTES per run); the guide says so."""
    from tensorfile.core.selection.read import RUN_BYTES, SPAN_FLOOR, SPAN_WASTE
    from tensorfile.safetensors.numpy import save_file

    a = np.arange(5000 * 16, dtype=np.float32).reshape(5000, 16)
    save_file({"w": a}, tmp_path / "tall.safetensors")
    data = (tmp_path / "tall.safetensors").read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    hits: list[int] = []
    with HostileServer(_counting(data, hits)) as server:
        url = f"{server.url}/tall.safetensors"
        with tensorfile_open(url):  # (the header's requests, counted apart)
            pass
        before = sum(hits)
        got = load(url, {"w": (slice(None), slice(0, 2))})["w"].numpy()
    assert np.array_equal(got, a[:, :2])
    wanted = a[:, :2].nbytes
    read = sum(hits) - 2 * before  # (load opens the file again: its header once more)
    assert read <= max(SPAN_WASTE * wanted, SPAN_FLOOR, RUN_BYTES * 5000) + header, read


def test_iteration_skips_a_tensor_another_thread_takes_while_it_waits(tmp_path: Path) -> None:
    import threading

    from tensorfile.safetensors import safe_open
    from tensorfile.safetensors.numpy import save_file

    save_file({"a": np.arange(200_000, dtype=np.float32)}, tmp_path / "p.safetensors")
    data = (tmp_path / "p.safetensors").read_bytes()
    failures: list[str] = []
    for _ in range(16):  # (which waiter wins the tensor is a race: several tries)
        gate = threading.Event()

        def respond(request: Any, conn: Any, gate: threading.Event = gate) -> bool:
            rng = parse_range(request.headers.get("range"), len(data))
            a, b = (0, len(data)) if rng is None else rng
            if b - a < 200_000 < b:  # (the tensor's last bytes, past the open's first read)
                gate.wait(20)
            head = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}", "Content-Length": str(b - a)}
            conn.sendall(reply(206, head, data[a:b]))
            return True

        with HostileServer(respond) as server:
            with safe_open(f"{server.url}/p.safetensors", "np") as f:
                loader = f.prefetch({"a": None})

                def iterate(loader: Any = loader) -> None:
                    try:
                        list(loader)
                    except Exception as exc:
                        failures.append(f"{type(exc).__name__}: {exc}")

                def take(loader: Any = loader) -> None:
                    with contextlib.suppress(SafetensorError):  # (the iteration took it)
                        loader.take("a")

                threads = [threading.Thread(target=t) for t in (take, iterate)]
                for t in threads:
                    t.start()
                time.sleep(0.1)
                gate.set()
                for t in threads:
                    t.join(20)
    assert not failures, failures
