"""The commit protocol: a staging folder, overwrite and append, and failures that leave the
previous dataset readable and byte-identical, with no stray shard and no staging folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tensorfile.dataset.writing.job as job_module
import tensorfile.dataset.writing.writer as writer_module
from tensorfile import dataset
from tensorfile.errors import TensorFileError
from tensorfile.sources import LocalStore
from tests.helpers.checkpoints import reference_load, shard_files, snapshot
from tests.helpers.datasets import cols_a, cols_b, fail_on_call
from tests.helpers.manifests import (
    INDEX,
    STAGING,
    assert_valid_manifest,
    listed_shards,
    load_manifest,
)
from tests.helpers.samples import assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]


def by_id(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(samples, key=lambda s: int(s["id"]))


# -- staging ----------------------------------------------------------------------------------


def test_shards_are_staged_then_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "ds"
    dataset.write(cols_a(), out, batch_size=3)
    before = shard_files(out)
    real = writer_module.save_file
    targets: list[str] = []

    def spy(tensors: Any, target: str, *args: Any, **kwargs: Any) -> None:
        rel = Path(target).relative_to(out)
        assert rel.parts[0] == STAGING, target
        assert shard_files(out) == before  # nothing new in the dataset folder yet
        targets.append(os.path.basename(target))
        real(tensors, target, *args, **kwargs)

    monkeypatch.setattr(writer_module, "save_file", spy)
    dataset.write(cols_b(), out, batch_size=2, mode="append")
    assert len(targets) == 3
    assert not (out / STAGING).exists()
    assert set(targets) <= set(shard_files(out))
    assert shard_files(out) == listed_shards(out)


@pytest.mark.parametrize("options", [{"batch_size": 2}, {"name_col": "name"}])
def test_no_staging_folder_after_a_write(tmp_path: Path, options: dict[str, Any]) -> None:
    data: dict[str, Any] = dict(cols_a(4))
    if "name_col" in options:
        data["name"] = ["a", "b", "c", "d"]
    dataset.write(data, tmp_path, **options)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [*listed_shards(tmp_path), "dataset_manifest.json"]
    )


# -- overwrite --------------------------------------------------------------------------------


@pytest.mark.parametrize("explicit", [True, False])
def test_overwrite_replaces_the_previous_dataset(tmp_path: Path, explicit: bool) -> None:
    dataset.write(cols_a(), tmp_path, batch_size=3, generate_index=True)
    old = listed_shards(tmp_path)
    kv = {"name": ["p", "q"], "v": np.ones((2, 3), np.int8)}
    extra = {"mode": "overwrite"} if explicit else {}
    dataset.write(kv, tmp_path, name_col="name", **extra)
    new = listed_shards(tmp_path)
    assert not set(old) & set(new)
    assert sorted(os.listdir(tmp_path)) == sorted([*new, "dataset_manifest.json"])  # no index
    doc = assert_valid_manifest(tmp_path)
    assert doc["total_samples"] == 2
    ds = dataset.open(tmp_path)
    assert ds.mode == "kv"
    assert sorted(s["key"] for s in ds) == ["p", "q"]


def test_overwrite_removes_old_shards_only_after_the_new_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset.write(cols_a(), tmp_path, batch_size=3)
    old = listed_shards(tmp_path)
    real = LocalStore.write_if
    seen: list[list[str]] = []

    def spy(self: LocalStore, name: str, data: bytes, expected: str | None) -> None:
        assert name == "dataset_manifest.json"
        seen.append(shard_files(self.root))  # the old shards are all still there
        real(self, name, data, expected)
        seen.append(shard_files(self.root))

    monkeypatch.setattr(LocalStore, "write_if", spy)
    dataset.write(cols_b(), tmp_path, batch_size=3)
    assert len(seen) == 2
    assert set(old) <= set(seen[0])
    assert set(old) <= set(seen[1])
    assert not set(old) & set(shard_files(tmp_path))
    assert shard_files(tmp_path) == listed_shards(tmp_path)
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols_b(), 5))


def test_overwrite_keeps_unrelated_files(tmp_path: Path) -> None:
    dataset.write(cols_a(), tmp_path, batch_size=3)
    (tmp_path / "README.txt").write_text("mine")
    dataset.write(cols_b(), tmp_path, batch_size=3)
    assert (tmp_path / "README.txt").read_text() == "mine"


# -- append -----------------------------------------------------------------------------------


def test_append_adds_shards_and_keeps_totals(tmp_path: Path) -> None:
    m1 = dataset.write(cols_a(7), tmp_path, batch_size=3)
    first = snapshot(tmp_path)
    m2 = dataset.write(cols_b(5), tmp_path, batch_size=2, mode="append")
    m3 = dataset.write(cols_b(1), tmp_path, batch_size=2, mode="append", tail_strategy="pad")
    doc = assert_valid_manifest(tmp_path)
    assert doc["total_samples"] == 7 + 5 + 2 == m3.total_samples  # the padded shard stores 2
    assert m3.real_total == 13
    assert len(doc["shards"]) == 3 + 3 + 1
    assert m1.total_samples == 7 and m2.total_samples == 12
    for name, digest in first.items():  # the first dataset's shards are untouched
        if name.endswith(".safetensors"):
            assert snapshot(tmp_path)[name] == digest
    assert shard_files(tmp_path) == listed_shards(tmp_path)
    want = expected_rows(cols_a(7), 7) + expected_rows(cols_b(5), 5) + expected_rows(cols_b(1), 1)
    ds = dataset.open(tmp_path)
    assert len(ds) == 13
    assert_samples(by_id(list(ds)), by_id(want))
    assert_samples(by_id([ds[i] for i in range(13)]), by_id(want))


def test_append_kv(tmp_path: Path) -> None:
    dataset.write({"name": ["a", "b"], "v": np.ones((2, 2), np.float32)}, tmp_path, name_col="name")
    dataset.write(
        {"name": ["c", "d", "e"], "v": np.zeros((3, 2), np.float32)},
        tmp_path,
        name_col="name",
        mode="append",
    )
    doc = assert_valid_manifest(tmp_path)
    assert doc["total_samples"] == 5
    assert sorted(s["samples_count"] for s in doc["shards"]) == [2, 3]
    got = {s["key"]: s["v"].tolist() for s in dataset.open(tmp_path)}
    assert got == {"a": [1, 1], "b": [1, 1], "c": [0, 0], "d": [0, 0], "e": [0, 0]}


def test_append_creates_a_missing_dataset(tmp_path: Path) -> None:
    out = tmp_path / "new" / "ds"
    dataset.write(cols_a(4), out, batch_size=4, mode="append")
    assert assert_valid_manifest(out)["total_samples"] == 4


def test_append_keeps_the_index_current(tmp_path: Path) -> None:
    dataset.write(cols_a(4), tmp_path, batch_size=2, generate_index=True)
    dataset.write(cols_b(3), tmp_path, batch_size=2, mode="append")
    table = pq.read_table(tmp_path / INDEX)
    assert table.schema.field("shape").type == pa.list_(pa.int32())
    rows = sorted((r["file_name"], r["tensor_key"], tuple(r["shape"])) for r in table.to_pylist())
    want = sorted(
        (p, k, v.shape)
        for p in listed_shards(tmp_path)
        for k, v in reference_load(tmp_path, p).items()
    )
    assert rows == want
    assert len(rows) == 4 * 2


# -- failures ---------------------------------------------------------------------------------


def _inject(kind: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any]]:
    """Data and options for a write that fails at ``kind``."""
    good: Any = cols_b(5)
    options: dict[str, Any] = {"batch_size": 2}
    if kind == "conversion":
        good = pa.table({"id": pa.array([1, None, 3]), "x": pa.array([1.0, 2.0, 3.0])})
    elif kind == "ragged":
        good = pa.table({"id": [1, 2], "x": pa.array([[1.0], [2.0, 3.0]])})
    elif kind == "duplicate":
        good = {"name": ["a", "b", "a"], "x": np.ones((3, 2), np.float32)}
        options = {"name_col": "name"}
    elif kind == "first_save":
        monkeypatch.setattr(writer_module, "save_file", fail_on_call(writer_module.save_file, 1))
    elif kind == "third_save":
        monkeypatch.setattr(writer_module, "save_file", fail_on_call(writer_module.save_file, 3))
    elif kind == "commit":
        monkeypatch.setattr(job_module, "commit", fail_on_call(job_module.commit, 1))
    elif kind == "move_second_shard":
        real_replace = os.replace
        calls = [0]

        def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            moving_in = STAGING not in Path(os.fspath(dst)).parts
            if STAGING in Path(os.fspath(src)).parts and moving_in:
                calls[0] += 1
                if calls[0] == 2:
                    raise OSError("injected: disk full")
            real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
    elif kind == "manifest_write":
        monkeypatch.setattr(LocalStore, "write_if", fail_on_call(LocalStore.write_if, 1))
    elif kind == "index_write":
        options["generate_index"] = True
        # the index is built before the commit point: a failure there commits nothing
        monkeypatch.setattr(
            writer_module, "index_bytes", fail_on_call(writer_module.index_bytes, 1)
        )
    else:  # pragma: no cover
        raise AssertionError(kind)
    return good, options


FAILURES = [
    "conversion",
    "ragged",
    "duplicate",
    "first_save",
    "third_save",
    "commit",
    "move_second_shard",
    "manifest_write",
    "index_write",
]


@pytest.mark.parametrize("mode", ["overwrite", "append"])
@pytest.mark.parametrize("kind", FAILURES)
@pytest.mark.parametrize("with_index", [False, True])
def test_a_failed_write_leaves_the_previous_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, kind: str, with_index: bool
) -> None:
    cols = cols_a(7)
    dataset.write(cols, tmp_path, batch_size=3, generate_index=with_index)
    before = snapshot(tmp_path)
    data, options = _inject(kind, monkeypatch)
    with pytest.raises((TensorFileError, RuntimeError, OSError)):
        dataset.write(data, tmp_path, mode=mode, **options)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before  # manifest, shards, index: byte-identical, nothing new
    assert not (tmp_path / STAGING).exists()
    assert shard_files(tmp_path) == listed_shards(tmp_path)
    assert_samples(list(dataset.open(tmp_path)), expected_rows(cols, 7))
    # and the folder still takes a write afterwards
    dataset.write(cols_b(5), tmp_path, batch_size=2, mode="append")
    assert assert_valid_manifest(tmp_path)["total_samples"] == 12


@pytest.mark.parametrize("kind", FAILURES)
def test_a_failed_first_write_leaves_no_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    out = tmp_path / "ds"
    data, options = _inject(kind, monkeypatch)
    with pytest.raises((TensorFileError, RuntimeError, OSError)):
        dataset.write(data, out, **options)
    monkeypatch.undo()
    if out.exists():
        assert shard_files(out) == []
        assert not (out / STAGING).exists()
        assert not (out / "dataset_manifest.json").exists()


def test_an_interrupted_write_leaves_the_previous_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset.write(cols_a(), tmp_path, batch_size=3)
    before = snapshot(tmp_path)

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_module, "save_file", interrupt)
    with pytest.raises(KeyboardInterrupt):
        dataset.write(cols_b(), tmp_path, batch_size=2)
    assert snapshot(tmp_path) == before
    assert load_manifest(tmp_path)["total_samples"] == 7
