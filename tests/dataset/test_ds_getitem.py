"""``ds[...]`` by key and by position: a key-value dataset takes its keys in ``[]`` (as
``get``), a batch dataset says it is indexed by position, and no index type falls through
to a raw Python error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.errors import InvalidArgumentError, InvalidTypeError, TensorNotFoundError
from tests.helpers.samples import assert_samples


def _kv(tmp_path: Path, index: bool = False) -> dataset.Dataset:
    out = tmp_path / ("kv-index" if index else "kv")
    names = [f"doc{i}" for i in range(12)]
    dataset.write(
        {"id": names, "v": np.arange(24, dtype=np.float32).reshape(12, 2)},
        out,
        name_col="id",
        target_shard_size_mb=0.0002,  # several shards
        generate_index=index,
    )
    return dataset.open(out)


def _batch(tmp_path: Path) -> dataset.Dataset:
    dataset.write({"x": np.arange(8, dtype=np.int32).reshape(4, 2)}, tmp_path / "b", batch_size=2)
    return dataset.open(tmp_path / "b")


@pytest.mark.parametrize("index", [False, True], ids=["headers", "index"])
def test_kv_key_lookup_by_brackets_is_get(tmp_path: Path, index: bool) -> None:
    ds = _kv(tmp_path, index)
    assert len(ds.shards) > 1
    got = ds["doc7"]
    assert got["key"] == "doc7"
    assert got["v"].tolist() == [14.0, 15.0]
    keys = ("doc0", "doc11", "doc7")
    assert_samples([ds[k] for k in keys], [ds.get(k) for k in keys])
    assert_samples([ds[np.str_("doc3")]], [ds.get("doc3")])  # numpy strings are strings


def test_kv_integer_index_stays_positional(tmp_path: Path) -> None:
    ds = _kv(tmp_path)
    samples = list(ds)
    assert_samples([ds[i] for i in range(len(ds))], samples)
    assert_samples([ds[-1], ds[np.int64(2)]], [samples[-1], samples[2]])


def test_kv_missing_key_is_the_not_found_error(tmp_path: Path) -> None:
    ds = _kv(tmp_path)
    for missing in ("doc99", "", "7", "doc7__v"):
        with pytest.raises(TensorNotFoundError, match="no sample with key") as caught:
            ds[missing]
        assert isinstance(caught.value, KeyError)  # except KeyError works, as for a dict


def test_kv_membership_by_key(tmp_path: Path) -> None:
    ds = _kv(tmp_path)
    assert "doc7" in ds
    assert "doc99" not in ds
    with pytest.raises(InvalidTypeError, match="a key is a string"):
        _ = 7 in ds


def test_batch_dataset_refuses_a_key_and_says_why(tmp_path: Path) -> None:
    ds = _batch(tmp_path)
    with pytest.raises(
        InvalidTypeError, match=r"indexed by position, an integer \(ds\[0\] to ds\[3\]\)"
    ) as c:
        ds["x"]
    assert isinstance(c.value, TypeError)
    assert isinstance(c.value, InvalidArgumentError)
    assert "name_col" in str(c.value)
    with pytest.raises(InvalidTypeError, match="no keys"):
        _ = "x" in ds


@pytest.mark.parametrize("bad", [True, False, np.True_, 1.0, 2.5, None, b"doc7", [0], slice(0, 2)])
@pytest.mark.parametrize("kind", ["batch", "kv"])
def test_non_integer_non_string_index_is_a_type_error(tmp_path: Path, kind: str, bad: Any) -> None:
    ds = _batch(tmp_path) if kind == "batch" else _kv(tmp_path)
    with pytest.raises(InvalidTypeError, match="must be an integer") as caught:
        ds[bad]
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize("bad", [7, None, b"doc7", 1.5])
def test_get_with_a_key_that_is_not_a_string(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidTypeError, match="a key is a string"):
        _kv(tmp_path).get(bad)


@pytest.mark.parametrize("bad", [True, 2.0, "2", None])
def test_batches_size_of_the_wrong_type(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidTypeError, match="batch_size must be an integer"):
        next(iter(_batch(tmp_path).batches(bad)))
