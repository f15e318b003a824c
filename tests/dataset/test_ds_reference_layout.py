"""The reference connector's datasets, read as it writes them, and its layout written.

The fixtures under ``tests/fixtures/refconn`` are byte-for-byte what the reference
(SemyonSinchenko/safetensors-spark) writes: made through its own JVM libraries (see their
README). The reference's manifest records no mode, columns or separator, and its index is
a Spark output folder of parquet parts.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tensorfile import dataset
from tensorfile.dataset.layout.index import read_index
from tensorfile.dataset.layout.manifest import Manifest
from tensorfile.dataset.layout.reference import manifest_bytes, scala_order
from tensorfile.errors import FormatError, InvalidArgumentError

from ..helpers.manifests import INDEX, MANIFEST, schema_errors

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "refconn"
FIELDS = ["format_version", "safetensors_version", "total_samples", "total_bytes", "shards"]


def batch_row(r: int) -> dict[str, Any]:
    return {
        "x": np.array([r + 0.5, 2.0 * r, -r], np.float32),
        "y": np.array([r, 100 + r], np.int64),
    }


def kv_row(k: int) -> dict[str, Any]:
    return {
        "key": f"s{k}",
        "a": np.array([k, k / 4], np.float32),
        "b": np.array([k, k + 1, 255 - k], np.uint8),
    }


def same(got: dict[str, Any], want: dict[str, Any], *, ordered: bool = True) -> None:
    assert list(got) == list(want) if ordered else sorted(got) == sorted(want)
    for name, value in want.items():
        if isinstance(value, np.ndarray):
            assert got[name].dtype == value.dtype
            np.testing.assert_array_equal(got[name], value)
        else:
            assert got[name] == value


@pytest.fixture
def copy(tmp_path: Path) -> Any:
    def make(name: str) -> Path:
        out = tmp_path / name
        shutil.copytree(FIXTURES / name, out)
        return out

    return make


# -- the fixtures are the reference's bytes, and tensorfile prints them the same way ----------


@pytest.mark.parametrize("name", ["batch", "kv"])
def test_the_reference_manifest_is_printed_as_the_reference_prints_it(name: str) -> None:
    raw = (FIXTURES / name / MANIFEST).read_bytes()
    doc = json.loads(raw)
    assert list(doc) == [*FIELDS, "schema"]
    assert schema_errors(doc) == []
    assert not raw.endswith(b"\n") and b'"total_samples" : ' in raw
    shuffled = dict(doc, schema=dict(sorted(doc["schema"].items(), reverse=True)))
    assert manifest_bytes(shuffled) == raw
    assert list(doc["schema"]) == scala_order(sorted(doc["schema"]))
    m = Manifest.from_json(doc)
    assert m.layout == "reference"
    assert m.to_bytes() == raw  # what tensorfile writes for layout="reference"


# -- reading the reference's datasets ----------------------------------------------------------


def test_a_reference_batch_dataset_reads_whole() -> None:
    ds = dataset.open(FIXTURES / "batch")
    assert (ds.mode, ds.manifest.columns, ds.manifest.layout) == ("batch", ["x", "y"], "reference")
    assert len(ds) == 8
    for r in range(8):
        same(ds[r], batch_row(r))
    for r, sample in enumerate(ds):
        same(sample, batch_row(r))


def test_a_reference_kv_dataset_reads_whole_and_by_key() -> None:
    ds = dataset.open(FIXTURES / "kv")
    assert (ds.mode, ds.manifest.columns) == ("kv", ["a", "b"])
    assert len(ds) == 5
    for k, sample in enumerate(ds):
        same(sample, kv_row(k))
    for k in (4, 0, 3):
        same(ds.get(f"s{k}"), kv_row(k))
    assert "s2" in ds and "s5" not in ds
    index = read_index(FIXTURES / "kv", ds.manifest)  # the Spark folder of parts, read
    assert index is not None and len(index) == 10
    assert index["s3__b"].startswith("part-00001-0000-")


def test_a_reference_dataset_through_torch() -> None:
    torch = pytest.importorskip("torch")
    rows = list(dataset.open(FIXTURES / "batch").to_torch())
    assert len(rows) == 8
    assert torch.equal(rows[6]["x"], torch.tensor([6.5, 12.0, -6.0]))
    keyed = list(dataset.open(FIXTURES / "kv").to_torch())
    assert [r["key"] for r in keyed] == ["s0", "s1", "s2", "s3", "s4"]
    assert torch.equal(keyed[4]["b"], torch.tensor([4, 5, 251], dtype=torch.uint8))


# -- hostile variants of the reference layout --------------------------------------------------


def _index_part(folder: Path) -> Path:
    return next(p for p in sorted((folder / INDEX).iterdir()) if p.name.startswith("part-"))


def _rewrite_index(folder: Path, rows: list[dict[str, Any]], schema: Any = None) -> None:
    for p in (folder / INDEX).iterdir():
        if p.name.startswith("part-"):
            p.unlink()
    pq.write_table(
        pa.Table.from_pylist(rows, schema=schema), folder / INDEX / "part-00000-x.snappy.parquet"
    )


@pytest.mark.parametrize("file_name", ["../kv/elsewhere.safetensors", "part-9-nope.safetensors"])
def test_an_index_part_naming_a_shard_not_listed_is_stale(copy: Any, file_name: str) -> None:
    """Rows pointing outside the folder or at shards the manifest does not list make the
    index stale: the shards' headers answer (the documented fallback)."""
    kv = copy("kv")
    rows = pq.read_table(FIXTURES / "kv" / INDEX).to_pylist()
    rows[0]["file_name"] = file_name
    _rewrite_index(kv, rows)
    ds = dataset.open(kv)
    assert read_index(kv, ds.manifest) is None
    same(ds.get("s1"), kv_row(1))


