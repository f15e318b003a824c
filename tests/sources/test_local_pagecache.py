"""How much of a file the page cache holds (``cachestat``, and ``mincore`` where it is
missing), and ``LocalSource.prefetch``: the mapping read ahead on threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfile.sources import LocalSource
from tensorfile.sources.local import _pagecache as pagecache
from tensorfile.sources.local import advice
from tests.helpers.pagecache import evict as _evict


@pytest.fixture
def cold_file(tmp_path: Path) -> Path:
    path = tmp_path / "cold.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 6 << 20, np.uint8).tobytes())
    _evict(path)
    with LocalSource(path) as src:
        cached = src.resident_fraction()
    if cached is None or cached > 0.5:
        pytest.skip("the page cache does not drop this file's pages here")
    return path


@pytest.fixture(params=["cachestat", "mincore", "cachestat-sampled", "mincore-sampled"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if "mincore" in request.param:
        monkeypatch.setitem(pagecache._state, "cachestat", False)
    if "sampled" in request.param:
        monkeypatch.setattr(pagecache, "WINDOW", 64 << 10)  # 96 windows: 8 looked at
        monkeypatch.setattr(pagecache, "SAMPLES", 8)
    return str(request.param)


def test_sampled_windows_are_bounded_and_reach_both_ends() -> None:
    w = pagecache._windows(4096, 4096 + 1000 * pagecache.WINDOW + 5)
    assert len(w) == pagecache.SAMPLES
    assert w[0][0] == 4096 and w[-1] == (4096 + 1000 * pagecache.WINDOW, 5)
    assert pagecache._windows(0, 10) == [(0, 10)]


def test_residency_follows_reads_and_eviction(cold_file: Path, way: str) -> None:
    with LocalSource(cold_file) as src:
        assert src.resident_fraction() is not None
        assert src.resident_fraction() < 0.5  # type: ignore[operator]
        src.read(0, 1 << 20)
        first = src.resident_fraction(0, 1 << 20)
        assert first is not None and first > 0.9
        out = np.empty(src.size, np.uint8)
        src.readinto(0, [memoryview(out)])  # (O_DIRECT where taken: the cache stays cold)
        _ = cold_file.read_bytes()
        assert src.resident_fraction() == pytest.approx(1.0, abs=0.05)
        assert src.resident_fraction(100, 100) == 1.0  # an empty range


def test_an_unaligned_range_up_to_the_end(cold_file: Path, way: str) -> None:
    with LocalSource(cold_file) as src:
        _ = cold_file.read_bytes()
        assert src.resident_fraction(12345, src.size) == pytest.approx(1.0, abs=0.05)


def test_prefetch_reads_the_mapping_in(cold_file: Path) -> None:
    with LocalSource(cold_file) as src:
        src.io_chunk = 1 << 20  # several pieces on the threads
        assert src.prefetch() in (True, False)  # False: only read ahead (old kernel)
        view = src.buffer()
        assert bytes(view[-10:]) == cold_file.read_bytes()[-10:]
        del view
        cached = src.resident_fraction()
        assert cached is not None and cached > 0.9
        assert src.prefetch(10, 5) is True  # an empty range: nothing to do


def test_prefetch_without_populate_asks_for_read_ahead(
    cold_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refusing(addr: int, length: int, advice: int) -> int:
        return -1

    monkeypatch.setattr(advice, "libc_madvise", lambda: refusing)
    with LocalSource(cold_file) as src:
        assert src.prefetch() is False
        assert src._populate is False  # not tried again by this source
        assert src.prefetch() is False


def test_prefetch_of_a_file_truncated_after_open_does_not_crash(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(b"\1" * (4 << 20))
    with LocalSource(path) as src:
        src.buffer()  # mapped at the old size
        os.truncate(path, 1 << 20)
        assert src.prefetch() in (True, False)  # EFAULT past the end: no SIGBUS


def test_a_prefetch_killed_midway_leaves_the_file_readable(cold_file: Path) -> None:
    code = (
        "import sys, os, signal, threading\n"
        "from tensorfile.sources import LocalSource\n"
        "src = LocalSource(sys.argv[1]); src.io_chunk = 1 << 16\n"
        "threading.Timer(0.01, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()\n"
        "while True: src.prefetch()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", code, str(cold_file)], env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    want = np.random.default_rng(1).integers(0, 256, 6 << 20, np.uint8).tobytes()
    with LocalSource(cold_file) as src:
        out = np.empty(src.size, np.uint8)
        src.readinto(0, [memoryview(out)])
        assert out.tobytes() == want
