"""The shard cache under attack: hostile HTTP servers on 127.0.0.1 (short and long bodies,
an object that changes after the manifest or mid-download, a throttled server for a
SIGKILL mid-download), cache files damaged by another program, unusable cache folders and
limits, and a manifest (with a server that agrees) claiming a huge shard.

Every failure is an error of tensorfile's hierarchy naming the shard or the setting, and
nothing wrong is ever left in the cache folder.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.dataset.cache.shardcache import LAYOUT
from tensorfile.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    TensorFileError,
)
from tests.helpers.hostile_http import HostileServer, Request, parse_range, reply
from tests.helpers.samples import assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]
Hook = Callable[[Request, socket.socket, bytes, tuple[int, int]], bool]


class DatasetServer:
    """An HTTP server of a dataset's files (HEAD, single ranges, a strong ETag), with a
    ``hook`` per file that may answer a range request its own way, and a ``delay`` per
    16 KiB sent (a throttled link)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.hooks: dict[str, Hook] = {}
        self.delay = 0.0
        self.server = HostileServer(self._respond)
        self.url = self.server.url

    def load(self, folder: Path, prefix: str) -> list[str]:
        names = sorted(p.name for p in folder.iterdir())
        for name in names:
            self.files[f"{prefix}/{name}"] = (folder / name).read_bytes()
        return [n for n in names if n.endswith(".safetensors")]

    def gets(self, suffix: str) -> int:
        """GET requests so far for files whose path ends with ``suffix``."""
        return sum(
            1 for r in self.server.requests if r.method == "GET" and r.target.endswith(suffix)
        )

    def _respond(self, request: Request, conn: socket.socket) -> bool:
        path = urllib.parse.unquote(request.target.partition("?")[0]).lstrip("/")
        data = self.files.get(path)
        if data is None:
            conn.sendall(reply(404, {"Content-Length": "0"}))
            return True
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        head = {"ETag": etag, "Accept-Ranges": "bytes"}
        if request.method == "HEAD":
            conn.sendall(reply(200, {**head, "Content-Length": str(len(data))}))
            return True
        rng = parse_range(request.headers.get("range"), len(data))
        if rng is None:
            conn.sendall(reply(200, {**head, "Content-Length": str(len(data))}, data))
            return True
        hook = self.hooks.get(path)
        if hook is not None:
            return hook(request, conn, data, rng)
        start, stop = rng
        headers = {
            **head,
            "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
            "Content-Length": str(stop - start),
        }
        if not self.delay:
            conn.sendall(reply(206, headers, data[start:stop]))
            return True
        conn.sendall(reply(206, headers))
        for at in range(start, stop, 16 << 10):
            if self.server.closed:
                return False
            conn.sendall(data[at : min(stop, at + (16 << 10))])
            time.sleep(self.delay)
        return True

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def http_ds(tmp_path: Path) -> Iterator[tuple[DatasetServer, str, dict[str, NDArray], list[str]]]:
    """A dataset of 4 shards of ~256 KiB served over HTTP: (server, URL, columns, shards)."""
    cols = {"x": np.random.default_rng(5).standard_normal((64, 4096)).astype(np.float32)}
    local = tmp_path / "src"
    dataset.write(cols, local, batch_size=16)
    server = DatasetServer()
    shards = server.load(local, "ds")
    yield server, f"{server.url}/ds", cols, shards
    server.close()


def _left(cache: Path) -> list[str]:
    """Shard and temporary files in the cache folder."""
    folder = cache / LAYOUT
    if not folder.exists():
        return []
    return sorted(n for n in os.listdir(folder) if n.endswith((".shard", ".tmp")))


