"""Reading with the Spark data source: rows equal what was written (batch and KV), column
subsets, ``layout=files``, interchange with the local ``tensorfile.dataset`` writer and reader,
and shards readable by the reference ``safetensors`` library."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)
from safetensors.numpy import load_file

from tensorfile import dataset
from tests.helpers.checkpoints import read_shard
from tests.helpers.manifests import (
    assert_consistent,
    listed,
    load_manifest,
    schema_errors,
    shards_by_name,
)
from tests.helpers.spark import SPARK_ERRORS, df_of, load, save

NDArray = np.ndarray[Any, Any]

BATCH_SCHEMA = "id long, x array<float>, m array<array<double>>, flat array<float>"
KV_SCHEMA = "name string, v array<float>, n int"


def _batch_row(i: int) -> tuple[Any, ...]:
    return (
        i * 7 + 2**60,
        [i * 0.5, -float(i), 0.125],
        [[i / 3.0, 1e-300], [float(-i), 2.5], [0.0, i * 1e100]],
        [float(10 * i + k) for k in range(6)],
    )


def _kv_row(i: int) -> tuple[Any, ...]:
    return (f"key-{i:03d}", [i + 0.25, -i - 0.5], -i * 1000)


BATCH_ROWS = [_batch_row(i) for i in range(11)]
KV_ROWS = [_kv_row(i) for i in range(9)]


def _batch_expected() -> list[tuple[Any, ...]]:
    return sorted(
        (r[0], r[1], r[2], [r[3][0:3], r[3][3:6]]) for r in BATCH_ROWS
    )  # flat reshaped to [2, 3]


@pytest.fixture(scope="module")
def batch_ds(spark: Any, tmp_path_factory: Any) -> Any:
    out = tmp_path_factory.mktemp("read") / "batch"
    df = df_of(spark, BATCH_ROWS, BATCH_SCHEMA, parts=2)
    save(df, out, batch_size=4, shapes=json.dumps({"flat": [2, 3]}))
    return out


@pytest.fixture(scope="module")
def kv_ds(spark: Any, tmp_path_factory: Any) -> Any:
    out = tmp_path_factory.mktemp("read") / "kv"
    df = df_of(spark, KV_ROWS, KV_SCHEMA, parts=2)
    save(df, out, name_col="name", target_shard_size_mb=0.0004)
    return out


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


# -- rows ---------------------------------------------------------------------------------


def test_batch_rows_equal_written(spark: Any, batch_ds: Any) -> None:
    df = load(spark, batch_ds)
    assert df.columns == ["id", "x", "m", "flat"]
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["id"] == LongType()
    assert types["x"] == ArrayType(FloatType(), False)
    assert types["m"] == ArrayType(ArrayType(DoubleType(), False), False)
    assert types["flat"] == ArrayType(ArrayType(FloatType(), False), False)
    shards = len(load_manifest(batch_ds)["shards"])
    # small shards are grouped: as many tasks as CPUs here, each a run of whole shards
    assert df.rdd.getNumPartitions() == min(shards, os.cpu_count() or 1)
    assert _rows(df) == _batch_expected()
    one_each = load(spark, batch_ds, partition_size_mb=0.0001)  # a task per shard
    assert one_each.rdd.getNumPartitions() == shards
    assert _rows(one_each) == _batch_expected()
    assert load(spark, batch_ds, partitions=3).rdd.getNumPartitions() == 3


def test_kv_rows_equal_written(spark: Any, kv_ds: Any) -> None:
    doc = assert_consistent(kv_ds)
    assert len(doc["shards"]) > 2
    df = load(spark, kv_ds)
    assert df.columns == ["name", "v", "n"]  # the key column first
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["name"] == StringType()
    assert types["v"] == ArrayType(FloatType(), False)
    assert types["n"] == IntegerType()
    assert _rows(df) == sorted(KV_ROWS)


def test_schema_subset_reads_only_those_columns(spark: Any, batch_ds: Any, kv_ds: Any) -> None:
    df = spark.read.format("safetensors").schema("flat array<array<float>>, id long")
    got = df.load(str(batch_ds))
    assert got.columns == ["flat", "id"]
    assert _rows(got) == sorted((r[3], r[0]) for r in _batch_expected())
    kv = spark.read.format("safetensors").schema("name string, n int").load(str(kv_ds))
    assert kv.columns == ["name", "n"]
    assert _rows(kv) == sorted((r[0], r[2]) for r in KV_ROWS)


def test_columns_option_reads_only_those_columns(spark: Any, batch_ds: Any) -> None:
    got = load(spark, batch_ds, columns="x,id")
    assert sorted(got.columns) == ["id", "x"]
    assert sorted((r.id, list(r.x)) for r in got.collect()) == sorted(
        (r[0], r[1]) for r in BATCH_ROWS
    )


def test_layout_files_batch(spark: Any, batch_ds: Any) -> None:
    df = load(spark, batch_ds, layout="files")
    assert sorted(df.columns) == ["flat", "id", "m", "x"]
    for f in df.schema.fields:  # the spec's tensor struct {data, shape, dtype}
        assert isinstance(f.dataType, StructType)
        data, shape, dtype = f.dataType.fields
        assert (data.name, data.dataType) == ("data", BinaryType())
        assert (shape.name, shape.dataType.elementType) == ("shape", IntegerType())
        assert (dtype.name, dtype.dataType) == ("dtype", StringType())
    rows = df.collect()
    shards = shards_by_name(batch_ds)
    assert len(rows) == len(shards)

    def key(parts: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted(parts.items()))

    got = sorted(
        key({c: (bytes(r[c].data), tuple(r[c].shape), r[c].dtype) for c in df.columns})
        for r in rows
    )
    want = sorted(
        key({c: (t.data, t.shape, t.dtype) for c, t in tensors.items()})
        for tensors in shards.values()
    )
    assert got == want


def test_layout_files_kv(spark: Any, kv_ds: Any) -> None:
    df = load(spark, kv_ds, layout="files")
    shards = shards_by_name(kv_ds)
    assert sorted(df.columns) == sorted(n for t in shards.values() for n in t)
    rows = df.collect()
    assert len(rows) == len(shards)
    got = sorted(
        tuple(sorted((c, bytes(r[c].data), r[c].dtype) for c in df.columns if r[c] is not None))
        for r in rows
    )
    want = sorted(
        tuple(sorted((n, t.data, t.dtype) for n, t in tensors.items()))
        for tensors in shards.values()
    )
    assert got == want


def test_bad_layout_is_an_error(spark: Any, batch_ds: Any) -> None:
    with pytest.raises(SPARK_ERRORS) as err:
        load(spark, batch_ds, layout="columns").collect()
    assert "layout" in str(err.value)


# -- interchange with the local writer and reader -----------------------------------------


@pytest.mark.parametrize("tail", ["write", "pad"])
def test_local_batch_dataset_reads_in_spark(spark: Any, tmp_path: Any, tail: str) -> None:
    """With pad the last shard stores 4 rows, 2 of them zero padding: Spark returns the 6
    real rows only (layout=files returns the tensors as stored)."""
    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2) / 8
    ids = np.array([2**55 + i for i in range(6)], np.int64)
    out = tmp_path / "local"
    dataset.write({"id": ids, "x": x}, out, batch_size=4, tail_strategy=tail)
    got = _rows(load(spark, out))
    assert got == sorted((int(i), v.tolist()) for i, v in zip(ids, x, strict=True))
    if tail == "pad":
        assert load_manifest(out)["total_samples"] == 8
        files = load(spark, out, layout="files").collect()
        assert sorted(list(r.id.shape) for r in files) == [[4], [4]]


def test_local_kv_dataset_reads_in_spark(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "localkv"
    vals = np.arange(6, dtype=np.int16).reshape(3, 2) - 3
    dataset.write({"item": ["b", "a", "c"], "v": vals}, out, name_col="item")
    df = load(spark, out)
    assert df.columns[0] == "item"
    assert _rows(df) == [("a", [-1, 0]), ("b", [-3, -2]), ("c", [1, 2])]


def test_spark_batch_dataset_reads_locally(batch_ds: Any) -> None:
    ds = dataset.open(batch_ds)
    assert len(ds) == len(BATCH_ROWS)
    assert set(ds.columns) == {"id", "x", "m", "flat"}
    got = sorted((int(s["id"]), s["x"].tolist(), s["m"].tolist(), s["flat"].tolist()) for s in ds)
    assert got == _batch_expected()
    sample = next(iter(ds))
    assert sample["x"].dtype == np.float32
    assert sample["m"].dtype == np.float64
    assert sample["flat"].shape == (2, 3)


def test_spark_kv_dataset_reads_locally(kv_ds: Any) -> None:
    ds = dataset.open(kv_ds)
    assert ds.mode == "kv"
    assert len(ds) == len(KV_ROWS)
    got = sorted((s["key"], s["v"].tolist(), int(s["n"])) for s in ds)
    assert got == sorted(KV_ROWS)
    assert next(iter(ds))["n"].dtype == np.int32


# -- shards and manifests per the spec ----------------------------------------------------


def test_batch_shards_load_with_reference_safetensors(batch_ds: Any) -> None:
    doc = load_manifest(batch_ds)
    for s in doc["shards"]:
        tensors = load_file(os.path.join(batch_ds, s["shard_path"]))
        n = s["samples_count"]
        assert {k: (v.dtype, v.shape) for k, v in tensors.items()} == {
            "id": (np.dtype(np.int64), (n,)),
            "x": (np.dtype(np.float32), (n, 3)),
            "m": (np.dtype(np.float64), (n, 3, 2)),
            "flat": (np.dtype(np.float32), (n, 2, 3)),
        }
        raw = read_shard(os.path.join(batch_ds, s["shard_path"]))
        for k, v in tensors.items():
            assert v.tobytes() == raw[k].data


def test_kv_shards_load_with_reference_safetensors(kv_ds: Any) -> None:
    names = []
    for p in listed(load_manifest(kv_ds)):
        tensors = load_file(os.path.join(kv_ds, p))
        for k, v in tensors.items():
            key, col = k.rsplit("__", 1)
            i = int(key.split("-")[1])
            if col == "v":
                assert (v.dtype, v.shape) == (np.dtype(np.float32), (2,))
                assert v.tolist() == KV_ROWS[i][1]
            else:
                assert col == "n"
                assert (v.dtype, v.shape) == (np.dtype(np.int32), ())
                assert int(v) == KV_ROWS[i][2]
            names.append(k)
    assert sorted(names) == sorted(f"{r[0]}__{c}" for r in KV_ROWS for c in ("v", "n"))


def test_manifests_validate_against_schema(batch_ds: Any, kv_ds: Any) -> None:
    for folder in (batch_ds, kv_ds):
        doc = load_manifest(folder)
        assert schema_errors(doc) == []
        assert doc["format_version"] == "1.0"
        assert doc["safetensors_version"] == "1.0"
        assert_consistent(folder)
    assert load_manifest(batch_ds)["total_samples"] == len(BATCH_ROWS)
    assert load_manifest(kv_ds)["total_samples"] == len(KV_ROWS)


def test_empty_dataset_reads_as_no_rows(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "empty"
    save(df_of(spark, [], "id long, x array<float>"), out, batch_size=2)
    doc = load_manifest(out)
    assert (doc["total_samples"], doc["shards"]) == (0, [])
    assert load(spark, out).count() == 0
