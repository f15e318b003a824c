"""Lying manifests on read: every lie is a FormatError (or, for what is not a file, a
SourceError) that says what is wrong and where, from dataset.open or, for lies only the shard
headers show, from the first access (ds[i], iteration, batches, get, to_torch); FIFOs are
refused without blocking; nothing else escapes."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile import dataset
from tensorfile.errors import FormatError, SourceError, TensorFileError
from tensorfile.safetensors.numpy import save_file
from tests.helpers.lying_datasets import MANIFEST, edit_manifest, fifo_guard, write_manifest
from tests.helpers.manifests import listed_shards, load_manifest

Doc = dict[str, Any]
Lie = Callable[[Doc], Any]


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    out = tmp_path / "b"
    dataset.write({"x": np.arange(20, dtype=np.float32).reshape(10, 2)}, out, batch_size=4)
    return out


@pytest.fixture
def kv(tmp_path: Path) -> Path:
    out = tmp_path / "kv"
    names = [f"k{i}" for i in range(6)]
    dataset.write(
        {"name": names, "v": np.arange(12, dtype=np.float32).reshape(6, 2)},
        out,
        name_col="name",
        target_shard_size_mb=150 / 2**20,
        generate_index=True,
    )
    return out


def _shard(i: int, **change: Any) -> Lie:
    return lambda d: d["shards"][i].update(change)


def _set(key: str, value: Any) -> Lie:
    return lambda d: d.update({key: value})


def _both_counts(value: Any) -> Lie:
    """samples_count of shard 0 and total_samples together (the totals still add up for ints)."""

    def change(d: Doc) -> None:
        d["total_samples"] = d["total_samples"] - d["shards"][0]["samples_count"] + value
        d["shards"][0]["samples_count"] = value

    return change


# name -> (lie, words the message must hold)
OPEN_LIES: dict[str, tuple[Lie, list[str]]] = {
    "negative-samples": (_both_counts(-1), ["samples_count", "-1"]),
    "huge-samples": (_both_counts(2**63), ["total_samples", "2**63-1"]),
    "huge-shard-samples": (_shard(0, samples_count=2**64), ["samples_count", "2**63-1"]),
    "float-samples": (_shard(0, samples_count=4.0), ["samples_count", "4.0"]),
    "string-samples": (_shard(0, samples_count="4"), ["samples_count", "'4'"]),
    "bool-samples": (_shard(0, samples_count=True), ["samples_count", "True"]),
    "null-samples": (_shard(0, samples_count=None), ["samples_count", "None"]),
    "list-samples": (_shard(0, samples_count=[4]), ["samples_count", "an array"]),
    "negative-bytes": (_shard(0, bytes=-5), ["bytes", "-5"]),
    "total-samples": (lambda d: d.update(total_samples=d["total_samples"] + 1), ["total_samples"]),
    "total-bytes": (lambda d: d.update(total_bytes=d["total_bytes"] - 1), ["total_bytes"]),
    "total-string": (_set("total_samples", "10"), ["total_samples"]),
    "no-total": (lambda d: d.pop("total_bytes"), ["total_bytes"]),
    "no-shards": (lambda d: d.pop("shards"), ["shards"]),
    "shards-object": (_set("shards", {"a": 1}), ["shards", "an object"]),
    "shard-number": (lambda d: d["shards"].append(5), ["shard 3", "a number"]),
    "shard-no-path": (lambda d: d["shards"][1].pop("shard_path"), ["shard 1", "shard_path"]),
    "path-number": (_shard(0, shard_path=17), ["shard_path", "17"]),
    "path-parent": (_shard(0, shard_path="../x.safetensors"), ["leaves the dataset"]),
    "path-absolute": (_shard(0, shard_path="/etc/x.safetensors"), ["leaves the dataset"]),
    "path-empty-part": (_shard(0, shard_path="a//b.safetensors"), ["leaves the dataset"]),
    "path-manifest": (_shard(0, shard_path=MANIFEST), ["does not end in .safetensors"]),
    "path-nul": (_shard(0, shard_path="a\0.safetensors"), ["not a file name"]),
    "path-twice": (
        lambda d: d["shards"][1].update(shard_path=d["shards"][0]["shard_path"]),
        ["listed twice"],
    ),
    "format-version": (_set("format_version", "2.0"), ["format_version", "'2.0'"]),
    "format-version-list": (_set("format_version", ["1.0"]), ["format_version", "an array"]),
    "no-safetensors-version": (lambda d: d.pop("safetensors_version"), ["safetensors_version"]),
    "schema-list": (_set("schema", [1, 2]), ["schema", "an array"]),
    "schema-entry-string": (_set("schema", {"x": "F32"}), ["schema entry 'x'", "a string"]),
    "schema-dtype": (_set("schema", {"x": {"dtype": "F99", "shape": [4]}}), ["F99"]),
    "schema-dtype-number": (_set("schema", {"x": {"dtype": 32, "shape": [4]}}), ["dtype"]),
    "schema-shape-negative": (
        _set("schema", {"x": {"dtype": "F32", "shape": [4, -2]}}),
        ["dimension -2"],
    ),
    "schema-shape-float": (_set("schema", {"x": {"dtype": "F32", "shape": [4, 2.5]}}), ["2.5"]),
    "schema-shape-string": (_set("schema", {"x": {"dtype": "F32", "shape": "4,2"}}), ["shape"]),
    "schema-shape-dims": (
        _set("schema", {"x": {"dtype": "F32", "shape": [1] * 65}}),
        ["at most 64"],
    ),
    "schema-missing-column": (_set("schema", {}), ["does not describe", "x"]),
    "extra-list": (_set("tensorfile", []), ["tensorfile", "an array"]),
    "extra-mode": (lambda d: d["tensorfile"].update(mode="rows"), ["mode", "'rows'"]),
    "extra-columns": (lambda d: d["tensorfile"].update(columns="x"), ["columns"]),
    "extra-columns-twice": (lambda d: d["tensorfile"].update(columns=["x", "x"]), ["twice"]),
    "extra-separator": (lambda d: d["tensorfile"].update(kv_separator=""), ["kv_separator"]),
    "extra-name-col": (lambda d: d["tensorfile"].update(name_col=5), ["name_col", "5"]),
    "name-col-is-column": (lambda d: d["tensorfile"].update(name_col="x"), ["key column"]),
    "extra-real-samples": (
        lambda d: d["tensorfile"].update(real_samples={d["shards"][0]["shard_path"]: 5}),
        ["tensorfile.real_samples", "samples_count (4)", "5"],
    ),
    "extra-real-samples-bool": (
        lambda d: d["tensorfile"].update(real_samples={d["shards"][2]["shard_path"]: True}),
        ["tensorfile.real_samples", "True"],
    ),
    "extra-real-samples-stranger": (
        lambda d: d["tensorfile"].update(real_samples={"part-x.safetensors": 1}),
        ["tensorfile.real_samples", "'part-x.safetensors'", "not a shard"],
    ),
    "bytes-lie": (_shard(1, bytes=1), ["bytes", "has"]),  # counts fixed below
}


def _apply(doc: Doc, name: str, lie: Lie) -> None:
    lie(doc)
    if name == "bytes-lie":
        doc["total_bytes"] = sum(s["bytes"] for s in doc["shards"])


@pytest.mark.parametrize("name", sorted(OPEN_LIES))
def test_lying_manifest_fails_open(batch: Path, name: str) -> None:
    lie, words = OPEN_LIES[name]
    edit_manifest(batch, lambda d: _apply(d, name, lie))
    with pytest.raises(FormatError) as err:
        dataset.open(batch)
    text = str(err.value)
    assert str(batch) in text
    for word in words:
        assert word in text, text


RAW_MANIFESTS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "not valid JSON"),
    "syntax": (b'{"format_version": "1.0",', "not valid JSON"),
    "array": (b"[]", "not a JSON object"),
    "string": (b'"dataset"', "not a JSON object"),
    "nan": (b'{"total_samples": NaN}', "NaN"),
    "infinity": (b'{"total_samples": Infinity}', "Infinity"),
    "huge-float": (
        b'{"format_version": "1.0", "safetensors_version": "1.0", '
        b'"total_samples": 1e999, "total_bytes": 0, "shards": []}',
        "inf",
    ),
    "huge-int": (b'{"total_samples": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    "deep-array": (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    "deep-object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nests too deeply"),
    "not-utf8": (b'{"format_version": "\xff"}', "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(RAW_MANIFESTS))
def test_unparsable_manifest_fails_open(batch: Path, name: str) -> None:
    raw, words = RAW_MANIFESTS[name]
    write_manifest(batch, raw)
    with pytest.raises(FormatError, match=words) as err:
        dataset.open(batch)
    assert MANIFEST in str(err.value)


def test_a_huge_manifest_is_refused_before_it_is_read(batch: Path) -> None:
    path = batch / MANIFEST
    with open(path, "r+b") as f:
        f.truncate(1 << 40)  # sparse: 1 TiB claimed, nothing stored
    with pytest.raises(FormatError, match="over 67108864 bytes"):
        dataset.open(batch)


@pytest.mark.parametrize("what", ["fifo", "directory"])
def test_a_manifest_that_is_not_a_file(batch: Path, what: str) -> None:
    path = batch / MANIFEST
    path.unlink()
    os.mkfifo(path) if what == "fifo" else path.mkdir()
    with fifo_guard(path), pytest.raises(SourceError, match="not a regular file"):
        dataset.open(batch)


# -- shards that are not what the manifest says -------------------------------------------------


@pytest.mark.parametrize("what", ["fifo", "directory", "device"])
def test_a_listed_shard_that_is_not_a_file(batch: Path, what: str) -> None:
    shard = batch / listed_shards(batch)[1]
    shard.unlink()
    if what == "fifo":
        os.mkfifo(shard)
    elif what == "directory":
        shard.mkdir()
    else:
        shard.symlink_to("/dev/zero")
    with fifo_guard(shard):
        with pytest.raises(TensorFileError, match=shard.name) as err:
            dataset.open(batch)
        assert isinstance(err.value, (SourceError, FormatError))


def test_a_shard_through_a_symlink_out_of_the_folder(batch: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    name = listed_shards(batch)[0]
    os.replace(batch / name, outside / name)
    (batch / name).symlink_to(outside / name)
    with pytest.raises(FormatError, match="resolves outside"):
        dataset.open(batch)
    (batch / name).unlink()
    (batch / "sub").symlink_to(outside, target_is_directory=True)
    edit_manifest(batch, lambda d: d["shards"][0].update(shard_path=f"sub/{name}"))
    with pytest.raises(FormatError, match="resolves outside"):
        dataset.open(batch)


def test_a_symlink_inside_the_folder_is_fine(batch: Path) -> None:
    name = listed_shards(batch)[0]
    (batch / "store").mkdir()
    os.replace(batch / name, batch / "store" / name)
    (batch / name).symlink_to(Path("store") / name)
    assert len(list(dataset.open(batch))) == 10


def _samples_count(i: int, value: int) -> Lie:
    def change(d: Doc) -> None:
        d["total_samples"] += value - d["shards"][i]["samples_count"]
        d["shards"][i]["samples_count"] = value

    return change


def _replace_shard(folder: Path, i: int, tensors: dict[str, Any]) -> None:
    name = listed_shards(folder)[i]
    save_file(tensors, str(folder / name))
    size = os.path.getsize(folder / name)

    def change(d: Doc) -> None:
        d["total_bytes"] += size - d["shards"][i]["bytes"]
        d["shards"][i]["bytes"] = size

    edit_manifest(folder, change)


ACCESSES: dict[str, Callable[[Any], Any]] = {
    "iterate": lambda ds: list(ds),
    "index": lambda ds: [ds[i] for i in range(len(ds))],
    "negative-index": lambda ds: [ds[-i] for i in range(1, len(ds) + 1)],
    "batches": lambda ds: list(ds.batches(3)),
    "to_torch": lambda ds: list(ds.to_torch()),
    "get": lambda ds: [ds.get(f"k{i}") for i in range(6)] if ds.mode == "kv" else list(ds),
}


@pytest.mark.parametrize("count", [2**63 - 7, 2**40, 1000])
def test_more_samples_than_a_shard_can_hold_fail_open(batch: Path, count: int) -> None:
    """A count within range, but more F32 pairs than the shard's bytes hold: refused before
    len() could report it (list(ds) would try to allocate by it)."""
    edit_manifest(batch, _samples_count(0, count))
    with pytest.raises(FormatError, match=f"holds {count} samples; its [0-9]+ bytes hold at most"):
        dataset.open(batch)


def test_kv_more_samples_than_bytes_fail_open(kv: Path) -> None:
    edit_manifest(kv, _samples_count(0, 10**6))
    with pytest.raises(FormatError, match="at most"):
        dataset.open(kv)


def test_zero_size_samples_are_checked_against_the_header(tmp_path: Path) -> None:
    dataset.write({"e": np.zeros((5, 0), np.float32)}, tmp_path, batch_size=5)
    assert len(dataset.open(tmp_path)) == 5
    edit_manifest(tmp_path, _samples_count(0, 2**62))
    with pytest.raises(FormatError, match="its tensors hold at most 5"):
        dataset.open(tmp_path)


def _header_lie(folder: Path, name: str) -> str:
    """Make the manifest disagree with a shard header; return words of the message."""
    if name == "more-rows":
        edit_manifest(folder, _samples_count(2, 3))  # the last shard holds 2 rows
        return "says 3 samples, tensor 'x' holds 2"
    if name == "dtype":
        edit_manifest(folder, lambda d: d["schema"]["x"].update(dtype="F16"))
        return "the manifest's schema says F16"
    if name == "shape":
        edit_manifest(folder, lambda d: d["schema"]["x"].update(shape=[4, 3]))
        return "shape [3]"
    if name == "missing-column":
        _replace_shard(folder, 1, {"y": np.zeros((4, 2), np.float32)})
        return "no tensor 'x'"
    if name == "scalar":
        _replace_shard(folder, 1, {"x": np.zeros((), np.float32)})
        return "scalar"
    if name == "other-dtype-shard":
        _replace_shard(folder, 1, {"x": np.zeros((4, 2), np.float64)})
        return "F64"
    if name == "not-safetensors":
        shard = folder / listed_shards(folder)[1]
        shard.write_bytes(b"\xff" * shard.stat().st_size)
        return shard.name
    raise AssertionError(name)


HEADER_LIES = [
    "more-rows",
    "dtype",
    "shape",
    "missing-column",
    "scalar",
    "other-dtype-shard",
    "not-safetensors",
]


@pytest.mark.parametrize("access", sorted(ACCESSES))
@pytest.mark.parametrize("lie", HEADER_LIES)
def test_batch_manifest_disagreeing_with_a_shard_header(batch: Path, lie: str, access: str) -> None:
    words = _header_lie(batch, lie)
    ds = dataset.open(batch)  # the manifest alone is consistent
    with pytest.raises(FormatError, match=re.escape(words)):
        ACCESSES[access](ds)


def _kv_lie(folder: Path, name: str) -> str:
    if name == "more-keys":
        edit_manifest(folder, _samples_count(0, 5))
        return "says 5 samples, the shard holds"
    if name == "fewer-keys":
        edit_manifest(folder, _samples_count(0, 1))
        return "says 1 samples"
    if name == "foreign-tensor":
        _replace_shard(folder, 0, {"k0__v": np.zeros(2, np.float32), "weights": np.zeros(1)})
        return "'weights' is not {key}__{column}"
    if name == "missing-column":
        edit_manifest(folder, lambda d: d["tensorfile"].update(columns=["v", "w"]))
        return "no tensor of column"
    if name == "dtype":
        edit_manifest(folder, lambda d: [i.update(dtype="I32") for i in d["schema"].values()])
        return "says I32"
    raise AssertionError(name)


@pytest.mark.parametrize("access", sorted(ACCESSES))
@pytest.mark.parametrize(
    "lie", ["more-keys", "fewer-keys", "foreign-tensor", "missing-column", "dtype"]
)
def test_kv_manifest_disagreeing_with_a_shard_header(kv: Path, lie: str, access: str) -> None:
    words = _kv_lie(kv, lie)
    ds = dataset.open(kv)
    with pytest.raises(FormatError, match=re.escape(words)):
        ACCESSES[access](ds)


def test_no_manifest_and_a_fifo_shard(tmp_path: Path) -> None:
    save_file({"x": np.zeros((2, 2), np.float32)}, str(tmp_path / "a.safetensors"))
    os.mkfifo(tmp_path / "b.safetensors")
    with fifo_guard(tmp_path / "b.safetensors"), pytest.raises(SourceError, match=r"b\.safetens"):
        dataset.open(tmp_path)


def test_bad_arguments(batch: Path) -> None:
    ds = dataset.open(batch)
    for bad in ["1", 1.5, None, True]:
        with pytest.raises(ValueError, match="integer"):  # "1": a key, on a batch dataset
            ds[bad]  # type: ignore[index]
        with pytest.raises(ValueError, match="integer"):
            next(ds.batches(bad))  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        ds[10]


def test_get_of_a_missing_key_names_it(kv: Path) -> None:
    ds = dataset.open(kv)
    with pytest.raises(KeyError, match="nope") as err:
        ds.get("nope")
    assert isinstance(err.value, TensorFileError)
    with pytest.raises(ValueError, match="string"):
        ds.get(5)  # type: ignore[arg-type]


def test_the_written_manifest_still_reads(batch: Path) -> None:
    doc = load_manifest(batch)
    write_manifest(batch, json.dumps(doc, indent=4))
    assert len(dataset.open(batch)) == 10
