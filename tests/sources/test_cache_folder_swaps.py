"""The cache folder's own folders swapped for symlinks while tensorfile uses them (another
process renames ``chunks-v1/<key>`` or ``shards-v1`` away and puts a link to an outside
folder in its place): nothing is ever created, renamed or removed outside the cache folder.

Each swap is made at the exact point where a path-based write would follow it (between the
folder's check and its use), through the code's own seams, and a bounded real race swaps
a file's chunk folder again and again while sources read through the cache."""

from __future__ import annotations

import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tensorfile.sources import CachedSource, open_path
from tensorfile.sources.cache import _chunkcache, entries, folder
from tensorfile.sources.cache.entries import FileEntries
from tensorfile.sources.cache.files import close_fd
from tensorfile.sources.cache.folder import CHUNKS, FILES, CacheFolder
from tensorfile.sources.cache.settings import CACHE_CHUNK_ENV, CACHE_DIR_ENV

CHUNK = 64 << 10
DATA = bytes(range(256)) * (8 * CHUNK // 256)  # 8 chunks


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_CHUNK_ENV, "64KiB")
    fsspec.filesystem("memory").pipe("/swaps/f.bin", DATA)


def _swap(real: Path, link_to: Path, away: Path) -> None:
    """What the other process does: the real folder renamed away, a symlink in its place."""
    os.rename(real, away)
    os.symlink(link_to, real)


def _swapping(seam: Callable[..., Any], swap: Callable[[], None]) -> Callable[..., Any]:
    """``seam`` that makes the swap (once) right before it runs."""
    done: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            swap()
        return seam(*args, **kwargs)

    return wrapped


def _open(cache: Path) -> CachedSource:
    src = open_path("memory://swaps/f.bin", cache_dir=str(cache))
    assert isinstance(src, CachedSource)
    return src


@pytest.mark.parametrize("seam", ["write_info", "new_temp"])
def test_a_chunk_folder_swapped_after_its_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seam: str
) -> None:
    cache, victim = tmp_path / "cache", tmp_path / "victim"
    cache.mkdir()
    victim.mkdir()
    with _open(cache) as src:
        assert src.read(0, 10) == DATA[:10]  # (chunk 0 written: the file's folder is there)
        key = Path(src.folder)
        # the swap lands after the reserve's scan healed the folder, right before the first
        # file of the next chunks is made in it
        swap = lambda: _swap(key, victim, tmp_path / "away")  # noqa: E731
        monkeypatch.setattr(_chunkcache, seam, _swapping(getattr(_chunkcache, seam), swap))
        assert src.read(CHUNK + 1, 2 * CHUNK) == DATA[CHUNK + 1 : 3 * CHUNK + 1]
        assert key.is_symlink()  # (the swap happened)
    assert os.listdir(victim) == []  # nothing written outside the cache folder
    # the chunks went to the folder the cache had open (moved away by the other process)
    assert {"1.chunk", "2.chunk", "3.chunk"} <= set(os.listdir(tmp_path / "away"))
    monkeypatch.undo()
    monkeypatch.setenv(CACHE_CHUNK_ENV, "64KiB")
    with _open(cache) as src:  # the link is healed: a real folder, cached into again
        assert src.read(0, len(DATA)) == DATA
        assert not key.is_symlink() and src.cache_stats.chunks_written == 8
    assert os.listdir(victim) == []


def test_the_shard_folder_swapped_after_its_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, victim = tmp_path / "cache", tmp_path / "victim"
    victim.mkdir()
    files = FileEntries(str(cache), limit=1 << 20)
    files.prepare()
    swap = lambda: _swap(cache / FILES, victim, tmp_path / "away")  # noqa: E731
    monkeypatch.setattr(entries, "new_temp", _swapping(entries.new_temp, swap))

    def download(fd: int) -> str:
        os.pwrite(fd, b"0123456789", 0)
        return '"v1"'

    found = files.fetch("ab" * 20, 10, download, where="swaps")
    assert os.listdir(victim) == []  # no temporary file, record or shard written outside
    assert (cache / FILES).is_dir() and not (cache / FILES).is_symlink()  # (healed)
    assert {"ab" * 20 + ".shard", "ab" * 20 + ".sum"} <= set(os.listdir(tmp_path / "away"))
    if found is not None:  # (the download went with the folder: fetched again)
        close_fd(found[1])
    found = files.fetch("ab" * 20, 10, download, where="swaps")
    assert found is not None and Path(found[0]).read_bytes() == b"0123456789"
    close_fd(found[1])
    assert os.listdir(victim) == []


