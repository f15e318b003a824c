"""Datasets on object stores: a real S3 API server on 127.0.0.1 (moto, server mode) through
s3fs, and fsspec's memory filesystem; ``file://`` URLs are local folders.

What must hold (issue 13): writes, reads, overwrite and append on ``s3://`` as on disk; the
manifest is the single commit point, so a failure at any step leaves exactly the previous
dataset readable and no shard outside the manifest (nor anything under ``_staging``); an
overwrite deletes only what the previous manifest listed; every shard loads with the
reference ``safetensors``; the manifest validates against the schema; a lying manifest or a
failing server is a tensorfile error naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

from tensorfile import dataset
from tensorfile.dataset.layout.storage import storage_for
from tensorfile.dataset.writing import writer as writer_module
from tensorfile.errors import (
    FormatError,
    InvalidArgumentError,
    SourceError,
    TensorFileError,
)
from tensorfile.sources import FsspecStore, LocalStore
from tests.helpers.datasets import cols_a, cols_b, fail_on_call
from tests.helpers.manifests import schema_errors
from tests.helpers.samples import assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]


def _state(s3: Any, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` and its bytes."""
    fs = s3.fs
    return {k: fs.cat_file(f"{prefix}/{k}") for k in s3.keys(prefix)}


def _manifest(s3: Any, prefix: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(s3.fs.cat_file(f"{prefix}/dataset_manifest.json"))
    return doc


def _shards_in(s3: Any, prefix: str) -> list[str]:
    return [k for k in s3.keys(prefix) if k.endswith(".safetensors")]


def _listed(s3: Any, prefix: str) -> list[str]:
    return sorted(s["shard_path"] for s in _manifest(s3, prefix)["shards"])


@pytest.fixture
def ds_url(s3: Any) -> tuple[str, str]:
    """(s3:// URL of a dataset, its bucket/prefix) in a new bucket."""
    bucket = s3.bucket()
    return s3.url(bucket, "data", "ds"), f"{bucket}/data/ds"


def test_batch_dataset_round_trip_on_s3(s3: Any, ds_url: tuple[str, str]) -> None:
    url, prefix = ds_url
    cols = cols_a(10)
    m = dataset.write(cols, url, batch_size=3, storage_options=s3.options)
    assert m.total_samples == 10
    doc = _manifest(s3, prefix)
    assert schema_errors(doc) == []
    assert _shards_in(s3, prefix) == _listed(s3, prefix)  # nothing else, no _staging
    assert not any(k.startswith("_staging") for k in s3.keys(prefix))
    with dataset.open(url, storage_options=s3.options) as ds:
        assert len(ds) == 10
        assert_samples(list(ds), expected_rows(cols, 10))
    # every shard, fetched as bytes, loads with the reference library
    rows = []
    for entry in doc["shards"]:
        blob = s3.fs.cat_file(f"{prefix}/{entry['shard_path']}")
        assert len(blob) == entry["bytes"]
        rows.append(safetensors.numpy.load(blob)["x"])
    np.testing.assert_array_equal(np.concatenate(rows), cols["x"])


def test_kv_dataset_with_index_on_s3(s3: Any, ds_url: tuple[str, str]) -> None:
    url, prefix = ds_url
    keys = [f"k{i}" for i in range(9)]
    values = np.arange(27, dtype=np.float32).reshape(9, 3)
    dataset.write(
        {"name": keys, "v": values},
        url,
        name_col="name",
        generate_index=True,
        target_shard_size_mb=0.0001,
        storage_options=s3.options,
    )
    assert "_tensor_index.parquet" in s3.keys(prefix)
    with dataset.open(url, storage_options=s3.options) as ds:
        np.testing.assert_array_equal(ds.get("k7")["v"], values[7])
        assert "k3" in ds and "nope" not in ds


def test_overwrite_and_append_on_s3(s3: Any, ds_url: tuple[str, str]) -> None:
    url, prefix = ds_url
    dataset.write(cols_a(7), url, batch_size=3, storage_options=s3.options, generate_index=True)
    first = _listed(s3, prefix)
    # a file of someone else's in the folder, named like a shard but not listed: kept
    foreign = "part-00009-0000-00000000-0000-0000-0000-000000000000.safetensors"
    s3.fs.pipe_file(f"{prefix}/{foreign}", b"not ours")
    s3.fs.pipe_file(f"{prefix}/notes.txt", b"keep me")
    dataset.write(cols_b(5), url, batch_size=2, storage_options=s3.options)
    second = _listed(s3, prefix)
    assert not set(first) & set(second)
    left = s3.keys(prefix)
    assert not set(first) & set(left)  # the previous dataset's shards are gone
    assert foreign in left and "notes.txt" in left
    assert "_tensor_index.parquet" not in left  # the new dataset has none: the old one went
    dataset.write(cols_a(3), url, batch_size=2, mode="append", storage_options=s3.options)
    with dataset.open(url, storage_options=s3.options) as ds:
        # (the manifest lists shards by name, so appended samples need not come last)
        got = sorted((int(r["id"]), r["x"].tolist()) for r in ds)
    both = (cols_a(3), cols_b(5))
    want = [(int(i), x.tolist()) for c in both for i, x in zip(*c.values(), strict=True)]
    assert got == sorted(want)
    assert schema_errors(_manifest(s3, prefix)) == []


FAILURES = ["second_save", "second_move", "manifest_write", "index_build"]


def _inject(kind: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    options: dict[str, Any] = {"batch_size": 2}
    if kind == "second_save":
        monkeypatch.setattr(writer_module, "save_file", fail_on_call(writer_module.save_file, 2))
    elif kind == "second_move":
        monkeypatch.setattr(FsspecStore, "move", fail_on_call(FsspecStore.move, 2))
    elif kind == "manifest_write":
        monkeypatch.setattr(FsspecStore, "write_if", fail_on_call(FsspecStore.write_if, 1))
    elif kind == "index_build":
        options["generate_index"] = True
        monkeypatch.setattr(
            writer_module, "index_bytes", fail_on_call(writer_module.index_bytes, 1)
        )
    else:  # pragma: no cover
        raise AssertionError(kind)
    return options


@pytest.mark.parametrize("mode", ["overwrite", "append"])
@pytest.mark.parametrize("kind", FAILURES)
def test_a_failed_write_leaves_the_previous_dataset_on_s3(
    s3: Any, ds_url: tuple[str, str], monkeypatch: pytest.MonkeyPatch, kind: str, mode: str
) -> None:
    url, prefix = ds_url
    cols = cols_a(7)
    dataset.write(cols, url, batch_size=3, storage_options=s3.options)
    before = _state(s3, prefix)
    options = _inject(kind, monkeypatch)
    with pytest.raises((TensorFileError, RuntimeError)):
        dataset.write(cols_b(5), url, mode=mode, storage_options=s3.options, **options)
    monkeypatch.undo()
    assert _state(s3, prefix) == before  # byte for byte, nothing new, nothing staged
    with dataset.open(url, storage_options=s3.options) as ds:
        assert_samples(list(ds), expected_rows(cols, 7))


def test_staged_leftovers_of_a_killed_job_are_not_part_of_the_dataset(
    s3: Any, ds_url: tuple[str, str]
) -> None:
    url, prefix = ds_url
    dataset.write(cols_a(4), url, batch_size=2, storage_options=s3.options)
    # a job whose driver died after its tasks wrote: shards staged, never committed
    staged = "_staging/deadjob/task-00000-000000000000/"
    name = "part-00000-0000-11111111-2222-3333-4444-555555555555.safetensors"
    s3.fs.pipe_file(f"{prefix}/{staged}{name}", b"staged")
    with dataset.open(url, storage_options=s3.options) as ds:
        assert len(ds) == 4
    assert name not in _shards_in(s3, prefix)


def test_lying_manifest_on_s3(s3: Any, ds_url: tuple[str, str]) -> None:
    url, prefix = ds_url
    dataset.write(cols_a(4), url, batch_size=2, storage_options=s3.options)
    doc = _manifest(s3, prefix)
    good = json.dumps(doc).encode()
    # a listed size that is not the object's
    doc["shards"][0]["bytes"] += 1
    doc["total_bytes"] += 1
    s3.fs.pipe_file(f"{prefix}/dataset_manifest.json", json.dumps(doc).encode())
    with pytest.raises(FormatError, match=r"has .* bytes, the file has"):
        dataset.open(url, storage_options=s3.options)
    # a shard path out of the folder
    s3.fs.pipe_file(f"{prefix}/dataset_manifest.json", good)
    doc = json.loads(good)
    doc["shards"][0]["shard_path"] = "../other/x.safetensors"
    s3.fs.pipe_file(f"{prefix}/dataset_manifest.json", json.dumps(doc).encode())
    with pytest.raises(FormatError):
        dataset.open(url, storage_options=s3.options)
    # a listed shard that is missing
    doc = json.loads(good)
    s3.fs.rm_file(f"{prefix}/{doc['shards'][1]['shard_path']}")
    s3.fs.pipe_file(f"{prefix}/dataset_manifest.json", good)
    with pytest.raises(FormatError, match="missing"):
        dataset.open(url, storage_options=s3.options)


def test_huge_manifest_on_s3_is_refused_unread(
    s3: Any, ds_url: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, prefix = ds_url
    from tensorfile.dataset.layout import manifest as manifest_module

    monkeypatch.setattr(manifest_module, "MAX_MANIFEST_BYTES", 1000)
    s3.fs.pipe_file(f"{prefix}/dataset_manifest.json", b" " * 5000)
    reads: list[Any] = []
    real = type(s3.fs).cat_file

    def spy(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(type(s3.fs), "cat_file", spy)
    with pytest.raises(FormatError, match="over 1000 bytes"):
        dataset.open(url, storage_options=s3.options)
    assert reads == []  # refused from its size, before a byte was fetched


def test_a_dead_server_is_a_source_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "key": "testing",
        "secret": "testing",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    with pytest.raises(SourceError) as err:
        dataset.open("s3://bucket/ds", storage_options=options)
    assert "s3://bucket/ds" in str(err.value)
    with pytest.raises(SourceError):
        dataset.write(cols_a(2), "s3://bucket/ds", batch_size=2, storage_options=options)


def test_a_missing_bucket_is_an_error_and_not_created(s3: Any) -> None:
    bad = dict(s3.options, secret="wrong-secret-value-1234")
    with pytest.raises(SourceError) as err:
        dataset.write(cols_a(2), "s3://no-such-bucket-xyz/ds", batch_size=2, storage_options=bad)
    assert "s3://no-such-bucket-xyz/ds" in str(err.value)
    assert "wrong-secret-value-1234" not in str(err.value)
    assert not s3.fs.exists("no-such-bucket-xyz")
    with pytest.raises(InvalidArgumentError, match="not a dataset folder"):
        dataset.open("s3://no-such-bucket-xyz/ds", storage_options=s3.options)


def test_memory_filesystem_round_trip() -> None:
    url = "memory://tf-ds-tests/one"
    cols = cols_a(5)
    dataset.write(cols, url, batch_size=2, generate_index=True)
    with dataset.open(url) as ds:
        assert_samples(list(ds), expected_rows(cols, 5))
    dataset.write(cols_b(3), url, batch_size=2)
    with dataset.open(url) as ds:
        assert_samples(list(ds), expected_rows(cols_b(3), 3))


def test_file_url_is_the_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before issue 13, file:///tmp/x created a folder literally named "file:"
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "ds dir"
    url = "file://" + str(target).replace(" ", "%20")
    dataset.write(cols_a(3), url, batch_size=2)
    assert (target / "dataset_manifest.json").is_file()
    assert not (tmp_path / "file:").exists()
    with dataset.open(url) as ds:
        assert len(ds) == 3
    with dataset.open(str(target)) as ds:
        assert len(ds) == 3


def test_storage_for_rules(tmp_path: Path) -> None:
    assert isinstance(storage_for(tmp_path), LocalStore)
    assert isinstance(storage_for("relative/dir"), LocalStore)
    assert isinstance(storage_for("s3://b/p", {"anon": True}), FsspecStore)
    with pytest.raises(InvalidArgumentError):
        storage_for("file:///x", {"anon": True})
    with pytest.raises(InvalidArgumentError):
        storage_for("s3://b/p", "anon")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        storage_for(42)  # type: ignore[arg-type]
    # a storage is picklable with its options (a Spark job ships it to executors)
    import pickle

    s = pickle.loads(pickle.dumps(storage_for("memory://x/y", {"a": 1})))
    assert isinstance(s, FsspecStore) and s.options == {"a": 1} and s.root == "memory://x/y"
    assert os.fspath(storage_for(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_late_task_of_an_ended_job_removes_what_it_wrote(
    s3: Any, tmp_path: Path, where: str
) -> None:
    from tensorfile.dataset.writing.columns import columns_and_keys
    from tensorfile.dataset.writing.options import parse_options

    url = str(tmp_path / "ds") if where == "local" else s3.url(s3.bucket(), "ds")
    opts_ = {} if where == "local" else {"storage_options": s3.options}
    store = writer_module.make_folder(url, opts_.get("storage_options"))
    opts = parse_options({"batch_size": 2})
    cols, rows, keys = columns_and_keys(cols_a(4), opts)
    writer_module.start_job(store, "job1")
    early = writer_module.staging_folder(store, "job1", 0)
    result = writer_module.write_task(cols, rows, keys, opts, early, 0, store)
    late = writer_module.staging_folder(store, "job1", 1)
    writer_module.commit(store, [result], mode="overwrite", opts=opts, job="job1")
    # the job is committed; a speculative or killed attempt finishes only now
    with pytest.raises(SourceError, match="job ended"):
        writer_module.write_task(cols, rows, keys, opts, late, 1, store)
    names = store.list_files() + store.list_files("_staging") + store.list_files(late)
    assert not any(n.startswith("part-00001") for n in names)
    with dataset.open(store) as ds:
        assert len(ds) == 4
