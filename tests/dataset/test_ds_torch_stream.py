"""The batched, resumable torch feed over a remote dataset streamed through the shard cache
(issue 26): DataLoader workers (forked, the default) read whole cached shards, each shard is
downloaded once for all of them, the values equal the written ones, a resumed feed reads on
from the cache, and a map-style view keeps the cache settings when it is pickled.

The server is a real S3 API server on 127.0.0.1 (moto in server mode: its request recorder
says what was read from it).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from tensorfile import dataset  # noqa: E402
from tensorfile.dataset.cache.shardcache import LAYOUT  # noqa: E402
from tensorfile.dataset.order import epoch_order  # noqa: E402

N = 96
SHARD = 16
B = 8


def _write(s3: Any) -> tuple[str, dict[str, np.ndarray[Any, Any]]]:
    url = s3.url(s3.bucket(), "feed")
    cols = {
        "id": np.arange(N, dtype=np.int64),
        "x": np.random.default_rng(7).standard_normal((N, 32)).astype(np.float32),
    }
    dataset.write(cols, url, batch_size=SHARD, storage_options=s3.options)
    return url, cols


def _batches(loader: Any) -> list[dict[str, Any]]:
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def test_batches_through_the_cache_with_forked_workers(s3: Any, tmp_path: Path) -> None:
    url, cols = _write(s3)
    cache = tmp_path / "cache"
    ds = dataset.open(url, storage_options=s3.options, cache_dir=cache, cache_limit="1MiB")
    it = ds.to_torch(batch_size=B, shuffle=True, seed=3, partitions=4, shuffle_block=32)
    got = _batches(DataLoader(it, batch_size=None, num_workers=2))
    ids = torch.cat([b["id"] for b in got]).tolist()
    counts = [s.samples for s in ds.shards]
    assert ids == epoch_order(counts, seed=3, shuffle=True, partitions=4, shuffle_block=32,
                              unit=B).tolist()  # fmt: skip
    x = torch.cat([b["x"] for b in got]).numpy()
    assert np.array_equal(x, cols["x"][ids])
    shards = [n for n in os.listdir(cache / LAYOUT) if n.endswith(".shard")]
    assert len(shards) == len(ds.shards)  # each shard once, for both workers
    assert not [n for n in os.listdir(cache / LAYOUT) if n.endswith(".tmp")]

    # resumed after 5 batches in a new process-like object: read on from the cache only
    state = it.state_dict(samples=5 * B)
    with s3.recording() as requests:
        again = dataset.open(url, storage_options=s3.options, cache_dir=cache)
        it2 = again.to_torch(batch_size=B, shuffle=True, seed=3, partitions=4, shuffle_block=32)
        it2.load_state_dict(state)
        rest = _batches(DataLoader(it2, batch_size=None, num_workers=2))
    assert torch.cat([b["id"] for b in rest]).tolist() == ids[5 * B :]
    assert s3.bytes_read(requests, ".safetensors") == {}
    ds.close()
    again.close()


def test_a_pickled_map_view_keeps_the_cache(s3: Any, tmp_path: Path) -> None:
    url, cols = _write(s3)
    cache = tmp_path / "cache"
    ds = dataset.open(url, storage_options=s3.options, cache_dir=cache, cache_limit="1MiB")
    view = pickle.loads(pickle.dumps(ds.to_torch(map_style=True)))
    assert view.dataset.cache is not None
    assert view.dataset.cache.config.limit == 1 << 20
    assert np.array_equal(view[17]["x"].numpy(), cols["x"][17])
    assert any(n.endswith(".shard") for n in os.listdir(cache / LAYOUT))
