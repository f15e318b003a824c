"""The shard cache against other local users: a lock held by another process (any user who
can read the cache folder can ``flock`` a cached shard or a lock file) never hangs a read of a
remote dataset, and a folder or shard another user could write in is never read."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.dataset.cache.shardcache import LAYOUT
from tensorfile.sources import CacheWarning
from tensorfile.sources.cache import entries, guards
from tests.helpers.locks import held_lock, within
from tests.helpers.servers import start_range_server

NDArray = np.ndarray[Any, Any]
ROWS = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)


@pytest.fixture(autouse=True)
def _waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guards, "LOCK_WAIT", 0.5)  # (5 s by default)
    monkeypatch.setattr(entries, "WAIT_SECONDS", 0.5)  # (a download's lock: 120 s)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("served")
    dataset.write({"x": ROWS}, str(root / "ds"), batch_size=16)  # two shards
    srv, stop = start_range_server(root, root.parent / "log", etag=True)
    yield f"{srv.url}/ds"
    stop.terminate()


def _rows(url: str, cache: Path) -> tuple[NDArray, list[str]]:
    """Every row of the dataset read through the cache folder ``cache`` (no prefetch), and
    the CacheWarnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with dataset.open(url, cache_dir=str(cache), predownload=0) as ds:
            rows = np.stack([ds[i]["x"] for i in range(len(ds))])
    return rows, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def _shards(cache: Path, suffix: str = ".shard") -> list[Path]:
    return sorted((cache / LAYOUT).glob(f"*{suffix}"))


@pytest.mark.parametrize("lock", ["a cached shard", "the folder's .lock", "a download's lock"])
def test_a_held_lock_never_hangs_a_read(url: str, tmp_path: Path, lock: str) -> None:
    cache = tmp_path / "c"
    rows, said = _rows(url, cache)
    assert np.array_equal(rows, ROWS) and said == [] and len(_shards(cache)) == 2
    if lock == "a cached shard":  # a full hit: only a shared lock of the file to take
        held = _shards(cache)[0]
    elif lock == "the folder's .lock":  # nothing cached: room to reserve under .lock
        for shard in _shards(cache):
            shard.unlink()
        held = cache / ".lock"
    else:  # a shard not cached whose lock file is there: its download's lock
        held = _shards(cache, ".lock")[0]
        held.with_suffix(".shard").unlink()
    held.chmod(0o644)  # (as an older version made a lock file: any user could open it)
    with held_lock(held):
        rows, said = within(60, lambda: _rows(url, cache))
    assert np.array_equal(rows, ROWS)
    assert len(said) == 1 and held.name in said[0] and str(held.parent) in said[0]
    assert "held by another process" in said[0] and "bypasses the cache" in said[0]


