"""tensorfile.dataset.open: schema, len, random access, iteration, batches, to_torch (with
DataLoader workers), and files the manifest does not list."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tensorfile import dataset
from tensorfile.errors import FormatError, InvalidArgumentError
from tensorfile.safetensors.numpy import save_file
from tests.helpers.manifests import listed_shards, load_manifest
from tests.helpers.samples import assert_same, assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]


def batch_cols(n: int = 10) -> dict[str, NDArray]:
    rng = np.random.default_rng(3)
    return {
        "img": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "half": rng.standard_normal((n, 2)).astype(ml_dtypes.bfloat16),
        "mask": rng.integers(0, 2, (n, 3)).astype(bool),
        "label": np.arange(n, dtype=np.int64) + 2**60,
    }


def kv_cols(n: int = 7) -> dict[str, Any]:
    rng = np.random.default_rng(4)
    return {
        "name": [f"doc{i}" for i in range(n)],
        "emb": rng.standard_normal((n, 5)).astype(np.float16),
        "ids": rng.integers(0, 1000, (n, 3)).astype(np.int32),
    }


@pytest.fixture
def batch_ds(tmp_path: Path) -> tuple[Path, dict[str, NDArray]]:
    cols = batch_cols(10)
    dataset.write(cols, tmp_path / "b", batch_size=4)
    return tmp_path / "b", cols


@pytest.fixture
def kv_ds(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    cols = kv_cols(7)
    dataset.write(cols, tmp_path / "kv", name_col="name", target_shard_size_mb=60 / 2**20)
    return tmp_path / "kv", cols


def kv_expected(cols: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        n: {"key": n, **{c: np.asarray(v)[i] for c, v in cols.items() if c != "name"}}
        for i, n in enumerate(cols["name"])
    }


# -- description ------------------------------------------------------------------------------


def test_batch_schema_and_len(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, _ = batch_ds
    ds = dataset.open(path)
    assert len(ds) == 10
    assert ds.mode == "batch"
    assert sorted(ds.columns) == ["half", "img", "label", "mask"]
    assert ds.schema == {
        "img": {"dtype": "F32", "shape": [2, 3]},
        "half": {"dtype": "BF16", "shape": [2]},
        "mask": {"dtype": "BOOL", "shape": [3]},
        "label": {"dtype": "I64", "shape": []},
    }
    assert [s.samples_count for s in ds.shards] == [4, 4, 2]


def test_kv_schema_and_len(kv_ds: tuple[Path, dict[str, Any]]) -> None:
    path, _ = kv_ds
    ds = dataset.open(path)
    assert len(ds) == 7
    assert ds.mode == "kv"
    assert len(ds.shards) > 1
    assert sorted(ds.columns) == ["emb", "ids"]
    assert ds.schema == {
        "emb": {"dtype": "F16", "shape": [5]},
        "ids": {"dtype": "I32", "shape": [3]},
    }


def test_open_accepts_str_and_pathlike(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, _ = batch_ds
    assert len(dataset.open(str(path))) == len(dataset.open(path)) == 10


# -- samples ----------------------------------------------------------------------------------


def test_batch_iteration_equals_input(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, cols = batch_ds
    assert_samples(list(dataset.open(path)), expected_rows(cols, 10))


def test_batch_random_access(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, cols = batch_ds
    ds = dataset.open(path)
    want = expected_rows(cols, 10)
    order = [9, 0, 4, 3, 8, 1, 7, 2, 5, 6]  # across shard boundaries, out of order
    assert_samples([ds[i] for i in order], [want[i] for i in order])
    assert_samples([ds[i] for i in range(-10, 0)], want)
    assert_samples([ds[np.int64(3)]], [want[3]])


@pytest.mark.parametrize("index", [10, 11, -11, -100, 10**9])
def test_index_out_of_range(batch_ds: tuple[Path, dict[str, NDArray]], index: int) -> None:
    ds = dataset.open(batch_ds[0])
    with pytest.raises(IndexError):
        ds[index]


def test_random_access_of_a_padded_dataset(tmp_path: Path) -> None:
    cols = {"v": np.arange(1, 7, dtype=np.int32).reshape(3, 2)}
    dataset.write(cols, tmp_path, batch_size=2, tail_strategy="pad")
    ds = dataset.open(tmp_path)
    assert len(ds) == 3
    assert_same(ds[-1]["v"], np.array([5, 6], np.int32))
    assert_same(ds[2]["v"], np.array([5, 6], np.int32))
    with pytest.raises(IndexError):
        ds[3]  # the padding row is not a sample
    assert_samples(list(ds), expected_rows(cols, 3))


def test_kv_iteration_and_random_access(kv_ds: tuple[Path, dict[str, Any]]) -> None:
    path, cols = kv_ds
    want = kv_expected(cols)
    ds = dataset.open(path)
    got = list(ds)
    assert sorted(s["key"] for s in got) == sorted(want)
    assert_samples(got, [want[s["key"]] for s in got])
    # ds[i] is the i-th sample of the iteration, negative indices count from the end
    assert_samples([ds[i] for i in range(len(ds))], got)
    assert_samples([ds[i] for i in range(-len(ds), 0)], got)
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds[-len(ds) - 1]


def test_many_shards_random_access(tmp_path: Path) -> None:
    """More shards than the reader keeps open at once."""
    cols = {"v": np.arange(120, dtype=np.int64).reshape(40, 3)}
    dataset.write(cols, tmp_path, batch_size=1)
    assert len(listed_shards(tmp_path)) == 40
    with dataset.open(tmp_path) as ds:
        order = np.random.default_rng(0).permutation(40).tolist() * 2
        for i in order:
            assert_same(ds[i]["v"], cols["v"][i])
        assert_samples(list(ds), expected_rows(cols, 40))


def test_iterating_twice_gives_the_same(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    ds = dataset.open(batch_ds[0])
    first = list(ds)
    assert_samples(list(ds), first)


# -- batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "sizes"), [(3, [3, 3, 3, 1]), (4, [4, 4, 2]), (10, [10]), (64, [10])]
)
def test_batches(batch_ds: tuple[Path, dict[str, NDArray]], n: int, sizes: list[int]) -> None:
    path, cols = batch_ds
    batches = list(dataset.open(path).batches(n))
    assert [len(b["label"]) for b in batches] == sizes
    for c, v in cols.items():
        assert_same(np.concatenate([b[c] for b in batches]), v)
        assert batches[0][c].shape == (sizes[0], *v.shape[1:])


def test_kv_batches(kv_ds: tuple[Path, dict[str, Any]]) -> None:
    path, cols = kv_ds
    want = kv_expected(cols)
    batches = list(dataset.open(path).batches(3))
    assert [len(b["key"]) for b in batches] == [3, 3, 1]
    keys = [k for b in batches for k in b["key"]]
    assert sorted(keys) == sorted(want)
    for c in ("emb", "ids"):
        got = np.concatenate([b[c] for b in batches])
        assert_same(got, np.stack([want[k][c] for k in keys]))


@pytest.mark.parametrize("n", [0, -1])
def test_batches_rejects_non_positive_sizes(
    batch_ds: tuple[Path, dict[str, NDArray]], n: int
) -> None:
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        next(iter(dataset.open(batch_ds[0]).batches(n)))


# -- torch ------------------------------------------------------------------------------------


def test_to_torch_batch(tmp_path: Path) -> None:
    cols = {k: v for k, v in batch_cols(10).items() if k != "label"}
    cols["ids"] = np.arange(20, dtype=np.int64).reshape(10, 2) + 2**60
    dataset.write(cols, tmp_path, batch_size=4)
    it = dataset.open(tmp_path).to_torch()
    assert isinstance(it, IterableDataset)
    got = list(it)
    assert len(got) == 10
    torch_types = {"img": torch.float32, "half": torch.bfloat16, "mask": torch.bool}
    for i, sample in enumerate(got):
        assert set(sample) == set(cols)
        for c, t in torch_types.items():
            assert sample[c].dtype == t
            assert tuple(sample[c].shape) == cols[c].shape[1:]
        assert_same(sample["img"].numpy(), cols["img"][i])
        assert sample["half"].view(torch.int16).numpy().tobytes() == cols["half"][i].tobytes()
        assert sample["mask"].tolist() == cols["mask"][i].tolist()
        assert sample["ids"].tolist() == cols["ids"][i].tolist()  # exact beyond 2**53


def test_to_torch_scalar_columns(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, cols = batch_ds
    got = list(dataset.open(path).to_torch())
    assert [s["label"].dtype for s in got] == [torch.int64] * 10
    assert [s["label"].shape for s in got] == [torch.Size([])] * 10
    assert [int(s["label"]) for s in got] == [int(v) for v in cols["label"]]


def test_to_torch_kv(kv_ds: tuple[Path, dict[str, Any]]) -> None:
    path, cols = kv_ds
    want = kv_expected(cols)
    got = list(dataset.open(path).to_torch())
    assert sorted(s["key"] for s in got) == sorted(want)
    for s in got:
        assert s["emb"].dtype == torch.float16
        assert s["ids"].dtype == torch.int32
        assert_same(s["emb"].numpy(), want[s["key"]]["emb"])
        assert_same(s["ids"].numpy(), want[s["key"]]["ids"])


def test_dataloader_workers_see_every_sample_once(tmp_path: Path) -> None:
    n = 23
    cols = {
        "sid": np.stack([np.arange(n), -np.arange(n)], axis=1).astype(np.int64),
        "x": np.arange(n * 3, dtype=np.float32).reshape(n, 3),
    }
    dataset.write(cols, tmp_path / "b", batch_size=3)  # 8 shards
    names = [f"k{i:02d}" for i in range(n)]
    kv = {"name": names, "x": cols["x"]}
    dataset.write(kv, tmp_path / "kv", name_col="name", target_shard_size_mb=250 / 2**20)
    assert len(listed_shards(tmp_path / "kv")) >= 4

    loader = DataLoader(dataset.open(tmp_path / "b").to_torch(), batch_size=None, num_workers=2)
    got = [int(s["sid"][0]) for s in loader]
    assert sorted(got) == list(range(n))
    loader = DataLoader(dataset.open(tmp_path / "kv").to_torch(), batch_size=None, num_workers=2)
    samples = list(loader)
    assert sorted(s["key"] for s in samples) == names
    for s in samples:
        assert s["x"].tolist() == cols["x"][names.index(s["key"])].tolist()


# -- what the manifest says ---------------------------------------------------------------------


def test_files_the_manifest_does_not_list_are_ignored(
    batch_ds: tuple[Path, dict[str, NDArray]],
) -> None:
    path, cols = batch_ds
    shard = listed_shards(path)[0]
    # a copy under another shard-like name, a stray file of another shape, junk
    shutil.copy(
        path / shard, path / "part-00007-0000-00000000-0000-0000-0000-000000000000.safetensors"
    )
    save_file({"img": np.zeros((5, 2, 3), np.float32)}, str(path / "stray.safetensors"))
    (path / "notes.txt").write_text("not a shard")
    (path / "_SUCCESS").write_text("")
    ds = dataset.open(path)
    assert len(ds) == 10
    assert_samples(list(ds), expected_rows(cols, 10))
    assert_samples([ds[i] for i in range(-10, 0)], expected_rows(cols, 10))


def test_a_missing_listed_shard_is_an_error(batch_ds: tuple[Path, dict[str, NDArray]]) -> None:
    path, _ = batch_ds
    missing = listed_shards(path)[1]
    os.unlink(path / missing)
    with pytest.raises(FormatError, match=missing):
        dataset.open(path)


def test_open_needs_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        dataset.open(tmp_path / "nothing-here")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidArgumentError):
        dataset.open(tmp_path / "file")


def test_manifest_shard_order_is_the_sample_order(tmp_path: Path) -> None:
    cols = {"v": np.arange(9, dtype=np.int16)}
    dataset.write(cols, tmp_path, batch_size=2)
    doc = load_manifest(tmp_path)
    assert [s["shard_path"] for s in doc["shards"]] == sorted(
        s["shard_path"] for s in doc["shards"]
    )
    assert [int(s["v"]) for s in dataset.open(tmp_path)] == list(range(9))
