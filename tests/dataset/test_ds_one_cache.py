"""One cache folder, one limit (issues 34 and 35): remote safetensors loads (chunks) and
remote datasets (whole shards) fill the same folder over real servers on 127.0.0.1 (nginx,
moto), and the folder never holds more than ``$TENSORFILE_CACHE_SIZE``; a dataset's shards
are stored once (never also as chunks); anything planted at any entry's name is healed, the
load finishing in seconds; a rotated session token finds the shards it cached."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as ref

from tensorfile import dataset
from tensorfile.safetensors.numpy import load_file, save_file
from tensorfile.sources import CacheWarning, MemoryStore, Store
from tensorfile.sources.cache.folder import CacheFolder
from tensorfile.sources.cache.settings import (
    CACHE_CHUNK_ENV,
    CACHE_DIR_ENV,
    CACHE_SIZE_ENV,
    CACHE_VERIFY_ENV,
)
from tests.helpers.samples import assert_samples, expected_rows
from tests.helpers.servers import Server, start_nginx

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
LIMIT = 3 * MIB


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Any]]]:
    """nginx serving three checkpoints of ~1.2 MiB (3.6 MiB: more than the limit) and a
    dataset of 12 shards of ~290 KiB (3.4 MiB: more than the limit too)."""
    server, proc = start_nginx(tmp_path_factory.mktemp("nginx-one-cache"))
    rng = np.random.default_rng(34)
    for name in ("a", "b", "c"):
        tensors = {f"w{i}": rng.standard_normal((300, 256), dtype=np.float32) for i in range(4)}
        save_file(tensors, server.root / f"{name}.safetensors")
    cols = {"x": rng.standard_normal((96, 9000)).astype(np.float32) // 1}
    dataset.write(cols, server.root / "ds", batch_size=8)
    yield server, cols
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The one cache folder, set through the environment with its one limit."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(folder))
    monkeypatch.setenv(CACHE_SIZE_ENV, str(LIMIT))
    monkeypatch.setenv(CACHE_CHUNK_ENV, "256KiB")
    monkeypatch.delenv(CACHE_VERIFY_ENV, raising=False)
    return folder


def _total(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` now (files removed meanwhile skipped)."""
    total = 0
    for top, _, files in os.walk(folder):
        for f in files:
            try:
                st = os.lstat(os.path.join(top, f))
            except OSError:
                continue
            if not os.path.islink(os.path.join(top, f)):
                total += st.st_size
    return total


def _chunks(folder: Path) -> list[Path]:
    return list(folder.glob("chunks-v1/*/*.chunk"))


def _shards(folder: Path) -> list[Path]:
    return list(folder.glob("shards-v1/*.shard"))


def _load(server: Server, name: str) -> None:
    got = load_file(f"{server.url}/{name}.safetensors")
    want = ref.load_file(str(server.root / f"{name}.safetensors"))
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def _epoch(server: Server, cols: dict[str, Any], limit: int = LIMIT) -> None:
    with dataset.open(f"{server.url}/ds") as ds:
        assert ds.cache is not None and ds.cache.config.limit == limit
        assert_samples(list(ds), expected_rows(cols, 96))


def test_loads_and_epochs_share_one_folder_under_one_limit(
    served: tuple[Server, dict[str, Any]], cache: Path
) -> None:
    server, cols = served
    peak = [0]
    stop = threading.Event()
    folder = CacheFolder(str(cache), LIMIT)
    cache.mkdir()

    def watch() -> None:  # at every moment, not only between the steps: a walk of the
        # folder under its lock sees one moment (every write that adds bytes holds it)
        while not stop.is_set():
            with folder.locked():
                peak[0] = max(peak[0], _total(cache))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    steps = [
        lambda: _load(server, "a"),
        lambda: _epoch(server, cols),
        lambda: _load(server, "b"),
        lambda: _load(server, "c"),
        lambda: _epoch(server, cols),
        lambda: _load(server, "a"),
        lambda: _epoch(server, cols),
        lambda: _load(server, "b"),
    ]
    kinds_seen = set()
    try:
        for step in steps:
            step()
            assert _total(cache) <= LIMIT
            kinds_seen |= {"chunks"} if _chunks(cache) else set()
            kinds_seen |= {"shards"} if _shards(cache) else set()
            if _chunks(cache) and _shards(cache):
                kinds_seen.add("both")
    finally:
        stop.set()
        watcher.join()
    assert kinds_seen == {"chunks", "shards", "both"}  # (the two kinds did share the folder)
    assert 2 * MIB < peak[0] <= LIMIT