def test_a_cache_folder_others_can_write_is_not_used(url: str, tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    rows, said = _rows(url, cache)
    assert np.array_equal(rows, ROWS)
    assert len(said) == 1 and f"the cache folder {cache} is" in said[0]
    assert "mode 0777: writable by every user" in said[0] and "chmod go-w" in said[0]
    assert os.listdir(cache) == []  # nothing written, nothing read


def test_a_cached_shard_others_can_write_is_removed(url: str, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    _rows(url, cache)
    shard = _shards(cache)[0]
    data = bytearray(shard.read_bytes())
    data[-4:] = b"\x7f\x7f\x7f\x7f"  # another user's edit of the last value: a valid file
    shard.write_bytes(bytes(data))
    shard.chmod(0o666)
    rows, said = _rows(url, cache)
    assert np.array_equal(rows, ROWS) and said == []  # removed, downloaded again
    assert shard.stat().st_mode & 0o022 == 0


def test_shards_cached_under_umask_002_are_read_again(url: str, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    old = os.umask(0o002)  # (group-writable files by default: refused if the cache kept it)
    try:
        assert _rows(url, cache)[1] == []
        made = {p: p.stat().st_ino for p in _shards(cache)}
        rows, said = _rows(url, cache)
    finally:
        os.umask(old)
    assert np.array_equal(rows, ROWS) and said == [] and len(made) == 2
    assert {p: p.stat().st_ino for p in _shards(cache)} == made  # hits: nothing fetched again
    assert all(p.stat().st_mode & 0o022 == 0 for p in (cache, *cache.rglob("*")))


def _filled(folder: Path, n: int) -> tuple[entries.FileEntries, list[str]]:
    """A shard cache in ``folder`` holding ``n`` entries of 16 bytes, and their keys."""
    files = entries.FileEntries(str(folder), limit=1 << 20)
    keys = [f"{i:040x}" for i in range(n)]
    for key in keys:
        found = files.fetch(key, 16, lambda fd: (os.pwrite(fd, b"x" * 16, 0), '"v"')[1], where=key)
        assert found is not None
        entries.close_fd(found[1])
    return files, keys


def test_a_user_holding_every_cached_shard_costs_one_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review d03: a user who can read the cache folder holds an exclusive flock on every
    cached shard. The memory of a lock found held was per file, so each shard's open waited
    the whole LOCK_WAIT (1,000 shards: 83 minutes an epoch); it is per folder now."""
    monkeypatch.setattr(guards, "_HELD_AT", {})
    files, keys = _filled(tmp_path / "c", 3)
    holders = [os.open(files.path(key), os.O_RDONLY) for key in keys]  # (read access suffices)
    try:
        for fd in holders:
            fcntl.flock(fd, fcntl.LOCK_EX)  # (another open file: the cache's flock conflicts)
        waited = []
        for key in keys:
            with pytest.raises(guards.LockHeld) as caught:
                files.open_cached(key, 16)
            found = re.search(r"\(waited (\S+) s\)", str(caught.value))
            assert found is not None, caught.value
            waited.append(found.group(1))
    finally:
        for fd in holders:
            os.close(fd)
    assert waited == ["0.5", "0", "0"]  # one wait for the folder, then one try each
    for key in keys:  # let go: read from the cache again
        found = files.open_cached(key, 16)
        assert found is not None
        entries.close_fd(found[1])


def test_the_cache_folders_and_entries_are_yours_alone(tmp_path: Path) -> None:
    """Review d03: in a cache folder its user made readable (mkdir under umask 022), the
    layout folder was 0755 and the entries 0644: any user could open a shard and flock it.
    They are 0700 and 0600 now, and an older cache's 0755 layout folder is narrowed."""
    cache = tmp_path / "c"
    cache.mkdir(mode=0o755)
    files, keys = _filled(cache, 1)
    layout = cache / LAYOUT
    assert stat.S_IMODE(layout.stat().st_mode) == 0o700
    made = [p for p in layout.iterdir()]
    assert {stat.S_IMODE(p.stat().st_mode) for p in made} == {0o600}, made
    layout.chmod(0o755)  # (as an older version made it)
    found = files.open_cached(keys[0], 16)
    assert found is not None
    entries.close_fd(found[1])
    assert stat.S_IMODE(layout.stat().st_mode) == 0o700


_OPEN_AS_NOBODY = """
import os, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        print("opened", path)
    except PermissionError:
        print("refused", path)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="playing another user needs root")
def test_another_user_cannot_open_a_cached_shard(tmp_path: Path) -> None:
    """Review d03, as the reproducer plays it: another user (nobody) cannot even open a
    cached shard of a cache folder its owner made readable to all (0755)."""
    base = Path(tempfile.mkdtemp(prefix="d03-", dir="/tmp"))
    try:
        base.chmod(0o755)
        cache = base / "c"
        cache.mkdir(mode=0o755)
        files, keys = _filled(cache, 1)
        shard = files.path(keys[0])
        out = subprocess.run(
            [sys.executable, "-c", _OPEN_AS_NOBODY, shard, str(cache)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert out.stdout.split("\n")[:2] == [f"refused {shard}", f"opened {cache}"], out.stdout