def test_an_index_part_of_wrong_types_is_a_format_error(copy: Any) -> None:
    kv = copy("kv")
    _rewrite_index(kv, [{"tensor_key": 7, "file_name": "x", "shape": [2], "dtype": "F32"}])
    with pytest.raises(FormatError, match=r"part-00000-x.snappy.parquet: the index's tensor_key"):
        dataset.open(kv).get("s1")


@pytest.mark.parametrize("what", ["symlink", "fifo"])
def test_an_index_part_that_is_not_a_regular_file_is_refused(copy: Any, what: str) -> None:
    kv = copy("kv")
    part = _index_part(kv)
    part.unlink()
    if what == "fifo":
        os.mkfifo(part)  # refused by its mode, never opened (which would wait)
    else:
        part.symlink_to(_index_part(FIXTURES / "kv"))
    with pytest.raises(FormatError, match="an index part is not a regular file"):
        dataset.open(kv).get("s1")


def test_an_index_folder_over_the_bound_is_refused(copy: Any, monkeypatch: Any) -> None:
    from tensorfile.dataset.layout import index

    kv = copy("kv")
    monkeypatch.setattr(index, "MAX_INDEX_BYTES", 1500)  # the parts add up to more
    with pytest.raises(FormatError, match="is over"):
        dataset.open(kv).get("s1")


def _edit_manifest(folder: Path, edit: Any) -> None:
    doc = json.loads((folder / MANIFEST).read_bytes())
    edit(doc)
    (folder / MANIFEST).write_text(json.dumps(doc))


