"""The chunk cache for remote files (tensorfile.sources.CachedSource): full and partial hits
against nginx (requests counted in its access log), keys, eviction, threads, and values
checked against the reference safetensors library."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import safetensors.numpy as ref

from tensorfile.core.atomic import AtomicFile
from tensorfile.safetensors.numpy import load_file, save_file
from tensorfile.sources import CachedSource, CacheWarning, open_path
from tensorfile.sources.cache._chunkdir import LAYOUT, cache_key
from tensorfile.sources.cache.folder import CacheFolder
from tensorfile.sources.cache.settings import CACHE_CHUNK_ENV, CACHE_DIR_ENV, CacheSettings
from tests.helpers.servers import Server, start_nginx

MIB = 1 << 20


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server, proc = start_nginx(tmp_path_factory.mktemp("nginx-cache"))
    yield server
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_CHUNK_ENV, "1MiB")  # small files, many chunks


def _checkpoint(path: Path, seed: int = 0, n: int = 6) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    tensors = {f"w{i}": rng.standard_normal((300 + i, 700), dtype=np.float32) for i in range(n)}
    tensors["i8"] = rng.integers(-128, 127, (1000,), dtype=np.int8)
    save_file(tensors, path)
    return tensors


def _served(nginx: Server, name: str, seed: int, n: int) -> tuple[Path, str]:
    """A checkpoint ``name`` written where nginx serves it: its path and URL."""
    _checkpoint(nginx.root / name, seed=seed, n=n)
    return nginx.root / name, f"{nginx.url}/{name}"


def _chunks(cache: Path) -> list[Path]:
    return sorted((cache / LAYOUT).glob("*/*.chunk"))


def _same(got: dict[str, Any], path: Path) -> None:
    want = ref.load_file(str(path))  # the reference library reads the local file
    assert list(got) and sorted(got) == sorted(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), k


def _data_requests(server: Server) -> list[Any]:
    return [r for r in server.requests() if r.body_bytes > 64]


def test_a_second_load_is_a_full_hit(nginx: Server, tmp_path: Path) -> None:
    _checkpoint(nginx.root / "full.safetensors")
    url, cache = f"{nginx.url}/full.safetensors", tmp_path / "cache"
    nginx.reset()
    _same(load_file(url, cache_dir=cache), nginx.root / "full.safetensors")
    assert sum(r.body_bytes for r in nginx.requests()) >= os.path.getsize(
        nginx.root / "full.safetensors"
    )
    size = os.path.getsize(nginx.root / "full.safetensors")
    assert len(_chunks(cache)) == -(-size // MIB)
    nginx.reset()
    _same(load_file(url, cache_dir=cache), nginx.root / "full.safetensors")
    (only,) = nginx.requests()  # the one that tells the ETag and the size
    assert only.range == "bytes=0-63" and only.body_bytes == 64


def test_a_partial_hit_fetches_only_the_missing_chunks(nginx: Server, tmp_path: Path) -> None:
    path = nginx.root / "half.safetensors"
    _checkpoint(path, seed=1)
    url, cache = f"{nginx.url}/half.safetensors", tmp_path / "cache"
    load_file(url, cache_dir=cache)
    chunks = _chunks(cache)
    gone = {int(p.name.split(".")[0]) for p in chunks[::2]}
    for p in chunks[::2]:
        p.unlink()
    nginx.reset()
    _same(load_file(url, cache_dir=cache), path)
    fetched = set()
    for r in _data_requests(nginx):
        first, last = (int(x) for x in r.range.removeprefix("bytes=").split("-"))
        assert first % MIB == 0 and ((last + 1) % MIB == 0 or last + 1 == path.stat().st_size)
        fetched |= set(range(first // MIB, last // MIB + 1))
    assert fetched == gone
    assert len(_chunks(cache)) == len(chunks)


def test_the_environment_turns_the_cache_on_and_false_turns_it_off(
    nginx: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = nginx.root / "env.safetensors"
    _checkpoint(path, seed=2, n=2)
    url = f"{nginx.url}/env.safetensors"
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "env"))
    load_file(url)
    assert _chunks(tmp_path / "env")
    _same(load_file(url, cache_dir=False), path)
    _same(load_file(url, cache_dir=""), path)
    assert not (tmp_path / "off").exists()
    with open_path(url, cache_dir=False) as src:
        assert not isinstance(src, CachedSource)
    with open_path(url) as src:
        assert isinstance(src, CachedSource)


def test_true_means_the_default_folder(
    nginx: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (nginx.root / "x.bin").write_bytes(b"x" * 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with open_path(f"{nginx.url}/x.bin", cache_dir=True) as src:
        assert src.read(0, 3) == b"xxx"
    assert _chunks(tmp_path / "xdg" / "tensorfile")


def test_a_changed_file_has_a_new_key(nginx: Server, tmp_path: Path) -> None:
    path = nginx.root / "changed.safetensors"
    _checkpoint(path, seed=3)
    url, cache = f"{nginx.url}/changed.safetensors", tmp_path / "cache"
    _same(load_file(url, cache_dir=cache), path)
    old = _chunks(cache)
    _checkpoint(path, seed=4)  # same size, other bytes: another ETag (nginx: mtime-size)
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + 10))
    nginx.reset()
    _same(load_file(url, cache_dir=cache), path)
    assert sum(r.body_bytes for r in nginx.requests()) >= st.st_size  # all fetched again
    assert len(_chunks(cache)) == 2 * len(old)


def test_a_url_with_credentials_keys_like_without_and_stores_no_secret(
    nginx: Server, tmp_path: Path
) -> None:
    _, bare = _served(nginx, "cred.safetensors", seed=5, n=1)
    cache = tmp_path / "cache"
    with_user = bare.replace("http://", "http://someone:hunter2secret@")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_file(with_user, cache_dir=cache)
    nginx.reset()
    load_file(bare, cache_dir=cache)
    assert len(nginx.requests()) == 1
    for f in cache.rglob("*"):
        assert b"hunter2secret" not in f.name.encode()
        if f.is_file():
            assert b"hunter2secret" not in f.read_bytes()
    assert cache_key(bare + "?a=1", '"t"', 1, 1) != cache_key(bare + "?a=2", '"t"', 1, 1)


def _memory_file(name: str, data: bytes) -> str:
    fsspec.filesystem("memory").pipe(f"/cache-tests/{name}", data)
    return f"memory://cache-tests/{name}"


def _config(chunk: int = 1000, limit: int = 1 << 30, verify: bool = False) -> CacheSettings:
    return CacheSettings(limit=limit, chunk=chunk, verify=verify)


def _cached(url: str, folder: Path, config: CacheSettings) -> CachedSource:
    from tensorfile.sources.stores.fsspec_source import FsspecSource

    inner = FsspecSource(url)
    return CachedSource(inner, url=url, folder=str(folder), config=config)


def test_random_reads_equal_the_file(tmp_path: Path) -> None:
    data = os.urandom(25_500)
    url = _memory_file("random.bin", data)
    rnd = random.Random(7)
    for round_ in range(3):  # cold, warm, then with chunks deleted at random
        with _cached(url, tmp_path, _config()) as src:
            if round_ == 0:
                assert src.read(0, len(data)) == data
            for _ in range(200):
                a = rnd.randrange(len(data))
                n = rnd.randrange(min(4000, len(data) - a) + 1)
                assert src.read(a, n) == data[a : a + n]
            bufs = [memoryview(bytearray(k)) for k in (1, 999, 1001, 3000)]
            src.readinto(2_500, bufs)
            assert b"".join(bytes(b) for b in bufs) == data[2_500:7_501]
            if round_ == 1:
                assert src.cache_stats.misses == 0
        if round_ == 1:
            for p in rnd.sample(_chunks(tmp_path), 8):
                p.unlink()


def test_threads_fetch_each_missing_chunk_once(tmp_path: Path) -> None:
    data = os.urandom(64_000)
    url = _memory_file("threads.bin", data)
    with _cached(url, tmp_path, _config()) as src:
        out = bytearray(len(data))
        view = memoryview(out)

        def work(start: int) -> None:  # overlapping pieces of 1,500 bytes, 8 threads
            for a in range(start, len(data), 12_000):
                src.readinto(a, [view[a : min(a + 1_500, len(data))]])

        threads = [threading.Thread(target=work, args=(s,)) for s in range(0, 12_000, 1_500)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert bytes(out) == data
        assert src.cache_stats.misses == 64
        assert len(_chunks(tmp_path)) == 64


def test_eviction_keeps_the_limit_and_the_recently_used(tmp_path: Path) -> None:
    data = os.urandom(10_000)  # 10 chunks of 1,000 bytes (+ 32-byte headers)
    url = _memory_file("lru.bin", data)
    limit = 4 * 1_032 + 500  # (and room for info.json, not for a fifth chunk)
    with _cached(url, tmp_path, _config(limit=limit)) as src:
        for a in range(0, len(data), 1_000):  # one chunk after the other
            assert src.read(a, 1_000) == data[a : a + 1_000]
    assert len(_chunks(tmp_path)) == 4  # each write swept: the last four stay
    for p in _chunks(tmp_path):  # used a while ago, in order (file times are coarse)
        t = time.time() - 100 + int(p.name.split(".")[0])
        os.utime(p, (t, t))
    with _cached(url, tmp_path, _config(limit=limit)) as src:
        assert src.read(9_000, 1_000) == data[9_000:]  # a hit: chunk 9 is used now
        assert src.read(0, 1_000) == data[:1_000]  # misses: the oldest (6, then 7) go
        assert src.read(1_000, 1_000) == data[1_000:2_000]
    left = sorted(int(p.name.split(".")[0]) for p in _chunks(tmp_path))
    assert left == [0, 1, 8, 9]


def test_a_reader_whose_chunks_were_evicted_reads_the_network(tmp_path: Path) -> None:
    data = os.urandom(5_000)
    url = _memory_file("evicted.bin", data)
    with _cached(url, tmp_path, _config()) as src:
        assert src.read(0, 5_000) == data
        CacheFolder(str(tmp_path), 1).sweep()  # another process evicts everything
        assert not _chunks(tmp_path)
        assert src.read(0, 5_000) == data
        assert src.cache_stats.misses == 10


def test_a_chunk_folder_removed_under_an_open_reader_is_made_again(tmp_path: Path) -> None:
    """A source opens its chunk folder once for its reads; when that folder is removed
    (a sweep, a heal, a user), the next reads store into a new one and then hit there."""
    data = os.urandom(5_000)
    url = _memory_file("regone.bin", data)
    with _cached(url, tmp_path, _config()) as src:
        assert src.read(0, 5_000) == data
        (folder,) = (tmp_path / LAYOUT).iterdir()
        shutil.rmtree(folder)
        assert src.read(0, 5_000) == data  # (misses: fetched and stored again)
        assert len(_chunks(tmp_path)) == 5
        hits = src.cache_stats.hits
        assert src.read(0, 5_000) == data
        assert src.cache_stats.hits == hits + 5 and src.cache_stats.misses == 10


def test_sweep_removes_only_dead_writers_temporary_files(tmp_path: Path) -> None:
    data = os.urandom(3_000)
    url = _memory_file("temps.bin", data)
    with _cached(url, tmp_path, _config()) as src:
        src.read(0, 3_000)
        folder = src.folder
    dead = Path(folder) / ".1.chunk.tensorfile-0123456789ab.tmp"
    dead.write_bytes(b"half a chunk")  # its writer was killed: nobody holds its lock
    live = AtomicFile(os.path.join(folder, "2.chunk"))  # a writer at work holds its lock
    try:
        result = CacheFolder(str(tmp_path), 1 << 30).sweep()
        assert result.temps_removed == 1 and not dead.exists()
        assert os.path.exists(live.tmp)
    finally:
        live.abort()
    assert result.chunks == 3


def test_no_etag_means_no_cache_and_a_warning(tmp_path: Path) -> None:
    from tests.helpers.hostile_http import HostileServer, serve_bytes

    data = os.urandom(3_000)
    with HostileServer(serve_bytes(data)) as server:  # sends no ETag
        with pytest.warns(CacheWarning, match="no ETag"):
            src = open_path(f"{server.url}/x.bin", cache_dir=tmp_path)
        with src:
            assert not isinstance(src, CachedSource)
            assert src.read(0, 3_000) == data
    assert not (tmp_path / LAYOUT).exists()


def test_config_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorfile.errors import InvalidArgumentError

    monkeypatch.setenv(CACHE_CHUNK_ENV, "2GiB")
    url = _memory_file("cfg.bin", b"abc")
    with pytest.raises(InvalidArgumentError, match="at most 1 GiB"):
        open_path(url, cache_dir=tmp_path)
    monkeypatch.setenv(CACHE_CHUNK_ENV, "lots")
    with pytest.raises(InvalidArgumentError, match=r"\$TENSORFILE_CACHE_CHUNK: size 'lots'"):
        open_path(url, cache_dir=tmp_path)
    with pytest.raises(InvalidArgumentError, match="cache_dir must be"):
        open_path(url, cache_dir=3)  # type: ignore[arg-type]


def _signed(url: str, when: str, signature: str) -> str:
    """``url`` presigned the AWS SigV4 way (nginx ignores the query)."""
    return (f"{url}?versionId=7&X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential=AKIAEXAMPLE%2F{when[:8]}%2Fus-east-1%2Fs3%2Faws4_request"
            f"&X-Amz-Date={when}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            f"&X-Amz-Security-Token=tok{signature}&X-Amz-Signature={signature}")  # fmt: skip


def test_a_re_signed_url_finds_the_chunks_of_the_last_signing(
    nginx: Server, tmp_path: Path
) -> None:
    path, bare = _served(nginx, "signed.safetensors", seed=6, n=2)
    cache = tmp_path / "cache"
    _same(load_file(_signed(bare, "20260101T000000Z", "aa11"), cache_dir=cache), path)
    nginx.reset()
    for again in (
        _signed(bare, "20260102T120000Z", "bb22"),  # signed again a day later
        f"{bare}?versionId=7&X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Date=20260103T000000Z"
        "&X-Goog-Expires=600&X-Goog-Signature=cc33&X-Goog-Credential=sa%40p.iam",  # (GCS)
        f"{bare}?versionId=7&AWSAccessKeyId=AKIA&Expires=1767225600&Signature=dd44",  # (V2)
    ):
        _same(load_file(again, cache_dir=cache), path)
    assert len(nginx.requests()) == 3  # each: the one request that tells the ETag and size
    for f in cache.rglob("*"):
        assert b"aa11" not in f.name.encode()
        if f.is_file():
            assert b"tokaa11" not in f.read_bytes()
    other = f"{bare}?versionId=8&X-Amz-Signature=ee55"  # another parameter: another file
    assert cache_key(other, '"t"', 1, 1) != cache_key(_signed(bare, "x", "y"), '"t"', 1, 1)
    etag = cache_key(_signed(bare, "20260101T000000Z", "aa11"), '"other"', 1, 1)
    assert etag != cache_key(_signed(bare, "20260101T000000Z", "aa11"), '"t"', 1, 1)


# Two signings of one object by each provider (the signature, times and key change; a
# parameter that names another version stays). nginx ignores the query.
_RESIGNED = {
    "azure-sas": (
        "sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-11-28T18:0{0}:00Z&st=2026-11-28T17:0{0}:00Z"
        "&spr=https&sig=SAS{0}secretHMAC%3D&versionid=7",
        "sv=2022-11-02&sr=b&sp=r&skoid=oid&sktid=tid&skt=2026-11-28T17:0{0}:00Z"
        "&ske=2026-11-29T17:00:00Z&sks=b&skv=2022-11-02&se=2026-11-28T18:00:00Z"
        "&rsct=application%2Foctet-stream&sig=UD{0}secretHMAC%3D&versionid=7",
    ),
    "tencent-cos": (
        "q-sign-algorithm=sha1&q-ak=AKID{0}&q-sign-time=1{0};2&q-key-time=1{0};2"
        "&q-header-list=host&q-url-param-list=&q-signature=COS{0}secret"
        "&x-cos-security-token=tok{0}&versionId=7",
    ),
    "alibaba-oss": (
        "OSSAccessKeyId=LTAI{0}&Expires=17{0}&Signature=OSS{0}secret&security-token=tok{0}"
        "&versionId=7",
        "x-oss-signature-version=OSS4-HMAC-SHA256&x-oss-credential=LTAI{0}%2F20261128"
        "&x-oss-date=20261128T00000{0}Z&x-oss-expires=600&x-oss-signature=OSS4{0}secret"
        "&versionId=7",
    ),
}


@pytest.mark.parametrize("provider", sorted(_RESIGNED))
def test_a_url_re_signed_by_another_provider_finds_the_chunks(
    nginx: Server, tmp_path: Path, provider: str
) -> None:
    path, bare = _served(nginx, f"{provider}.safetensors", seed=7, n=2)
    for form in _RESIGNED[provider]:
        cache = tmp_path / f"cache-{_RESIGNED[provider].index(form)}"
        _same(load_file(f"{bare}?{form.format(1)}", cache_dir=cache), path)
        nginx.reset()
        _same(load_file(f"{bare}?{form.format(2)}", cache_dir=cache), path)
        assert len(nginx.requests()) == 1  # the one request that tells the ETag and size
        for f in cache.rglob("*"):
            assert b"secret" not in f.name.encode()
            assert not f.is_file() or b"secret" not in f.read_bytes()
        other = f"{bare}?{form.format(1).replace('ersionid=7', 'ersionid=8')}"
        other = other.replace("ersionId=7", "ersionId=8")  # (another version: another file)
        assert cache_key(other, '"t"', 1, 1) != cache_key(f"{bare}?{form.format(1)}", '"t"', 1, 1)


def test_azure_names_are_cut_only_from_a_sas() -> None:
    """``sp``, ``st``, ``sig``... are short names: without ``sv`` and ``sig`` together the
    query is no SAS, and they may name the file."""
    bare = "https://host/get"
    assert cache_key(f"{bare}?st=a&sp=1", '"t"', 1, 1) != cache_key(
        f"{bare}?st=b&sp=1", '"t"', 1, 1
    )
    assert cache_key(f"{bare}?sig=a", '"t"', 1, 1) != cache_key(f"{bare}?sig=b", '"t"', 1, 1)


@pytest.mark.parametrize("tiny", ["1", "16", "1KiB", "65535"])
def test_a_tiny_chunk_size_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny: str
) -> None:
    """A chunk of a few bytes (``16`` meant as 16 MiB) would make a file per byte and a
    cached read quadratic: refused, naming the variable and the minimum."""
    from tensorfile.errors import InvalidArgumentError

    monkeypatch.setenv(CACHE_CHUNK_ENV, tiny)
    url = _memory_file("tiny.bin", b"abc")
    with pytest.raises(InvalidArgumentError, match=r"\$TENSORFILE_CACHE_CHUNK.*at least 64 KiB"):
        open_path(url, cache_dir=tmp_path)
    assert not (tmp_path / LAYOUT).exists()
    monkeypatch.setenv(CACHE_CHUNK_ENV, "64KiB")
    with open_path(url, cache_dir=tmp_path) as src:
        assert src.read(0, 3) == b"abc"
