"""Cold reads of a local file: ``O_DIRECT`` through bounce buffers gives the bytes a plain read
gives (any offset, any destination address, any length), falls back where the filesystem
refuses it, is safe from several threads at once, and raises on a file truncated after it was
opened; the choice between it and the page cache follows the page cache's state."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from tensorfile.core.errors import SourceError
from tensorfile.sources import LocalSource
from tensorfile.sources.local import local, policy
from tensorfile.sources.local._direct import ALIGN, POOL, open_direct
from tests.helpers.pagecache import evict as _evict

SIZE = (3 << 20) + 4321


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    data = np.random.default_rng(7).integers(0, 256, SIZE, np.uint8).tobytes()
    path = tmp_path_factory.mktemp("direct") / "data.bin"
    path.write_bytes(data)
    return path, data


def _direct_or_skip(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        got = open_direct(fd, str(path), 1 << 20)
        if got is None:
            pytest.skip("this filesystem refuses O_DIRECT")
        got.close()
    finally:
        os.close(fd)


def _dest(n: int, misalign: int) -> np.ndarray:
    """A writable buffer of ``n`` bytes at an address ``misalign`` past a page boundary."""
    raw = np.empty(n + 2 * ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN + misalign % ALIGN
    return raw[start : start + n]


def test_any_offset_address_and_length_reads_the_file(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    _direct_or_skip(path)
    rng = random.Random(3)
    with LocalSource(path, direct=True) as src:
        cases = [(0, SIZE), (SIZE - 1, 1), (SIZE - 5000, 5000), (ALIGN, 3 * ALIGN), (1, 0)]
        cases += [(rng.randrange(SIZE), 0) for _ in range(60)]
        for i, (offset, n) in enumerate(cases):
            n = n or rng.randrange(0, min(SIZE - offset, 1 << 21))
            cut = rng.randrange(0, n + 1)
            # congruent to the file offset (read straight in), page-aligned, or anything
            how = i % 3
            mis = [(offset) % ALIGN, 0, rng.randrange(ALIGN)][how]
            a = _dest(cut, mis)
            b = _dest(n - cut, (mis + cut) if how == 0 else rng.randrange(ALIGN))
            src.readinto(offset, [memoryview(a), memoryview(b)])
            assert a.tobytes() + b.tobytes() == data[offset : offset + n], (offset, n, how)


def test_a_large_read_runs_in_pieces_on_threads(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    _direct_or_skip(path)
    with LocalSource(path, direct=True) as src:
        src.io_chunk = 256 << 10  # many pieces for the threads
        out = _dest(SIZE - 3, 5)
        src.readinto(3, [memoryview(out)])
        assert out.tobytes() == data[3:]
        assert src.io_threads == local.DISK_THREADS
        assert 0 < POOL.idle() <= local.DISK_THREADS  # bounce buffers reused, not piled up
    assert POOL.idle() == 0  # the last direct file closed: the pool let its buffers go


def test_many_files_share_the_bounce_buffers(tmp_path: Path) -> None:
    # a checkpoint of many shards read in one plan: buffers per thread, not per shard
    paths = []
    for i in range(6):
        path = tmp_path / f"s{i}.bin"
        path.write_bytes(bytes([i]) * (1 << 20))
        paths.append(path)
    _direct_or_skip(paths[0])
    sources = [LocalSource(p, direct=True) for p in paths]
    try:
        for i, src in enumerate(sources):
            out = _dest(src.size - 1, 1)
            src.readinto(1, [memoryview(out)])
            assert out.tobytes() == bytes([i]) * (src.size - 1)
        assert POOL.idle() == 1  # one serial reader: one buffer, whatever the file count
    finally:
        for src in sources:
            src.close()
    assert POOL.idle() == 0


def test_concurrent_callers_on_disjoint_ranges(data_file: tuple[Path, bytes]) -> None:
    path, data = data_file
    _direct_or_skip(path)
    errors: list[BaseException] = []
    with LocalSource(path, direct=True) as src:

        def read(k: int) -> None:
            try:
                for j in range(20):
                    off = (k * 20 + j) * 10_007
                    out = _dest(9_999, k + j)
                    src.readinto(off, [memoryview(out)])
                    assert out.tobytes() == data[off : off + 9_999]
            except BaseException as exc:  # (re-raised in the main thread)
                errors.append(exc)

        threads = [threading.Thread(target=read, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


@pytest.mark.parametrize("direct", [True, False])
def test_a_file_truncated_after_open_is_an_error_not_garbage(tmp_path: Path, direct: bool) -> None:
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(range(256)) * 40_000)
    if direct:
        _direct_or_skip(path)
    with LocalSource(path, direct=direct) as src:
        os.truncate(path, 1_000_000)
        out = np.zeros(3_000_000, np.uint8)
        with pytest.raises(SourceError, match="truncated after it was opened"):
            src.readinto(100, [memoryview(out)])
        # a read that ends inside the shorter file still works
        small = np.zeros(5000, np.uint8)
        src.readinto(ALIGN + 1, [memoryview(small)])
        assert small.tobytes() == (bytes(range(256)) * 40)[ALIGN + 1 : ALIGN + 5001]


def test_tmpfs_reads_whether_or_not_it_takes_o_direct() -> None:
    # tmpfs refused O_DIRECT (EINVAL) until Linux 6.6 and takes it since: right bytes either way
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    path = shm / f"tensorfile-direct-{os.getpid()}"
    data = os.urandom(1 << 21)
    path.write_bytes(data)
    try:
        with LocalSource(path, direct=True) as src:
            out = _dest(len(data) - 7, 3)
            src.readinto(7, [memoryview(out)])
            assert out.tobytes() == data[7:]
    finally:
        path.unlink()


def test_a_filesystem_that_refuses_o_direct_is_read_through_the_cache() -> None:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")  # sysfs: EINVAL for O_DIRECT
    if not path.is_file():
        pytest.skip("no such sysfs file here")
    want = path.read_bytes()[:5]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert open_direct(fd, str(path), 1 << 20) is None
    finally:
        os.close(fd)
    with LocalSource(path, direct=True) as src:
        out = bytearray(5)
        src.readinto(0, [memoryview(out)])
        assert bytes(out) == want
        assert src._direct is None  # refused once, not asked again


def test_auto_reads_a_cold_file_direct_and_a_cached_one_through_the_cache(
    tmp_path: Path,
) -> None:
    """The read policy decides once per open file (at its first large read, when nobody
    decided before): a cold file's reads go direct, a cached file's through the cache."""
    path = tmp_path / "c.bin"
    path.write_bytes(os.urandom(4 << 20))
    _direct_or_skip(path)
    with LocalSource(path) as src:
        m = src.mount()
        if m is None or m.kind != "local":
            pytest.skip("not on a local block device's filesystem")
        _evict(path)
        cached = src.resident_fraction()
        if cached is None or cached >= policy.COLD_BELOW:
            pytest.skip("the page cache does not drop this file's pages")
        assert src.choice is None
        assert not src._wants_direct(1000)  # small reads never go direct, nor decide
        assert src.choice is None
        assert src._wants_direct(src.size)
        assert src.choice is not None and src.choice.direct
        out = np.empty(src.size, np.uint8)
        src.readinto(0, [memoryview(out)])
        assert out.tobytes() == path.read_bytes()  # (reads it into the cache)
        assert src._wants_direct(src.size)  # decided once: the same for this open file
    with LocalSource(path) as src:  # cached now: a new open decides anew
        assert not src._wants_direct(src.size)
        assert src.choice is not None and not src.choice.direct
    with LocalSource(path, direct=False) as src:
        _evict(path)
        assert not src._wants_direct(src.size)