def test_extra_fields_the_reference_tolerates_are_read(copy: Any) -> None:
    """Fields the reference's own Python reader looks for (``manifest_version``,
    ``num_tensors``) or any other are ignored; a manifest without the optional schema is
    read from the headers."""
    ds = copy("batch")

    def edit(doc: dict[str, Any]) -> None:
        doc["manifest_version"] = "1.0"
        for s in doc["shards"]:
            s["num_tensors"] = 2
        del doc["schema"]

    _edit_manifest(ds, edit)
    got = dataset.open(ds)
    assert (got.mode, len(got)) == ("batch", 8)
    same(got[7], batch_row(7))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.pop("total_bytes"), "there is no 'total_bytes' field"),
        (lambda d: d.update(format_version="2.0"), "format_version '2.0' is not '1.0'"),
        (lambda d: d["shards"][0].pop("bytes"), "has no 'bytes'"),
        (lambda d: d["shards"][0].update(samples_count=2.0), "samples_count must be an integer"),
        (lambda d: d.update(total_samples=9), "total_samples is 9, but the shards add up to 8"),
        (lambda d: d["schema"]["x"].update(dtype="F128"), "which safetensors does not define"),
        (lambda d: d["schema"].pop("y"), "is neither a batch column"),
    ],
)
def test_a_lying_reference_manifest_is_a_format_error(copy: Any, edit: Any, words: str) -> None:
    ds = copy("batch")
    _edit_manifest(ds, edit)
    with pytest.raises(FormatError, match=words.replace("(", r"\(")):
        dataset.open(ds)


def test_a_kv_dataset_with_another_separator_is_a_format_error(tmp_path: Path) -> None:
    """The manifest does not record the separator: one other than the reference's default
    cannot be told, and is said so."""
    m = dataset.write(
        {"name": ["a", "b"], "v": np.zeros((2, 3), np.float32)},
        tmp_path,
        name_col="name",
        kv_separator="::",
    )
    assert m.kv_separator == "::"
    _edit_manifest(tmp_path, lambda d: d.pop("tensorfile"))
    with pytest.raises(FormatError, match="written with another kv_separator"):
        dataset.open(tmp_path)


def test_a_kv_shard_counting_rows_it_does_not_hold_is_a_format_error(copy: Any) -> None:
    """What the reference writes for ``duplicatesStrategy=lastWin`` repeats inside a shard:
    ``samples_count`` counts every row, the shard holds a key once."""
    kv = copy("kv")

    def edit(doc: dict[str, Any]) -> None:
        doc["shards"][0]["samples_count"] += 1
        doc["total_samples"] += 1

    _edit_manifest(kv, edit)
    ds = dataset.open(kv)
    with pytest.raises(FormatError, match="the manifest says 4 samples, the shard holds 3 keys"):
        list(ds)


def test_a_kv_shard_whose_tensors_look_like_a_batch_is_kv(tmp_path: Path) -> None:
    """One shard of two keys whose values are two long: every tensor's first axis is the
    shard's sample count, as in a batch; the names (two keys' tensors) say KV."""
    data = {"name": ["p", "q"], "v": np.array([[1, 2], [3, 4]], np.float32)}
    dataset.write(data, tmp_path, name_col="name", layout="reference")
    ds = dataset.open(tmp_path)
    assert (ds.mode, ds.manifest.columns, len(ds)) == ("kv", ["v"], 2)
    same(ds.get("q"), {"key": "q", "v": np.array([3, 4], np.float32)})


# -- writing the reference's layout ------------------------------------------------------------


def _check_reference_files(folder: Path) -> dict[str, Any]:
    raw = (folder / MANIFEST).read_bytes()
    doc = json.loads(raw)
    assert list(doc) == [*FIELDS, "schema"] and "tensorfile" not in doc
    assert schema_errors(doc) == []
    assert raw == manifest_bytes(doc)  # Jackson's printing, the schema in Scala's order
    assert all(list(s) == ["shard_path", "samples_count", "bytes"] for s in doc["shards"])
    ours = pq.read_schema(folder / INDEX)
    theirs = pq.read_schema(_index_part(FIXTURES / "kv"))
    assert ours.names == theirs.names == ["tensor_key", "file_name", "shape", "dtype"]
    for a, b in zip(ours, theirs, strict=True):
        assert (a.type, a.nullable) == (b.type, b.nullable), a.name
    return doc