def test_an_epoch_through_the_cache_dir_variable_stores_each_shard_once(
    served: tuple[Server, dict[str, Any]], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cols = served
    monkeypatch.setenv(CACHE_SIZE_ENV, "64MiB")
    _epoch(server, cols, 64 * MIB)
    assert len(_shards(cache)) == 12
    assert _chunks(cache) == []  # (issue 35: the shard downloads filled the chunks too)
    shard_bytes = sum(p.stat().st_size for p in _shards(cache))
    assert shard_bytes == sum(p.stat().st_size for p in (server.root / "ds").glob("*.safetensors"))
    assert _total(cache) < shard_bytes + (64 << 10)  # (records and locks: small)


_PLANTED = textwrap.dedent(
    """
    import os, shutil, socket, sys
    import numpy as np
    from tensorfile import dataset
    from tensorfile.safetensors.numpy import load_file

    url, cache, kind, fifo, want_ckpt, want_ds = sys.argv[1:]
    chunks = os.path.join(cache, "chunks-v1")
    (folder,) = [os.path.join(chunks, k) for k in os.listdir(chunks) if len(k) == 40
                 and '/a.safetensors"' in open(os.path.join(chunks, k, "info.json")).read()]
    shards = os.path.join(cache, "shards-v1")
    with dataset.open(url + "/ds") as ds:
        keys = [ds.cache.key(s.shard_path, s.bytes) for s in ds.shards]

    def plant(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            os.mkdir(path)
            open(os.path.join(path, "inside"), "w").close()
        elif kind == "symlink":  # to a FIFO: followed, an open would block
            os.symlink(fifo, path)
        else:
            here = os.getcwd()
            os.chdir(os.path.dirname(path))  # (a socket's name is at most 108 bytes)
            try:
                socket.socket(socket.AF_UNIX).bind(os.path.basename(path))
            finally:
                os.chdir(here)

    def checkpoint():
        got = load_file(url + "/a.safetensors")
        return b"".join(got[k].tobytes() for k in sorted(got))

    def epoch():
        with dataset.open(url + "/ds") as ds:
            return b"".join(np.ascontiguousarray(s["x"]).tobytes() for s in ds)

    def digest(data):
        import hashlib
        return hashlib.sha256(data).hexdigest()

    steps = [
        ("a chunk", [os.path.join(folder, "0.chunk")], [], checkpoint),
        ("info.json", [os.path.join(folder, "info.json")], [os.path.join(folder, "1.chunk")],
         checkpoint),
        ("a chunk's temporary file",
         [os.path.join(folder, ".2.chunk.tensorfile-0123456789ab.tmp")],
         [os.path.join(folder, "2.chunk")], checkpoint),
        ("the folder's lock", [os.path.join(cache, ".lock")], [], checkpoint),
        ("an old .swept marker and lock",
         [os.path.join(chunks, ".swept"), os.path.join(chunks, ".lock")],
         [os.path.join(folder, "3.chunk")], checkpoint),
        ("a shard", [os.path.join(shards, keys[0] + ".shard")], [], epoch),
        ("a record", [os.path.join(shards, keys[1] + ".sum")], [], epoch),
        ("a shard's lock", [os.path.join(shards, keys[2] + ".lock")],
         [os.path.join(shards, keys[2] + ".shard")], epoch),
        ("a shard's temporary file and the old lock",
         [os.path.join(shards, "." + keys[3] + ".shard.tensorfile-0123456789ab.tmp"),
          os.path.join(shards, ".lock")],
         [os.path.join(shards, keys[3] + ".shard")], epoch),
    ]
    for what, planted, removed, load in steps:
        print(what, flush=True)
        for p in planted:
            plant(p)
        for p in removed:
            os.unlink(p)
        got = digest(load())
        assert got == (want_ckpt if load is checkpoint else want_ds), what
        for p in planted:
            assert not os.path.lexists(p) or (os.path.isfile(p) and not os.path.islink(p)), p
    assert os.path.exists(fifo) and not os.path.isfile(fifo)  # (never followed, never replaced)
    print("ok", flush=True)
    """
)


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink", "socket"])
def test_anything_planted_at_any_entry_name_is_healed_in_seconds(
    served: tuple[Server, dict[str, Any]], cache: Path, kind: str, tmp_path: Path
) -> None:
    server, cols = served
    _load(server, "a")
    _epoch(server, cols)
    got = load_file(f"{server.url}/a.safetensors")
    want_ckpt = hashlib.sha256(b"".join(got[k].tobytes() for k in sorted(got))).hexdigest()
    want_ds = hashlib.sha256(cols["x"].tobytes()).hexdigest()
    fifo = tmp_path / "elsewhere.fifo"
    os.mkfifo(fifo)
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
        CACHE_VERIFY_ENV: "1",
    }  # fmt: skip  (a record is read: verify)
    args = [server.url, str(cache), kind, str(fifo), want_ckpt, want_ds]
    try:
        out = subprocess.run([sys.executable, "-c", _PLANTED, *args], env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"a load hung on a planted {kind}; the steps it began: {stdout!r}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.split()[-1] == "ok"


def test_a_rotated_session_token_reuses_the_cached_shards(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    cols = {"x": np.arange(32 * 16, dtype=np.float32).reshape(32, 16)}
    dataset.write(cols, url, batch_size=8, storage_options=s3.options)
    cache = tmp_path / "cache"
    first = {**s3.options, "client_kwargs": {"aws_session_token": "session-token-one"}}
    with dataset.open(url, storage_options=first, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 32))
        assert ds.cache is not None and ds.cache.downloads == 4
    rotated = {**s3.options, "client_kwargs": {"aws_session_token": "session-token-two"}}
    with s3.recording() as requests:
        with dataset.open(url, storage_options=rotated, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 32))
            assert ds.cache is not None and ds.cache.downloads == 0
    assert s3.bytes_read(requests, ".safetensors") == {}
    for p in cache.rglob("*"):
        for secret in ("session-token", "testing"):
            assert secret not in p.name
            if p.is_file():
                assert secret.encode() not in p.read_bytes()


