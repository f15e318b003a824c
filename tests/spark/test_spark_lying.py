"""The Spark data source on lying inputs: the same checks as tensorfile.dataset, surfacing as
tensorfile's error class and message in the error Spark raises in the driver; FIFOs refused
without blocking; an overwrite over a lying manifest deletes nothing it does not own, and an
append over one changes nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tests.helpers.checkpoints import shard_files, snapshot
from tests.helpers.lying_datasets import (
    INDEX,
    MANIFEST,
    edit_manifest,
    fifo_guard,
    shard_name,
    write_manifest,
)
from tests.helpers.manifests import STAGING, assert_valid_manifest, listed_shards
from tests.helpers.spark import SPARK_ERRORS, df_of, load, save

Doc = dict[str, Any]


def _batch(folder: Path) -> Path:
    dataset.write(
        {"id": np.arange(10, dtype=np.int64), "x": np.ones((10, 2), np.float32)},
        folder,
        batch_size=4,
    )
    return folder


def _kv(folder: Path) -> Path:
    dataset.write(
        {"name": [f"k{i}" for i in range(6)], "v": np.ones((6, 2), np.float32)},
        folder,
        name_col="name",
        target_shard_size_mb=150 / 2**20,
    )
    return folder


def _raises(action: Callable[[], Any], *words: str) -> str:
    with pytest.raises(SPARK_ERRORS) as err:
        action()
    text = str(err.value)
    for word in words:
        assert word in text, text[-3000:]
    return text


def _count(d: Doc, i: int, value: int) -> None:
    d["total_samples"] += value - d["shards"][i]["samples_count"]
    d["shards"][i]["samples_count"] = value


MANIFEST_LIES: dict[str, tuple[Callable[[Doc], Any], list[str]]] = {
    "negative": (lambda d: d["shards"][0].update(samples_count=-1), ["samples_count", "-1"]),
    "schema-list": (lambda d: d.update(schema=[1]), ["schema", "an array"]),
    "outside": (lambda d: d["shards"][0].update(shard_path="../x.safetensors"), ["leaves"]),
    "huge": (lambda d: _count(d, 0, 2**63 - 1 - 6), ["hold at most"]),
    "real-samples": (
        lambda d: d["tensorfile"].update(real_samples={d["shards"][2]["shard_path"]: 3}),
        ["tensorfile.real_samples", "samples_count (2)", "got 3"],
    ),
}


@pytest.mark.parametrize("name", sorted(MANIFEST_LIES))
def test_a_lying_manifest_fails_in_the_driver(spark: Any, tmp_path: Path, name: str) -> None:
    folder = _batch(tmp_path / "b")
    lie, words = MANIFEST_LIES[name]
    edit_manifest(folder, lie)
    _raises(lambda: load(spark, folder).collect(), "FormatError", *words)


def test_a_deep_manifest_fails_in_the_driver(spark: Any, tmp_path: Path) -> None:
    folder = _batch(tmp_path / "b")
    write_manifest(folder, b"[" * 100_000)
    _raises(lambda: load(spark, folder), "FormatError", "nests too deeply")


@pytest.mark.parametrize("layout", ["rows", "files"])
def test_more_rows_claimed_than_stored(spark: Any, tmp_path: Path, layout: str) -> None:
    folder = _batch(tmp_path / "b")
    edit_manifest(folder, lambda d: _count(d, 2, 3))  # the last shard holds 2
    if layout == "rows":
        _raises(lambda: load(spark, folder).collect(), "FormatError", "says 3 samples")
    else:  # one row per file: the counts are not used, but the header is still checked
        _raises(lambda: load(spark, folder, layout=layout).collect(), "says 3 samples")


def test_kv_more_keys_claimed_than_stored(spark: Any, tmp_path: Path) -> None:
    folder = _kv(tmp_path / "kv")
    edit_manifest(folder, lambda d: _count(d, 0, 5))
    _raises(lambda: load(spark, folder).collect(), "FormatError", "says 5 samples")


def test_a_schema_dtype_the_shards_do_not_have(spark: Any, tmp_path: Path) -> None:
    folder = _batch(tmp_path / "b")
    edit_manifest(folder, lambda d: d["schema"]["x"].update(dtype="F64"))
    _raises(lambda: load(spark, folder).collect(), "FormatError", "F64")


def test_a_dtype_spark_cannot_hold(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "c"
    dataset.write({"z": np.ones((4, 2), np.complex64)}, folder, batch_size=2)
    _raises(lambda: load(spark, folder), "UnsupportedError", "C64")
    rows = load(spark, folder, layout="files").collect()  # bytes of any dtype
    assert sorted(r.z.dtype for r in rows) == ["C64", "C64"]


@pytest.mark.parametrize("what", ["shard", "manifest"])
def test_a_fifo_is_refused_without_blocking(spark: Any, tmp_path: Path, what: str) -> None:
    folder = _batch(tmp_path / "b")
    path = folder / (listed_shards(folder)[1] if what == "shard" else MANIFEST)
    path.unlink()
    os.mkfifo(path)
    with fifo_guard(path, seconds=60):
        _raises(lambda: load(spark, folder).collect(), "SourceError", "not a regular file")


def test_a_shard_symlinked_out_of_the_folder(spark: Any, tmp_path: Path) -> None:
    folder = _batch(tmp_path / "b")
    name = listed_shards(folder)[0]
    os.replace(folder / name, tmp_path / name)
    (folder / name).symlink_to(tmp_path / name)
    _raises(lambda: load(spark, folder).collect(), "FormatError", "resolves outside")


# -- writes over a lying manifest --------------------------------------------------------------


def test_overwrite_over_a_lying_manifest_deletes_only_its_shards(
    spark: Any, tmp_path: Path
) -> None:
    folder, outside = tmp_path / "ds", tmp_path / "outside"
    outside.mkdir()
    _batch(folder)
    old = listed_shards(folder)
    victim = outside / shard_name()
    victim.write_bytes(b"precious")
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    link = folder / shard_name()
    link.symlink_to(victim)
    fifo = folder / shard_name()
    os.mkfifo(fifo)
    lies = [MANIFEST, INDEX, f"../outside/{victim.name}", str(victim), f"sub/{victim.name}"]
    lies += [link.name, fifo.name]
    edit_manifest(
        folder,
        lambda d: d["shards"].extend(
            {"shard_path": p, "samples_count": 0, "bytes": 1} for p in lies
        ),
    )
    df = df_of(spark, [(i, [float(i)]) for i in range(5)], "id long, x array<float>")
    with fifo_guard(fifo, seconds=60):
        save(df, folder, batch_size=2, generate_index="true")
    doc = assert_valid_manifest(folder)
    assert doc["total_samples"] == 5
    assert (folder / INDEX).is_file()
    assert victim.read_bytes() == b"precious"
    assert link.is_symlink()
    assert fifo.is_fifo()
    assert not set(old) & set(shard_files(folder))
    assert sorted(r.id for r in load(spark, folder).collect()) == list(range(5))


def test_append_over_a_lying_manifest_changes_nothing(spark: Any, tmp_path: Path) -> None:
    folder = _batch(tmp_path / "ds")
    edit_manifest(folder, lambda d: d["shards"][0].update(samples_count=-1))
    before = snapshot(folder)
    df = df_of(spark, [(i, [1.0, 2.0]) for i in range(3)], "id long, x array<float>")
    _raises(lambda: save(df, folder, mode="append", batch_size=2), "FormatError", "samples_count")
    assert snapshot(folder) == before
    assert not (folder / STAGING).exists()
    assert json.loads((folder / MANIFEST).read_text())["shards"][0]["samples_count"] == -1