def test_the_reference_layout_is_written_batch(tmp_path: Path) -> None:
    rows = [batch_row(r) for r in range(5)]
    data = {c: np.stack([r[c] for r in rows]) for c in ("x", "y")}
    dataset.write(
        data, tmp_path, batch_size=2, tail_strategy="pad", generate_index=True, layout="reference"
    )
    doc = _check_reference_files(tmp_path)
    assert doc["total_samples"] == 6  # the padding row is counted, as the reference counts it
    assert doc["schema"] == {
        "x": {"dtype": "F32", "shape": [2, 3]},
        "y": {"dtype": "I64", "shape": [2, 2]},
    }
    ds = dataset.open(tmp_path)
    assert (ds.manifest.layout, ds.mode, len(ds)) == ("reference", "batch", 6)
    # columns in header order (the reference's is the DataFrame's; tensorfile's by alignment)
    assert sorted(ds.manifest.columns) == ["x", "y"]
    for r in range(5):
        same(ds[r], batch_row(r), ordered=False)
    padding = {"x": np.zeros(3, np.float32), "y": np.zeros(2, np.int64)}
    same(ds[5], padding, ordered=False)  # (what the layout loses: padding reads as a sample)


def test_the_reference_layout_is_written_kv(tmp_path: Path) -> None:
    rows = [kv_row(k) for k in range(5)]
    data = {"name": [r["key"] for r in rows]} | {
        c: np.stack([r[c] for r in rows]) for c in ("a", "b")
    }
    dataset.write(data, tmp_path, name_col="name", generate_index=True, layout="reference")
    doc = _check_reference_files(tmp_path)
    assert sorted(doc["schema"]) == sorted(
        json.loads((FIXTURES / "kv" / MANIFEST).read_bytes())["schema"]
    )
    ds = dataset.open(tmp_path)
    assert (ds.mode, ds.manifest.columns, len(ds)) == ("kv", ["a", "b"], 5)
    for k in range(5):
        same(ds.get(f"s{k}"), kv_row(k))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"kv_separator": "::"}, "cannot record kv_separator '::'"),
        ({"dtype": "BOOL"}, "cannot record dtype BOOL"),
        ({"layout": "mosaic"}, "layout must be tensorfile or reference"),
    ],
)
def test_what_the_reference_layout_cannot_hold_is_refused(
    tmp_path: Path, options: dict[str, Any], words: str
) -> None:
    data = {"name": ["a"], "v": np.zeros((1, 2), np.float32)}
    with pytest.raises(InvalidArgumentError, match=words):
        dataset.write(data, tmp_path, name_col="name", **({"layout": "reference"} | options))
    assert not (tmp_path / MANIFEST).exists()


def test_a_bool_column_is_refused_by_the_reference_layout(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="the reference layout has no dtype for column"):
        dataset.write({"m": np.ones((2, 3), bool)}, tmp_path, batch_size=2, layout="reference")
    assert not (tmp_path / MANIFEST).exists()


def test_a_reference_dataset_on_s3(s3: Any) -> None:
    """On an object store the index folder is a prefix of part objects: listed and read."""
    from tensorfile.dataset.layout.storage import storage_for

    bucket = s3.bucket()
    url, prefix = s3.url(bucket, "ref", "kv"), f"{bucket}/ref/kv"
    for path in sorted((FIXTURES / "kv").rglob("*")):
        if path.is_file():
            s3.fs.pipe_file(f"{prefix}/{path.relative_to(FIXTURES / 'kv')}", path.read_bytes())
    with dataset.open(url, storage_options=s3.options) as ds:
        assert (ds.mode, len(ds)) == ("kv", 5)
        index = read_index(storage_for(url, s3.options), ds.manifest)
        assert index is not None and len(index) == 10
        for k in (4, 1):
            same(ds.get(f"s{k}"), kv_row(k))