def _outside_folder(tmp_path: Path) -> Path:
    """A folder outside the cache that looks like a file's chunk folder, with a folder named
    like a chunk (what a scan removes when it finds one in the cache)."""
    victim = tmp_path / "victim"
    (victim / "0.chunk").mkdir(parents=True)
    (victim / "0.chunk" / "keep").write_bytes(b"outside")
    (victim / "1.chunk").write_bytes(b"x" * 1000)
    return victim


def _chunk_folder(cache: Path) -> Path:
    key = cache / CHUNKS / ("cd" * 20)
    key.mkdir(parents=True)
    (key / "0.chunk").write_bytes(b"x" * 1000)
    (key / "1.chunk").write_bytes(b"x" * 1000)
    return key


def test_a_scan_never_lists_or_heals_through_a_swapped_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    key, victim = _chunk_folder(cache), _outside_folder(tmp_path)
    listing = folder._listing

    def listed_then_swapped(where: Any) -> Any:
        found = listing(where)
        if any(e.name == key.name for e in found) and not key.is_symlink():
            _swap(key, victim, tmp_path / "away")  # (after the layout folder was listed)
        return found

    monkeypatch.setattr(folder, "_listing", listed_then_swapped)
    CacheFolder(str(cache), limit=1 << 20).sweep()
    assert (victim / "0.chunk" / "keep").read_bytes() == b"outside"
    assert (victim / "1.chunk").exists()
    assert not key.is_symlink()  # (the link itself is removed, never followed)


def test_an_eviction_never_removes_through_a_swapped_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    key, victim = _chunk_folder(cache), _outside_folder(tmp_path)
    swap = lambda: _swap(key, victim, tmp_path / "away")  # noqa: E731
    monkeypatch.setattr(folder, "_evict", _swapping(folder._evict, swap))  # (after the scan)
    assert CacheFolder(str(cache), limit=2500).reserve(2000, lambda: "room") is None
    assert (victim / "1.chunk").exists() and (victim / "0.chunk" / "keep").exists()
    assert sorted(os.listdir(tmp_path / "away")) == ["0.chunk", "1.chunk"]


def test_a_chunk_folder_swapped_again_and_again_while_sources_read(tmp_path: Path) -> None:
    # the hostile reviewer's race (n07), bounded: another thread swaps the file's chunk
    # folder for a symlink to an outside folder in a tight loop while fresh sources read
    cache, victim = tmp_path / "cache", tmp_path / "victim"
    cache.mkdir()
    victim.mkdir()
    with _open(cache) as src:
        src.read(0, 10)
        key = src.folder
    stop = threading.Event()

    def swapper() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if os.path.isdir(key) and not os.path.islink(key):
                    os.rename(key, f"{key}.{n}")
                    shutil.rmtree(f"{key}.{n}", ignore_errors=True)
                os.symlink(victim, key)
            except OSError:
                pass
            time.sleep(0.0005)  # (the link stays a moment: the reviewer's repro's rhythm)
            try:
                os.unlink(key)
            except OSError:
                pass

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a write that loses the race warns: fine)
            for _ in range(40):
                with _open(cache) as src:
                    for k in range(8):
                        assert src.read(k * CHUNK + 1, 10) == DATA[k * CHUNK + 1 : k * CHUNK + 11]
                assert os.listdir(victim) == []
    finally:
        stop.set()
        thread.join()
    assert os.listdir(victim) == []