def _short_body(request: Request, conn: socket.socket, data: bytes, rng: tuple[int, int]) -> bool:
    start, stop = rng
    head = {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
            "Content-Length": str(stop - start)}  # fmt: skip
    conn.sendall(reply(206, head, data[start : start + (stop - start) // 2]))
    return False  # (and the connection closes)


def _long_body(request: Request, conn: socket.socket, data: bytes, rng: tuple[int, int]) -> bool:
    start, stop = rng
    head = {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
            "Content-Length": str(stop - start + 100)}  # fmt: skip
    conn.sendall(reply(206, head, data[start:stop] + b"\x07" * 100))  # 100 bytes more
    return True


@pytest.mark.parametrize("hook", [_short_body, _long_body], ids=["fewer", "more"])
def test_a_server_sending_other_bytes_than_asked_is_an_error(
    http_ds: Any, tmp_path: Path, hook: Hook
) -> None:
    server, url, _, shards = http_ds
    server.hooks[f"ds/{shards[1]}"] = hook
    ds = dataset.open(url, cache_dir=tmp_path / "c")
    ds[0]  # shard 0 is honest
    with pytest.raises(SourceError, match=shards[1]):
        ds[16]
    assert len(_left(tmp_path / "c")) == 1  # shard 0 only: nothing of shard 1
    ds.close()


def test_an_object_replaced_after_the_manifest_is_an_error(http_ds: Any, tmp_path: Path) -> None:
    server, url, _, shards = http_ds
    ds = dataset.open(url, cache_dir=tmp_path / "c")
    name = f"ds/{shards[2]}"
    server.files[name] = server.files[name] + b"\0" * 1000  # longer than the manifest says
    with pytest.raises(FormatError, match=f"manifest says shard {shards[2]} has"):
        ds[32]
    server.files[name] = server.files[name][:-2000]  # shorter
    with pytest.raises(FormatError, match=shards[2]):
        ds[32]
    assert _left(tmp_path / "c") == []
    ds.close()


def test_an_object_changed_mid_download_is_an_error(http_ds: Any, tmp_path: Path) -> None:
    server, url, _, shards = http_ds
    name = f"ds/{shards[0]}"
    seen = [0]

    def changing(request: Request, conn: socket.socket, data: bytes, rng: tuple[int, int]) -> bool:
        seen[0] += 1
        start, stop = rng
        etag = f'"version-{seen[0]}"'  # every reply names another version of the object
        head = {"ETag": etag, "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}",
                "Content-Length": str(stop - start)}  # fmt: skip
        conn.sendall(reply(206, head, data[start:stop]))
        return True

    server.hooks[name] = changing
    ds = dataset.open(url, cache_dir=tmp_path / "c", predownload=0)
    with pytest.raises(SourceError, match=r"(?i)etag|changed|version"):
        ds[0]  # (the first request tells the size and ETag, the next reads the rest)
    assert seen[0] >= 2 and _left(tmp_path / "c") == []
    ds.close()


def test_a_truncated_or_corrupted_cache_file_is_fetched_again(http_ds: Any, tmp_path: Path) -> None:
    server, url, cols, _ = http_ds
    cache = tmp_path / "c"
    with dataset.open(url, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 64))
    files = [cache / LAYOUT / n for n in _left(cache)]
    assert len(files) == 4
    with open(files[0], "r+b") as f:  # another program truncates one
        f.truncate(1000)
    with open(files[1], "r+b") as f:  # and overwrites another's header, same size
        f.write(b"\xff" * 64)
    before = server.gets(".safetensors")
    with dataset.open(url, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 64))
        assert ds.cache is not None and ds.cache.downloads == 2
    assert server.gets(".safetensors") > before
    assert len(_left(cache)) == 4


def test_unusable_cache_folders_and_limits_are_clear_errors(http_ds: Any, tmp_path: Path) -> None:
    _, url, _, _ = http_ds
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(SourceError, match=r"cache_dir .* cannot hold the shard cache"):
        dataset.open(url, cache_dir=a_file)
    with pytest.raises(SourceError, match="cannot hold the shard cache"):
        dataset.open(url, cache_dir=a_file / "below")
    with pytest.raises(SourceError, match="cannot hold the shard cache"):
        dataset.open(url, cache_dir="/proc/no-such-cache")  # not writable, even by root
    for bad in (-5, 0, "12 parsecs", "-1GB", 1.5, True, "20 GB of it"):
        with pytest.raises(InvalidArgumentError, match=r"cache_limit|size"):
            dataset.open(url, cache_dir=tmp_path / "c", cache_limit=bad)  # type: ignore[arg-type]
    for bad_n in (-1, 2.0, "8"):
        with pytest.raises(InvalidArgumentError, match="predownload"):
            dataset.open(url, cache_dir=tmp_path / "c", predownload=bad_n)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="cache_dir"):
        dataset.open(url, cache_dir=7)


