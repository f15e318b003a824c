"""Padded tails (``tail_strategy="pad"``): the manifest describes the shards as stored, as the
reference connector writes it (a padded shard's ``samples_count`` is its number of rows, the
batch size), and keeps the real rows of each padded shard in ``tensorfile.real_samples``;
readers give the real rows only, and a manifest whose ``real_samples`` lies is refused with
a FormatError before any sample is read."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from tensorfile import dataset
from tensorfile.dataset import Manifest, ShardEntry
from tensorfile.errors import FormatError, InvalidArgumentError
from tests.helpers.checkpoints import reference_load
from tests.helpers.lying_datasets import MANIFEST, edit_manifest
from tests.helpers.manifests import assert_valid_manifest, load_manifest, schema_errors
from tests.helpers.samples import assert_same, assert_samples, expected_rows

NDArray = np.ndarray[Any, Any]
Doc = dict[str, Any]


def columns(n: int) -> dict[str, NDArray]:
    """Columns whose every real row is non-zero, so a padding row read as data would show."""
    return {
        "id": np.arange(1, n + 1, dtype=np.int64),
        "x": (np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3) + 1),
        "m": np.full((n, 2), 7, np.uint8),
    }


@pytest.fixture
def padded(tmp_path: Path) -> tuple[Path, dict[str, NDArray]]:
    """10 rows in batches of 4: shards of 4, 4 and 2 real rows, the last padded to 4."""
    cols = columns(10)
    dataset.write(cols, tmp_path / "ds", batch_size=4, tail_strategy="pad")
    return tmp_path / "ds", cols


# -- the manifest -----------------------------------------------------------------------------


def test_manifest_describes_the_shards_as_stored(padded: tuple[Path, Any]) -> None:
    folder, cols = padded
    doc = assert_valid_manifest(folder)  # jsonschema of the spec, totals, names, sizes
    assert schema_errors(doc) == []
    assert [s["samples_count"] for s in doc["shards"]] == [4, 4, 4]
    assert doc["total_samples"] == 12
    assert doc["schema"]["x"] == {"dtype": "F32", "shape": [4, 2, 3]}
    last = doc["shards"][-1]["shard_path"]
    assert doc["tensorfile"]["real_samples"] == {last: 2}  # only the padded shard is named
    for s in doc["shards"]:  # each shard stores samples_count rows
        tensors = reference_load(folder, s["shard_path"])
        assert {k: v.shape[0] for k, v in tensors.items()} == dict.fromkeys(cols, 4)
    tail = reference_load(folder, last)
    assert_same(tail["id"], np.array([9, 10, 0, 0], np.int64))
    assert not tail["x"][2:].any() and not tail["m"][2:].any()


def test_manifest_object(padded: tuple[Path, Any]) -> None:
    folder, _ = padded
    m = dataset.read_manifest(str(folder))
    assert m is not None
    assert (m.total_samples, m.real_total) == (12, 10)
    assert [(s.samples_count, s.samples, s.padding) for s in m.shards] == [
        (4, 4, 0),
        (4, 4, 0),
        (4, 2, 2),
    ]
    assert [s.real_samples for s in m.shards] == [None, None, 2]
    assert Manifest.from_json(m.to_json()) == m  # the document round-trips


def test_without_padding_there_is_no_field(tmp_path: Path) -> None:
    for options in ({"batch_size": 5, "tail_strategy": "pad"}, {"batch_size": 3}):
        out = tmp_path / str(len(options))
        dataset.write(columns(10), out, **options)
        assert "real_samples" not in load_manifest(out)["tensorfile"]


def test_the_returned_manifest_matches_the_file(padded: tuple[Path, Any], tmp_path: Path) -> None:
    m = dataset.write(columns(5), tmp_path / "other", batch_size=2, tail_strategy="pad")
    assert (m.total_samples, m.real_total, len(m.shards)) == (6, 5, 3)
    assert m.to_json() == load_manifest(tmp_path / "other")


@pytest.mark.parametrize(
    "real",
    [
        {"a.safetensors": 3},
        {"a.safetensors": 0},
        {"a.safetensors": 4},
    ],
)
def test_shard_entry_and_manifest_roundtrip(real: dict[str, int]) -> None:
    shards = [ShardEntry("a.safetensors", 4, 100, real_samples=real["a.safetensors"])]
    m = Manifest(shards, {"x": {"dtype": "F32", "shape": [4]}}, columns=["x"])
    doc = m.to_json()
    assert doc["tensorfile"]["real_samples"] == real
    assert doc["total_samples"] == 4
    assert Manifest.from_json(doc).shards == shards


@pytest.mark.parametrize("bad", [-1, 5, True, 2.0, "2", None])
def test_shard_entry_refuses_a_bad_real_count(bad: Any) -> None:
    if bad is None:  # None: every row is real
        assert ShardEntry("a.safetensors", 4, 100, real_samples=bad).samples == 4
        return
    with pytest.raises(InvalidArgumentError, match="real_samples"):
        ShardEntry("a.safetensors", 4, 100, real_samples=bad)


# -- reading ----------------------------------------------------------------------------------


def test_len_counts_real_rows_only(padded: tuple[Path, Any]) -> None:
    folder, _ = padded
    ds = dataset.open(folder)
    assert len(ds) == 10
    assert ds.manifest.total_samples == 12
    assert "10 samples" in repr(ds)
    assert [s.samples for s in ds.shards] == [4, 4, 2]


def test_random_access_skips_padding(padded: tuple[Path, Any]) -> None:
    folder, cols = padded
    ds = dataset.open(folder)
    want = expected_rows(cols, 10)
    assert_samples([ds[i] for i in range(10)], want)
    assert_samples([ds[i - 10] for i in range(10)], want)
    assert_samples([ds[np.int64(9)]], want[9:])
    for bad in (10, 11, 12, -11):
        with pytest.raises(IndexError):
            ds[bad]  # the two padding rows are not samples


def test_iteration_and_batches_skip_padding(padded: tuple[Path, Any]) -> None:
    folder, cols = padded
    ds = dataset.open(folder)
    assert_samples(list(ds), expected_rows(cols, 10))
    batches = list(ds.batches(3))
    assert [b["id"].tolist() for b in batches] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    assert_same(np.concatenate([b["x"] for b in batches]), cols["x"])
    shard_ids = [[int(s["id"]) for s in ds.shard_samples(sh)] for sh in ds.shards]
    assert shard_ids == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]


def test_to_torch_skips_padding(padded: tuple[Path, Any]) -> None:
    folder, _ = padded
    ds = dataset.open(folder)
    samples = list(ds.to_torch())
    assert [int(s["id"]) for s in samples] == list(range(1, 11))
    assert all(isinstance(s["x"], torch.Tensor) for s in samples)
    loader = DataLoader(ds.to_torch(), batch_size=None, num_workers=2)
    assert sorted(int(s["id"]) for s in loader) == list(range(1, 11))


def test_several_padded_shards_by_append(tmp_path: Path) -> None:
    """Each write pads its own tail; an append keeps the earlier shards' real counts."""
    out = tmp_path / "ds"
    first, second = columns(5), columns(7)
    second["id"] += 100
    dataset.write(first, out, batch_size=3, tail_strategy="pad")
    dataset.write(second, out, batch_size=3, tail_strategy="pad", mode="append")
    dataset.write(columns(3), out, batch_size=3, mode="append")  # no tail: nothing padded
    doc = assert_valid_manifest(out)
    assert sorted(doc["tensorfile"]["real_samples"].values()) == [1, 2]
    assert doc["total_samples"] == 6 + 9 + 3
    ds = dataset.open(out)
    assert len(ds) == 5 + 7 + 3
    ids = sorted(int(s["id"]) for s in ds)
    assert ids == sorted([*range(1, 6), *range(101, 108), 1, 2, 3])
    assert sorted(int(ds[i]["id"]) for i in range(len(ds))) == ids