def test_a_folder_left_by_an_older_version_is_counted_and_evicted(
    served: tuple[Server, dict[str, Any]], cache: Path
) -> None:
    server, cols = served
    old_chunks = cache / "chunks-v1" / ("ab" * 20)
    old_chunks.mkdir(parents=True)
    (old_chunks / "info.json").write_text("{}")
    for i in range(4):  # 4 x 512 KiB of chunks of a file no one loads any more
        (old_chunks / f"{i}.chunk").write_bytes(b"\0" * (512 << 10))
    shards = cache / "shards-v1"
    shards.mkdir()
    for i in range(2):  # 2 x 512 KiB of shards under keys of the older version
        (shards / f"{i:040x}.shard").write_bytes(b"\1" * (512 << 10))
        (shards / f"{i:040x}.sum").write_text('{"xxh3": "xxh3:0", "etag": null}')
        (shards / f"{i:040x}.lock").write_bytes(b"")
    for marker in ("chunks-v1/.lock", "chunks-v1/.swept", "shards-v1/.lock"):
        (cache / marker).write_bytes(b"")
    past = 1_000_000_000  # (used long ago: least recently)
    for p in cache.rglob("*"):
        os.utime(p, (past, past))
    assert _total(cache) > 2 * MIB
    _epoch(server, cols)
    _load(server, "a")
    assert _total(cache) <= LIMIT
    for marker in ("chunks-v1/.lock", "chunks-v1/.swept", "shards-v1/.lock"):
        assert not (cache / marker).exists()
    assert not (shards / f"{0:040x}.shard").exists()  # the oldest went first


@pytest.mark.parametrize("kind", ["fifo", "file", "link"])
def test_a_planted_shard_layout_folder_is_healed(tmp_path: Path, kind: str) -> None:
    """shards-v1 planted as a FIFO, a file or a symlink (to a file, and to a folder outside
    the cache): a remote dataset read through the cache removes it (never following it),
    caches its shards in a real folder and touches nothing outside."""
    cols = {"x": np.arange(64, dtype=np.float32).reshape(16, 4)}
    url = f"memory://planted-shards-{kind}/ds"
    dataset.write(cols, url, batch_size=4)
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    layout = cache / "shards-v1"
    if kind == "fifo":
        os.mkfifo(layout)
    elif kind == "file":
        layout.write_text("x")
    else:
        os.symlink(outside, layout)
    for _ in range(2):
        with dataset.open(url, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 16))
    assert sorted(os.listdir(outside)) == ["keep.txt"]
    assert layout.is_dir() and not layout.is_symlink()
    assert len(_shards(cache)) == 4