def test_a_manifest_and_server_claiming_a_huge_shard_allocate_nothing(
    http_ds: Any, tmp_path: Path
) -> None:
    server, url, _, shards = http_ds
    import json

    doc = json.loads(server.files["ds/dataset_manifest.json"])
    huge = 1 << 50
    doc["shards"][0]["bytes"] = huge
    doc["total_bytes"] = sum(s["bytes"] for s in doc["shards"])
    server.files["ds/dataset_manifest.json"] = json.dumps(doc).encode()
    real = server.files[f"ds/{shards[0]}"]

    def lying(request: Request, conn: socket.socket, data: bytes, rng: tuple[int, int]) -> bool:
        conn.sendall(reply(416, {"Content-Range": f"bytes */{huge}", "Content-Length": "0"}))
        return True

    class Huge(bytes):  # the file the server says it has: 1 PiB (len), a few bytes held
        def __len__(self) -> int:
            return huge

    server.files[f"ds/{shards[0]}"] = Huge(real)
    server.hooks[f"ds/{shards[0]}"] = lying
    ds = dataset.open(url, cache_dir=tmp_path / "c")  # the sizes agree: opened
    with pytest.raises(InvalidArgumentError, match="more than the cache limit"):
        ds[0]
    big = dataset.open(url, cache_dir=tmp_path / "c", cache_limit=1 << 52)
    with pytest.raises(TensorFileError, match="does not fit on the disk"):
        big[0]
    assert _left(tmp_path / "c") == []


_RANK = textwrap.dedent(
    """
    import sys, numpy as np
    from tensorfile import dataset
    ds = dataset.open(sys.argv[1], cache_dir=sys.argv[2])
    total = sum(float(np.sum(s["x"], dtype=np.float64)) for s in ds)
    print(repr(total), ds.cache.downloads, flush=True)
    """
)


def test_ranks_share_a_cache_and_survive_a_sigkill_mid_download(
    http_ds: Any, tmp_path: Path
) -> None:
    server, url, cols, shards = http_ds
    server.delay = 0.05  # ~16 KiB per 50 ms: a shard takes ~0.8 s
    cache = tmp_path / "c"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def rank() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _RANK, url, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    victim = rank()
    deadline = time.monotonic() + 60
    while not any(n.endswith(".tmp") for n in _left(cache)):  # its first download started
        assert victim.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    survivor = rank()  # waits on the shard's lock, or downloads another
    time.sleep(0.3)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    out, err = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, err
    want = float(np.sum(cols["x"], dtype=np.float64))
    total, downloads = out.split()
    assert float(total) == pytest.approx(want, rel=1e-9)
    assert 1 <= int(downloads) <= 4
    left = _left(cache)
    assert not [n for n in left if n.endswith(".tmp")]  # the killed download cleaned up
    assert len(left) == 4
    for name in left:  # no corrupt file: each is a whole shard
        size = (cache / LAYOUT / name).stat().st_size
        assert size in {len(server.files[f"ds/{s}"]) for s in shards}
    server.delay = 0.0
    before = server.gets(".safetensors")
    third = rank()
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert out.split()[1] == "0" and server.gets(".safetensors") == before


def test_two_threads_reading_one_shard_download_it_once(http_ds: Any, tmp_path: Path) -> None:
    server, url, cols, shards = http_ds
    server.delay = 0.01
    ds = dataset.open(url, cache_dir=tmp_path / "c")
    other = dataset.open(url, cache_dir=tmp_path / "c")
    ds.prefetch(ds.shards[:1])  # the background download, and a read that needs it now
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(other[3]["x"]))
    t.start()
    first = ds[2]["x"]
    t.join()
    np.testing.assert_array_equal(first, cols["x"][2])
    np.testing.assert_array_equal(got[0], cols["x"][3])
    assert server.gets(shards[0]) >= 1
    assert ds.cache.downloads + other.cache.downloads == 1  # type: ignore[union-attr]
    assert len(_left(tmp_path / "c")) == 1