def test_threads_of_one_process_queue_for_the_folder_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread waits for its sibling's hold of the folder's lock however long it takes,
    instead of polling the ``flock`` and giving up after LOCK_WAIT as it does for another
    process (the polling's back-off held each of a load's 16 reading threads up to 50 ms per
    chunk reservation: a cold cached load took a third longer)."""
    from tensorfile.sources.cache import guards

    monkeypatch.setattr(guards, "LOCK_WAIT", 0.05)
    cache = CacheFolder(str(tmp_path), limit=1 << 20)
    held, results = threading.Event(), []

    def sibling() -> None:
        held.wait()
        results.append(cache.reserve(10, lambda: "room"))

    t = threading.Thread(target=sibling)
    t.start()
    with cache.locked():
        held.set()
        time.sleep(0.3)  # (the sibling, waiting, would have given up after 0.05 s)
    t.join(10)
    assert results == ["room"]


def _read_within(src: CachedSource, reads: list[tuple[int, int]], seconds: float) -> list[bytes]:
    """``src.read`` of each ``(offset, length)`` on a thread; a read still running after
    ``seconds`` fails the test (it spins: the thread is left behind, a daemon)."""
    got: list[bytes] = []
    failed: list[BaseException] = []

    def job() -> None:
        try:
            for offset, length in reads:
                got.append(src.read(offset, length))
        except BaseException as exc:  # (raised in the test's thread below)
            failed.append(exc)

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"a read still runs after {seconds} s: {len(got)} done"
    if failed:
        raise failed[0]
    return got


def test_a_chunk_folder_moved_away_and_replaced_while_a_source_holds_it(tmp_path: Path) -> None:
    # review 35 j01: the folder a source holds moved away, a copy holding the next chunk put
    # at its path: reads looked in the held folder, the "is it there?" check through the
    # path, and the read of that chunk spun for ever
    full, cache = tmp_path / "full", tmp_path / "cache"
    with _open(full) as src:
        src.read(0, len(DATA))
    with _open(cache) as src:
        assert src.read(0, 10) == DATA[:10]
        assert src.read(CHUNK, 10) == DATA[CHUNK : CHUNK + 10]  # (the folder now held)
        key = Path(src.folder)
        os.rename(key, tmp_path / "moved-away")
        shutil.copytree(full / CHUNKS / key.name, key)
        assert _read_within(src, [(2 * CHUNK, 10)], 30) == [DATA[2 * CHUNK : 2 * CHUNK + 10]]
        assert src.cache_stats.hits == 1  # (read from the folder at the path now)


def test_chunks_moved_away_by_hand_while_a_source_reads(tmp_path: Path) -> None:
    # review 35 j01b: `mv cache/chunks-v1 trash/` while a job has a cached source open: the
    # next chunk is fetched into a new folder at the old path; reading it again spun
    cache = tmp_path / "cache"
    with _open(cache) as src:
        src.read(0, 10)
        src.read(CHUNK, 10)
        os.rename(cache / CHUNKS, tmp_path / "trash")
        want = DATA[2 * CHUNK : 2 * CHUNK + 10]
        assert _read_within(src, [(2 * CHUNK, 10), (2 * CHUNK, 10)], 30) == [want, want]
        assert (src.cache_stats.misses, src.cache_stats.hits) == (3, 1)
        assert (Path(src.folder) / "2.chunk").is_file()


def test_a_chunk_the_cache_may_neither_read_nor_remove_is_fetched_not_spun_on(
    tmp_path: Path, stuck: Callable[..., None]
) -> None:
    # a chunk file every user could write is never read (and removed); one that cannot be
    # removed either was found by every look for the chunk and never read: the read must
    # fetch it after a few looks (review 35 j01's bound), never spin
    cache = tmp_path / "cache"
    with _open(cache) as src:
        src.read(0, len(DATA))
        planted = Path(src.folder) / "3.chunk"
    planted.unlink()
    stuck(planted, file=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a folder that cannot be written, as non-root)
        with _open(cache) as src:
            got = _read_within(src, [(0, len(DATA))], 30)
            assert got == [DATA] and src.cache_stats.misses == 1