def test_a_shard_with_no_real_rows(padded: tuple[Path, Any]) -> None:
    """real_samples 0: the shard is all padding and gives no sample (not a lie)."""
    folder, _ = padded
    middle = load_manifest(folder)["shards"][1]["shard_path"]
    edit_manifest(folder, lambda d: d["tensorfile"]["real_samples"].update({middle: 0}))
    ds = dataset.open(folder)
    assert len(ds) == 6
    assert [int(s["id"]) for s in ds] == [1, 2, 3, 4, 9, 10]
    assert int(ds[4]["id"]) == 9


def test_a_manifest_without_the_field_reads_every_row(padded: tuple[Path, Any]) -> None:
    """The reference's manifest (no tensorfile field) or one without real_samples: every row
    the shards store is a sample, the zero rows included."""
    folder, _ = padded
    edit_manifest(folder, lambda d: d["tensorfile"].pop("real_samples"))
    ds = dataset.open(folder)
    assert len(ds) == 12
    assert [int(s["id"]) for s in ds] == [*range(1, 11), 0, 0]
    edit_manifest(folder, lambda d: d.pop("tensorfile"))
    assert len(dataset.open(folder)) == 12


def test_real_samples_null_means_every_row(padded: tuple[Path, Any]) -> None:
    folder, _ = padded
    edit_manifest(folder, lambda d: d["tensorfile"].update(real_samples=None))
    assert len(dataset.open(folder)) == 12


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 23), batch=st.integers(1, 7))
def test_any_rows_and_batch_size(rows: int, batch: int) -> None:
    cols = {"v": np.arange(1, rows + 1, dtype=np.int32).reshape(rows, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        m = dataset.write(cols, tmp, batch_size=batch, tail_strategy="pad")
        shards = math.ceil(rows / batch)
        assert m.total_samples == shards * batch
        assert [s.samples_count for s in m.shards] == [batch] * shards
        assert m.real_total == rows
        assert schema_errors(load_manifest(tmp)) == []
        ds = dataset.open(tmp)
        assert len(ds) == rows
        assert [int(s["v"][0]) for s in ds] == list(range(1, rows + 1))
        assert int(ds[-1]["v"][0]) == rows


# -- lies -------------------------------------------------------------------------------------


def _real(value: Any, shard: int = 2) -> Callable[[Doc], None]:
    """Set real_samples of shard ``shard`` (the padded one is 2) to ``value``."""

    def change(d: Doc) -> None:
        d["tensorfile"]["real_samples"] = {d["shards"][shard]["shard_path"]: value}

    return change


def _field(value: Any) -> Callable[[Doc], None]:
    return lambda d: d["tensorfile"].update(real_samples=value)


# name -> (lie, words the message must hold)
LIES: dict[str, tuple[Callable[[Doc], None], list[str]]] = {
    "more-than-stored": (_real(5), ["real_samples", "from 0 to its samples_count (4)", "5"]),
    "huge": (_real(2**70), ["real_samples", str(2**70)[:20]]),
    "negative": (_real(-1), ["real_samples", "-1"]),
    "float": (_real(2.0), ["real_samples", "2.0"]),
    "string": (_real("2"), ["real_samples", "'2'"]),
    "bool-true": (_real(True), ["real_samples", "True"]),
    "bool-false": (_real(False), ["real_samples", "False"]),
    "null-count": (_real(None), ["real_samples", "None"]),
    "list-count": (_real([2]), ["real_samples", "an array"]),
    "unknown-shard": (
        _field({"part-00000-0009-00000000-0000-0000-0000-000000000000.safetensors": 1}),
        ["real_samples", "not a shard the manifest lists"],
    ),
    "names-the-manifest": (_field({MANIFEST: 1}), ["not a shard the manifest lists"]),
    "path-outside": (_field({"../x.safetensors": 1}), ["not a shard the manifest lists"]),
    "field-array": (_field([2]), ["real_samples", "an array, not an object"]),
    "field-number": (_field(2), ["real_samples", "a number, not an object"]),
    "field-string": (_field("2"), ["real_samples", "a string, not an object"]),
}


@pytest.mark.parametrize("name", sorted(LIES))
def test_a_lying_real_samples_fails_open(padded: tuple[Path, Any], name: str) -> None:
    folder, _ = padded
    lie, words = LIES[name]
    edit_manifest(folder, lie)
    with pytest.raises(FormatError) as err:
        dataset.open(folder)
    text = str(err.value)
    assert str(folder) in text and MANIFEST in text
    for word in words:
        assert word in text, text
    # (the torch feed reads the manifest its dataset was opened with: no other way in)


def test_real_samples_in_a_kv_dataset_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "kv"
    dataset.write({"name": ["a", "b"], "v": np.ones((2, 2), np.float32)}, out, name_col="name")
    edit_manifest(out, _real(1, shard=0))
    with pytest.raises(FormatError, match="real_samples is for batch-mode datasets"):
        dataset.open(out)
    edit_manifest(out, _field({}))  # an empty object says nothing: fine
    assert len(dataset.open(out)) == 2


def test_only_counts_within_the_shard_are_accepted(padded: tuple[Path, Any]) -> None:
    """A count from 0 to samples_count gives that many leading rows of the shard; any other
    is refused at open, before a row is read (never a crash, never rows past the tensors)."""
    folder, _ = padded
    path = load_manifest(folder)["shards"][2]["shard_path"]
    stored = [*range(1, 11), 0, 0]
    for value in range(-2, 8):
        edit_manifest(folder, _field({path: value}))
        if not 0 <= value <= 4:
            with pytest.raises(FormatError, match="from 0 to its samples_count"):
                dataset.open(folder)
            continue
        ds = dataset.open(folder)
        assert len(ds) == 8 + value
        assert [int(s["id"]) for s in ds] == stored[: 8 + value]


def test_the_written_manifest_is_plain_json(padded: tuple[Path, Any]) -> None:
    folder, _ = padded
    raw = (folder / MANIFEST).read_text()
    doc = json.loads(raw)
    assert isinstance(doc["tensorfile"]["real_samples"], dict)
    assert os.path.basename(next(iter(doc["tensorfile"]["real_samples"]))).startswith("part-")