_RESERVER = textwrap.dedent(
    """
    import sys, time
    from tensorfile import dataset
    ds = dataset.open(sys.argv[1], cache_dir=sys.argv[2], cache_limit=int(sys.argv[3]))
    shard = ds.shards[1]
    tmp = ds.cache._reserve(ds.cache.key(shard.shard_path, shard.bytes), shard.bytes, set(), False)
    print("reserved", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_downloads_reservation_is_released(http_ds: Any, tmp_path: Path) -> None:
    _, url, cols, _ = http_ds
    cache = tmp_path / "c"
    ds = dataset.open(url, cache_dir=cache, cache_limit=1)  # (only to learn the sizes)
    size = max(s.bytes for s in ds.shards)
    limit = size + size // 2  # room for one shard: the killed one's reservation holds it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _RESERVER, url, str(cache), str(limit)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "reserved"
    assert any(n.endswith(".tmp") for n in _left(cache))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    ds = dataset.open(url, cache_dir=cache, cache_limit=limit)
    np.testing.assert_array_equal(ds[0]["x"], cols["x"][0])  # the dead reservation went
    assert [n for n in _left(cache) if n.endswith(".tmp")] == []
    ds.close()


def _wait_for(pid: int, deadline: float) -> int:
    """The exit status of the child ``pid``, killed (and a failure) past ``deadline``."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"child {pid} hung")
        time.sleep(0.02)


def test_a_child_forked_mid_prefetch_holds_none_of_its_parents_locks(
    http_ds: Any, tmp_path: Path
) -> None:
    server, url, cols, _ = http_ds
    server.delay = 0.03  # a shard takes ~0.5 s: the forks land mid-download
    cache = tmp_path / "c"
    ds = dataset.open(url, cache_dir=cache, predownload=64)
    ds.prefetch(ds.shards)
    deadline = time.monotonic() + 60
    while not any(n.endswith(".tmp") for n in _left(cache)):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    sleeper = os.fork()
    if sleeper == 0:  # a worker that outlives the downloads
        time.sleep(10)
        os._exit(0)
    reader = os.fork()
    if reader == 0:  # a worker reading the shards being downloaded
        try:
            ok = all(np.array_equal(ds[i]["x"], cols["x"][i]) for i in (0, 20, 40, 60))
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)

    def _stuck(*_: object) -> None:  # a regression blocks in flock: fail, do not hang
        raise TimeoutError("the parent is still blocked after 120 s: a child holds its locks")

    previous = signal.signal(signal.SIGALRM, _stuck)
    signal.alarm(120)
    try:
        ds._stream.wait()  # type: ignore[union-attr]
        assert_samples(list(ds), expected_rows(cols, 64))  # the parent never waits for them
        assert os.waitpid(sleeper, os.WNOHANG) == (0, 0)  # (the sleeper still sleeps)
        assert _wait_for(reader, time.monotonic() + 60) == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        for pid in (sleeper, reader):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    assert len(_left(cache)) == 4
    ds.close()


