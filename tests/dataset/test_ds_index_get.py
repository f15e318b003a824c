"""Key lookups in key-value datasets: through the index when there is one, else headers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorfile import dataset


def _kv(tmp_path: Path, index: bool) -> Path:
    out = tmp_path / ("with" if index else "without")
    names = [f"doc{i:03d}" for i in range(40)]
    values = np.arange(40 * 4, dtype=np.float32).reshape(40, 4)
    # tiny shards: several files, so finding the right one matters
    dataset.write(
        {"id": names, "v": values},
        out,
        name_col="id",
        target_shard_size_mb=0.0005,
        generate_index=index,
    )
    return out


@pytest.mark.parametrize("index", [True, False], ids=["index", "headers"])
def test_get_by_key(tmp_path: Path, index: bool) -> None:
    ds = dataset.open(_kv(tmp_path, index))
    assert len(ds.shards) > 3
    got = ds.get("doc017")
    assert got["key"] == "doc017"
    assert got["v"].tolist() == [68.0, 69.0, 70.0, 71.0]
    with pytest.raises(KeyError):
        ds.get("nope")


def test_index_opens_only_the_shard_that_holds_the_key(tmp_path: Path) -> None:
    ds = dataset.open(_kv(tmp_path, True))
    ds.get("doc039")
    assert len(ds._readers) == 1  # the index named the shard; no other header was read
    ds2 = dataset.open(_kv(tmp_path / "again", False))
    ds2.get("doc039")
    assert len(ds2._readers) > 1  # without an index the shards are searched


def test_get_is_for_kv_datasets(tmp_path: Path) -> None:
    dataset.write({"x": np.zeros((4, 2), np.float32)}, tmp_path / "b", batch_size=2)
    with pytest.raises(ValueError, match="key-value"):
        dataset.open(tmp_path / "b").get("x")