def test_an_s3_endpoint_from_the_environment_is_part_of_the_shard_key(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset read through ``$AWS_ENDPOINT_URL`` (no endpoint option) caches its shards
    under that endpoint: another endpoint (here another name of the same server) never
    gets them."""
    url = s3.url(s3.bucket(), "ds")
    cols = {"x": np.arange(16 * 4, dtype=np.float32).reshape(16, 4)}
    dataset.write(cols, url, batch_size=4, storage_options=s3.options)
    options = {k: v for k, v in s3.options.items() if k != "endpoint_url"}
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    cache = tmp_path / "cache"
    other = s3.endpoint.replace("127.0.0.1", "localhost")
    for endpoint, downloads in ((s3.endpoint, 4), (s3.endpoint, 0), (other, 4)):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        with dataset.open(url, storage_options=options, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 16))
            assert ds.cache is not None and ds.cache.downloads == downloads


def _twin_datasets(fs: Any, first: str, second: str, tmp_path: Path) -> None:
    """One dataset of zeros at ``first``; at ``second`` its copy (the same manifest, shards
    of the same names and sizes) whose tensor bytes are 666s."""
    local = tmp_path / "ds"
    dataset.write({"x": np.zeros((8, 2), np.float32)}, local, batch_size=4)
    for p in local.iterdir():
        if p.is_file():
            data = p.read_bytes()
            fs.pipe(f"{first}/{p.name}", data)
            if p.suffix == ".safetensors":
                body = 8 + int.from_bytes(data[:8], "little")
                data = data[:body] + np.full((len(data) - body) // 4, 666, np.float32).tobytes()
            fs.pipe(f"{second}/{p.name}", data)


@pytest.mark.parametrize("where", ["s3", "memory"])
def test_locations_differing_in_a_hash_or_query_never_share_cached_shards(
    s3: Any, tmp_path: Path, where: str
) -> None:
    """Review j22: on ``s3://`` and ``memory://`` a ``#`` or ``?`` is part of an object's
    name, so ``ds`` and ``ds#b`` are two datasets; their shards were keyed by the redacted
    URL (no ``#b``), and after a read of ``ds#b`` a read of ``ds`` gave ``ds#b``'s values."""
    import fsspec

    if where == "s3":
        fs, options, base = s3.fs, s3.options, s3.bucket()
    else:
        fs, options, base = fsspec.filesystem("memory"), {}, f"/j22-{tmp_path.name}"
    suffixes = ["#b", "?b"]
    for suffix in suffixes:
        _twin_datasets(fs, f"{base}/ds", f"{base}/ds{suffix}", tmp_path / suffix[0])
    cache = tmp_path / "cache"
    url = f"{where}://{base.lstrip('/')}/ds"
    for suffix in suffixes:
        with dataset.open(url + suffix, storage_options=options, cache_dir=cache) as ds:
            assert {float(np.asarray(s["x"]).max()) for s in ds} == {666.0}
    with dataset.open(url, storage_options=options, cache_dir=cache) as ds:
        assert {float(np.asarray(s["x"]).max()) for s in ds} == {0.0}
        assert ds.cache is not None and ds.cache.downloads == 2


def _cached_once(cols: dict[str, Any], url: str, tmp_path: Path) -> Path:
    """``cols`` written as a dataset at ``url`` and read once through a new cache folder in
    ``tmp_path`` (every shard cached); the folder."""
    dataset.write(cols, url, batch_size=4)
    cache = tmp_path / "cache"
    with dataset.open(url, cache_dir=cache) as ds:
        assert_samples(list(ds), expected_rows(cols, 16))
    return cache


@pytest.mark.parametrize("kind", ["deep", "stuck"])
def test_a_folder_planted_at_a_shard_name_is_removed_or_bypassed(
    tmp_path: Path, kind: str, request: Any
) -> None:
    # review 35 j08b: a folder nested past the recursion limit (healing it with shutil.rmtree
    # raised a RecursionError) or one the cache cannot remove (a SourceError) failed every
    # read of the dataset through that cache folder
    cols = {"x": np.arange(64, dtype=np.float32).reshape(16, 4)}
    url = f"memory://{kind}-shard/ds"
    cache = _cached_once(cols, url, tmp_path)
    planted = sorted((cache / "shards-v1").glob("*.shard"))[0]
    planted.unlink()
    request.getfixturevalue(kind)(planted)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with dataset.open(url, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 16))
            downloads = ds.cache.downloads if ds.cache is not None else None
    said = [str(w.message) for w in seen if issubclass(w.category, CacheWarning)]
    if kind == "stuck":
        assert said and all("cannot be removed" in m for m in said), said
        return
    assert said == [] and downloads == 1
    assert planted.is_file() and not planted.is_symlink()


class _Unlocated(MemoryStore):
    """A store that does not say where its files live (``Store.location``'s default), as a
    user's ``Store`` subclass may be."""

    location = Store.location  # type: ignore[assignment]


@pytest.mark.parametrize("kind", [MemoryStore, _Unlocated])
def test_two_stores_of_one_name_never_share_cached_shards(
    tmp_path: Path, kind: type[MemoryStore]
) -> None:
    """Review m02: every ``MemoryStore``'s location was its URL, ``<memory-store>``, and so
    any ``Store`` subclass's that did not say one: two datasets with the same manifest in two
    such stores, read through one cache folder, gave the second the first one's shards.
    Each ``MemoryStore`` is its own location now; a store without one is read without the
    shard cache (a ``CacheWarning``)."""
    stores = {"a": kind(), "b": kind()}

    class Pipe:  # (_twin_datasets writes through fsspec's pipe)
        def pipe(self, path: str, data: bytes) -> None:
            which, _, name = path.partition("/")
            stores[which].write_atomic(name, data)

    _twin_datasets(Pipe(), "a", "b", tmp_path)
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for which, want in (("a", 0.0), ("b", 666.0), ("a", 0.0)):
            with dataset.open(stores[which], cache_dir=cache) as ds:
                assert {float(np.asarray(s["x"]).max()) for s in ds} == {want}
                assert (ds.cache is None) == (kind is _Unlocated)
    said = [str(w.message) for w in seen if issubclass(w.category, CacheWarning)]
    if kind is _Unlocated:
        assert len(said) == 3 and all("location() is None" in m for m in said), said
        assert _shards(cache) == []
    else:
        assert said == [] and len(_shards(cache)) == 4


@pytest.mark.parametrize("where", [".lock", "shard"])
def test_a_file_that_cannot_be_removed_at_a_shard_cache_name_is_bypassed(
    tmp_path: Path, where: str, stuck: Any
) -> None:
    """Review m12: an immutable regular file (``chattr +i``) at the cache folder's ``.lock``
    (it cannot be opened to lock) or at a shard's name (of the wrong size: a download cannot
    be renamed over it) failed every read of the dataset with a ``SourceError``; it is a
    stuck entry now: the read goes on without the cache, with a ``CacheWarning``."""
    cols = {"x": np.arange(64, dtype=np.float32).reshape(16, 4)}
    url = f"memory://stuck-file-{tmp_path.name}/ds"
    cache = _cached_once(cols, url, tmp_path)
    if where == ".lock" and os.geteuid() != 0:
        pytest.skip("only root makes a lock file that cannot be opened (chattr +i)")
    planted = cache / ".lock" if where == ".lock" else sorted(_shards(cache))[0]
    planted.unlink()
    stuck(planted, file=True)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with dataset.open(url, cache_dir=cache) as ds:
                assert_samples(list(ds), expected_rows(cols, 16))
        said = [str(w.message) for w in seen if issubclass(w.category, CacheWarning)]
        assert len(said) == 1 and "cannot be removed" in said[0], said


@pytest.mark.parametrize("where", [".lock", "KEY.lock", "KEY.shard"])
def test_a_hard_link_at_an_entry_name_never_changes_the_file_outside(
    tmp_path: Path, where: str
) -> None:
    """Review m16: a hard link at the cache folder's ``.lock`` to a file outside the cache
    was opened as the lock, made 0600 (the fix of a lock an older version made 0644) and
    touched: the outside file's mode and time changed. A name with other hard links is a
    damaged entry now: removed and made afresh, the other file never changed."""
    cols = {"x": np.arange(64, dtype=np.float32).reshape(16, 4)}
    url = f"memory://hard-link-{tmp_path.name}/ds"
    cache = _cached_once(cols, url, tmp_path)
    shard = sorted(_shards(cache))[0]
    outside = tmp_path / "public.html"
    outside.write_bytes(shard.read_bytes())  # (the shard's size: it would be read)
    outside.chmod(0o644)
    os.utime(outside, (1e9, 1e9))
    planted = cache / where.replace("KEY", f"shards-v1/{shard.stem}")
    planted.unlink(missing_ok=True)
    os.link(outside, planted)
    if where == "KEY.lock":
        shard.unlink()  # (downloaded again: under its lock)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        with dataset.open(url, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 16))
    st = outside.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_mtime, st.st_nlink) == (0o644, 1e9, 1)