def _plant(path: Path, kind: str, target: Path) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
        (path / "inside").write_text("x")
    else:
        path.symlink_to(target)


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink"])
def test_non_regular_cache_entries_are_removed_and_fetched_again(
    http_ds: Any, tmp_path: Path, kind: str
) -> None:
    _, url, cols, _ = http_ds
    cache = tmp_path / "c"
    with dataset.open(url, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 64))
        c = ds.cache
        assert c is not None
        keys = [c.key(s.shard_path, s.bytes) for s in ds.shards]
    root = cache / LAYOUT
    target = tmp_path / "target"  # a symlink's target: never created, never written
    _plant(root / f"{keys[0]}.shard", kind, target)
    _plant(root / f"{keys[1]}.lock", kind, target)
    (root / f"{keys[2]}.shard").unlink()
    _plant(root / f"{keys[2]}.lock", kind, target)
    _plant(root / ".lock", kind, target)  # (an older version's lock)
    _plant(cache / ".lock", kind, target)  # the folder's lock
    _plant(root / f".{keys[3]}.shard.tensorfile-0123456789ab.tmp", kind, target)
    with dataset.open(url, cache_dir=cache, cache_limit=10 << 20) as ds:
        assert_samples(list(ds), expected_rows(cols, 64))
        assert ds.cache is not None and ds.cache.downloads == 2  # shards 0 and 2
        ds.cache.usage()  # (a sweep: the planted temporary entry goes)
    assert not target.exists()
    for entry in [*root.iterdir(), cache / ".lock"]:
        assert entry.is_file() and not entry.is_symlink(), entry
    assert len(_left(cache)) == 4


def test_a_shard_changed_in_place_or_replaced_under_the_same_manifest(
    http_ds: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, url, cols, shards = http_ds
    cache = tmp_path / "c"
    with dataset.open(url, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 64))
        c = ds.cache
        assert c is not None
        key = c.key(ds.shards[0].shard_path, ds.shards[0].bytes)
    cached = cache / LAYOUT / f"{key}.shard"
    with open(cached, "r+b") as f:  # the last float of row 15, same size, header intact
        f.seek(-4, os.SEEK_END)
        f.write(np.float32(1234.5).tobytes())
    with dataset.open(url, cache_dir=cache) as ds:  # by default: size and header only
        assert ds[15]["x"][-1] == np.float32(1234.5)
    monkeypatch.setenv("TENSORFILE_CACHE_VERIFY", "1")
    with dataset.open(url, cache_dir=cache) as ds:  # the checksum differs: fetched again
        np.testing.assert_array_equal(ds[15]["x"], cols["x"][15])
        assert ds.cache is not None and ds.cache.downloads == 1
    name = f"ds/{shards[0]}"  # the object replaced out of band: same size, same manifest
    data = bytearray(server.files[name])
    data[-4:] = np.float32(-7.0).tobytes()
    server.files[name] = bytes(data)
    with dataset.open(url, cache_dir=cache) as ds:  # its ETag differs: fetched again
        assert ds[15]["x"][-1] == np.float32(-7.0)
        assert ds.cache is not None and ds.cache.downloads == 1
    with dataset.open(url, cache_dir=cache) as ds:  # and now it matches: a hit
        assert ds[15]["x"][-1] == np.float32(-7.0)
        assert ds.cache is not None and ds.cache.downloads == 0


def test_a_store_error_is_raised_as_the_store_said(http_ds: Any, tmp_path: Path) -> None:
    server, url, _, shards = http_ds

    def forbidden(request: Request, conn: socket.socket, data: bytes, rng: tuple[int, int]) -> bool:
        conn.sendall(reply(403, {"Content-Length": "0"}))
        return True

    server.hooks[f"ds/{shards[1]}"] = forbidden
    ds = dataset.open(url, cache_dir=tmp_path / "c")
    with pytest.raises(SourceError, match="403") as info:
        ds[16]
    assert "the shard cache" not in str(info.value)
    ds.close()


def test_limits_say_what_they_accept_and_a_bytes_cache_dir_works(
    http_ds: Any, tmp_path: Path
) -> None:
    _, url, cols, _ = http_ds
    for bad in (True, 1.5, b"20GB"):
        with pytest.raises(InvalidArgumentError, match=r"cache_limit .*size text such as"):
            dataset.open(url, cache_dir=tmp_path / "c", cache_limit=bad)  # type: ignore[arg-type]
    with dataset.open(url, cache_dir=os.fsencode(tmp_path / "b")) as ds:
        np.testing.assert_array_equal(ds[3]["x"], cols["x"][3])
        assert ds.cache is not None and ds.cache.config.folder == str(tmp_path / "b")
    mode = (tmp_path / "b" / ".lock").stat().st_mode & 0o777  # (the folder's one lock)
    assert mode & 0o133 == 0  # not executable, not writable by others
