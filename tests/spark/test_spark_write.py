"""Writing with the Spark data source: batch mode (every column kind, shapes, tails, dtypes),
tensor-struct inputs, KV mode, the index, save modes and recovery from failed task attempts.

Shards are checked by parsing their bytes (``tests.helpers.checkpoints.read_shard``), not
through tensorfile.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.helpers.checkpoints import read_shard, shard_files, snapshot
from tests.helpers.manifests import (
    INDEX,
    SHARD_RE,
    STAGING,
    assert_consistent,
    listed,
    load_manifest,
    shards_by_name,
)
from tests.helpers.samples import bf16_nearest_even, bf16_to_f32, f32_bits
from tests.helpers.spark import SPARK_ERRORS, TENSOR_STRUCT, df_of, load, save

NDArray = np.ndarray[Any, Any]

# -- batch mode ---------------------------------------------------------------------------


def _batch_row(i: int) -> tuple[Any, ...]:
    return (
        i,
        [i * 0.5, -float(i)],
        [i / 3.0, i * 1e300, -1.0 / (i + 7)],
        [[float(i), i + 1.0, i + 2.0], [i * 0.25, 1.0, 2.0]],
        [float(i * 10 + k) for k in range(6)],
    )


BATCH_SCHEMA = "id long, x array<float>, d array<double>, m array<array<float>>, flat array<float>"


def _expected_batch(ids: list[int]) -> dict[str, NDArray]:
    rows = [_batch_row(i) for i in ids]
    return {
        "id": np.array([r[0] for r in rows], np.int64),
        "x": np.array([r[1] for r in rows], np.float32),
        "d": np.array([r[2] for r in rows], np.float64),
        "m": np.array([r[3] for r in rows], np.float32),
        "flat": np.array([r[4] for r in rows], np.float32).reshape(len(rows), 3, 2),
    }


def test_batch_mode_column_kinds_shapes_and_values(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "ds"
    df = df_of(spark, [_batch_row(i) for i in range(10)], BATCH_SCHEMA, parts=2)
    save(df, out, batch_size=3, shapes=json.dumps({"flat": [3, 2]}))
    doc = assert_consistent(out)
    assert doc["total_samples"] == 10
    assert doc["schema"] == {
        "id": {"dtype": "I64", "shape": [3]},
        "x": {"dtype": "F32", "shape": [3, 2]},
        "d": {"dtype": "F64", "shape": [3, 3]},
        "m": {"dtype": "F32", "shape": [3, 2, 3]},
        "flat": {"dtype": "F32", "shape": [3, 3, 2]},
    }
    # partition 0 holds rows 0-4, partition 1 rows 5-9; batches of 3, short tails written
    groups = {(0, 0): [0, 1, 2], (0, 1): [3, 4], (1, 0): [5, 6, 7], (1, 1): [8, 9]}
    shards = shards_by_name(out)
    assert len(shards) == 4
    counts = {s["shard_path"]: s["samples_count"] for s in doc["shards"]}
    dtypes = {"id": "I64", "x": "F32", "d": "F64", "m": "F32", "flat": "F32"}
    for name, tensors in shards.items():
        m = SHARD_RE.match(name)
        assert m is not None
        ids = groups[(int(m.group(1)), int(m.group(2)))]
        assert counts[name] == len(ids)
        assert set(tensors) == set(dtypes)
        for col, want in _expected_batch(ids).items():
            t = tensors[col]
            assert t.dtype == dtypes[col], col
            assert t.shape == want.shape, col
            assert t.data == want.tobytes(), col


@pytest.mark.parametrize(
    ("strategy", "samples", "leading"),
    [
        ("write", [3, 2, 3, 2], [3, 2, 3, 2]),
        ("pad", [3, 2, 3, 2], [3, 3, 3, 3]),
        ("drop", [3, 3], [3, 3]),
    ],
)
def test_tail_strategies_per_partition(
    spark: Any, tmp_path: Any, strategy: str, samples: list[int], leading: list[int]
) -> None:
    """``samples`` are the real rows of each shard, ``leading`` the rows it stores; the
    manifest's samples_count is the rows stored (as the reference writes it), the real rows of
    a padded shard are in tensorfile.real_samples, and reading gives the real rows only."""
    out = tmp_path / strategy
    rows = [(i, [float(i), i + 0.5]) for i in range(1, 11)]  # ids 1..10: padding shows as 0
    save(df_of(spark, rows, "id long, x array<float>"), out, batch_size=3, tail_strategy=strategy)
    doc = assert_consistent(out)
    order = sorted(listed(doc))
    assert [SHARD_RE.match(p).group(1) for p in order] == (  # type: ignore[union-attr]
        ["00000", "00000", "00001", "00001"] if strategy != "drop" else ["00000", "00001"]
    )
    by_path = {s["shard_path"]: s["samples_count"] for s in doc["shards"]}
    assert [by_path[p] for p in order] == leading
    assert doc["total_samples"] == sum(leading)
    real = doc["tensorfile"].get("real_samples", {})
    assert real == {p: n for p, n, lead in zip(order, samples, leading, strict=True) if n < lead}
    assert bool(real) == (strategy == "pad")
    starts = [1, 4, 6, 9] if strategy != "drop" else [1, 6]
    for path, lead, n, start in zip(order, leading, samples, starts, strict=True):
        t = read_shard(out / path)
        assert t["id"].shape == (lead,)
        assert t["x"].shape == (lead, 2)
        ids = t["id"].array()
        assert ids[:n].tolist() == list(range(start, start + n))
        assert ids[n:].tolist() == [0] * (lead - n)  # zero padding
        assert np.all(t["x"].array()[n:] == 0)
    got = sorted(r.id for r in load(spark, out).collect())
    want = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] if strategy != "drop" else [1, 2, 3, 6, 7, 8]
    assert got == want


def test_int64_beyond_2_pow_53_written_exactly(spark: Any, tmp_path: Any) -> None:
    big = [2**53 + 1, 2**63 - 1, -(2**63), 2**62 + 12345]
    rows = [(v, [v, -v - 1, 2**53 + 3]) for v in big]
    out = tmp_path / "big"
    save(df_of(spark, rows, "id long, a array<long>", parts=1), out, batch_size=4)
    (shard,) = shards_by_name(out).values()
    assert shard["id"].dtype == "I64"
    assert shard["id"].data == np.array(big, np.int64).tobytes()
    assert shard["a"].data == np.array([r[1] for r in rows], np.int64).tobytes()
    back = sorted((r.id, list(r.a)) for r in load(spark, out).collect())
    assert back == sorted((r[0], r[1]) for r in rows)


# -- dtype conversions --------------------------------------------------------------------

_RNG = np.random.default_rng(7)
FLOATS = np.concatenate(
    [
        (_RNG.standard_normal(58) * 50).astype(np.float32),
        # F16 ties (1 + 2^-11 and 1 + 3 * 2^-11) and BF16 ties (low 16 bits 0x8000)
        np.array([1 + 2**-11, 1 + 3 * 2**-11], np.float32),
        np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x40490FDB], np.uint32).view(np.float32),
    ]
).reshape(8, 8)


def _write_floats(spark: Any, out: Any, **options: Any) -> Any:
    rows = [(i, FLOATS[i].tolist()) for i in range(8)]
    save(
        df_of(spark, rows, "id int, v array<float>", parts=1),
        out,
        batch_size=8,
        columns="v",
        **options,
    )
    (shard,) = shards_by_name(out).values()
    assert set(shard) == {"v"}
    return shard["v"]


def test_dtype_f16_rounds_to_nearest_even(spark: Any, tmp_path: Any) -> None:
    t = _write_floats(spark, tmp_path / "f16", dtype="F16")
    want = FLOATS.astype(np.float16)
    assert (t.dtype, t.shape) == ("F16", (8, 8))
    assert t.data == want.tobytes()
    assert t.array()[7, 2] == np.float16(1.0)  # the tie rounds down to the even value
    assert load_manifest(tmp_path / "f16")["schema"]["v"] == {"dtype": "F16", "shape": [8, 8]}
    back = np.array([r.v for r in load(spark, tmp_path / "f16").collect()], np.float32)
    assert sorted(map(tuple, back)) == sorted(map(tuple, want.astype(np.float32)))


def test_dtype_f16_truncate_rounds_toward_zero(spark: Any, tmp_path: Any) -> None:
    t = _write_floats(spark, tmp_path / "f16t", dtype="F16", rounding="truncate")
    # every value is a normal F16 number: truncation clears the 13 low mantissa bits
    want = (f32_bits(FLOATS) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float16)
    assert t.data == want.tobytes()


def test_dtype_bf16_rounds_to_nearest_even(spark: Any, tmp_path: Any) -> None:
    t = _write_floats(spark, tmp_path / "bf16", dtype="BF16")
    want = bf16_nearest_even(FLOATS)
    assert (t.dtype, t.shape) == ("BF16", (8, 8))
    assert t.array().tolist() == want.tolist()
    assert t.array()[7, 4:6].tolist() == [0x3F80, 0x3F82]  # ties go to the even pattern
    back = np.array([r.v for r in load(spark, tmp_path / "bf16").collect()], np.float32)
    assert sorted(map(tuple, back)) == sorted(map(tuple, bf16_to_f32(want)))


def test_dtype_bf16_truncate_keeps_high_16_bits(spark: Any, tmp_path: Any) -> None:
    t = _write_floats(spark, tmp_path / "bf16t", dtype="BF16", rounding="truncate")
    assert t.array().tolist() == (f32_bits(FLOATS) >> 16).astype(np.uint16).tolist()
    assert t.array()[7, 5] == 0x3F81


def test_dtype_widening_and_integer_narrowing(spark: Any, tmp_path: Any) -> None:
    t = _write_floats(spark, tmp_path / "f64", dtype="F64")
    assert t.dtype == "F64"
    assert t.data == FLOATS.astype(np.float64).tobytes()
    rows = [([i, -i, 1000 * i],) for i in range(4)]
    save(df_of(spark, rows, "a array<int>", parts=1), tmp_path / "i16", batch_size=4, dtype="I16")
    (shard,) = shards_by_name(tmp_path / "i16").values()
    assert shard["a"].dtype == "I16"
    assert shard["a"].data == np.array([r[0] for r in rows], np.int16).tobytes()


def test_dtype_integer_overflow_is_an_error(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "u8"
    with pytest.raises(SPARK_ERRORS) as err:
        save(
            df_of(spark, [([1, 300],)], "counts array<int>", parts=1), out, batch_size=1, dtype="U8"
        )
    assert "counts" in str(err.value)
    assert not os.path.exists(out / "dataset_manifest.json")
    assert not os.path.exists(out) or shard_files(out) == []


# -- tensor-struct input ------------------------------------------------------------------


def test_tensor_struct_columns(spark: Any, tmp_path: Any) -> None:
    f32 = [np.arange(6, dtype=np.float32).reshape(2, 3) * (i + 1) for i in range(4)]
    f16 = [np.array([i, -i, 0.1], np.float16) for i in range(4)]
    rows = [
        (i, (bytearray(f32[i].tobytes()), [2, 3], "F32"), (bytearray(f16[i].tobytes()), [3], "F16"))
        for i in range(4)
    ]
    schema = f"id long, img {TENSOR_STRUCT}, h {TENSOR_STRUCT}"
    out = tmp_path / "struct"
    save(df_of(spark, rows, schema, parts=1), out, batch_size=4)
    doc = assert_consistent(out)
    assert doc["schema"]["img"] == {"dtype": "F32", "shape": [4, 2, 3]}
    assert doc["schema"]["h"] == {"dtype": "F16", "shape": [4, 3]}
    (shard,) = shards_by_name(out).values()
    assert shard["img"].dtype == "F32"
    assert shard["img"].shape == (4, 2, 3)
    assert shard["img"].data == np.stack(f32).tobytes()
    assert (shard["h"].dtype, shard["h"].shape) == ("F16", (4, 3))
    assert shard["h"].data == np.stack(f16).tobytes()  # passed through bit for bit
    back = {r.id: r for r in load(spark, out).collect()}
    assert np.array(back[2].img, np.float32).tolist() == f32[2].tolist()


def test_dtype_option_converts_tensor_struct_values(spark: Any, tmp_path: Any) -> None:
    """``dtype`` on a tensor-struct column must convert its values (or refuse), never
    reinterpret the bytes of one dtype as another."""
    out = tmp_path / "structcast"
    data = np.array([1, 2, -3], np.int32)
    rows = [((bytearray(data.tobytes()), [3], "I32"),)]
    error = ""
    try:
        save(df_of(spark, rows, f"t {TENSOR_STRUCT}", parts=1), out, batch_size=1, dtype="F32")
    except SPARK_ERRORS as exc:
        error = str(exc)
    if error:
        assert "'t'" in error  # refused, naming the column
        return
    (shard,) = shards_by_name(out).values()
    t = shard["t"]
    assert t.dtype == "F32"
    assert t.array().tolist() == [[1.0, 2.0, -3.0]]


# -- KV mode ------------------------------------------------------------------------------


def _kv_rows(n: int) -> list[tuple[Any, ...]]:
    return [(f"k{i:02d}", [i + k / 16 for k in range(16)], i * 1000) for i in range(n)]


def test_kv_mode_separator_and_small_shards(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "kv"
    rows = _kv_rows(12)
    df = df_of(spark, rows, "name string, v array<float>, s long", parts=2)
    save(df, out, name_col="name", kv_separator="::", target_shard_size_mb=0.0005)
    doc = assert_consistent(out)
    assert doc["total_samples"] == 12
    target = 0.0005 * 1024 * 1024
    assert len(doc["shards"]) > 2  # more than one shard per partition
    seen: dict[str, str] = {}
    for s in doc["shards"]:
        tensors = read_shard(out / s["shard_path"])
        keys = {n.rsplit("::", 1)[0] for n in tensors}
        assert s["samples_count"] == len(keys)
        assert set(tensors) == {f"{k}::{c}" for k in keys for c in ("v", "s")}
        assert s["bytes"] < 2 * target
        for k in keys:
            assert k not in seen
            seen[k] = s["shard_path"]
    assert sorted(seen) == [r[0] for r in rows]
    for name, v, sval in rows:
        tensors = read_shard(out / seen[name])
        assert tensors[f"{name}::v"].dtype == "F32"
        assert tensors[f"{name}::v"].shape == (16,)
        assert tensors[f"{name}::v"].data == np.array(v, np.float32).tobytes()
        assert (tensors[f"{name}::s"].dtype, tensors[f"{name}::s"].shape) == ("I64", ())
        assert tensors[f"{name}::s"].data == np.int64(sval).tobytes()
    assert doc["schema"]["k03::v"] == {"dtype": "F32", "shape": [16]}
    assert doc["schema"]["k03::s"] == {"dtype": "I64", "shape": []}


def test_kv_duplicates_last_wins(spark: Any, tmp_path: Any) -> None:
    rows = [("a", [1.0]), ("b", [2.0]), ("a", [3.0]), ("c", [4.0]), ("b", [5.0])]
    out = tmp_path / "lastwin"
    save(
        df_of(spark, rows, "k string, x array<float>", parts=1),
        out,
        name_col="k",
        duplicatesStrategy="lastWin",
    )
    doc = assert_consistent(out)
    assert doc["total_samples"] == 3
    tensors = {n: t for s in shards_by_name(out).values() for n, t in s.items()}
    assert sorted(tensors) == ["a__x", "b__x", "c__x"]
    assert {n: t.array().tolist() for n, t in tensors.items()} == {
        "a__x": [3.0],
        "b__x": [5.0],
        "c__x": [4.0],
    }


def _existing(spark: Any, out: Any) -> dict[str, str]:
    save(df_of(spark, [("old", [9.0])], "k string, x array<float>", parts=1), out, name_col="k")
    return snapshot(out, dirs=False)


def test_kv_duplicate_fails_and_keeps_previous_dataset(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "dup"
    before = _existing(spark, out)
    rows = [("a", [1.0]), ("dupkey7", [2.0]), ("b", [3.0]), ("dupkey7", [4.0])]
    with pytest.raises(SPARK_ERRORS) as err:
        save(
            df_of(spark, rows, "k string, x array<float>", parts=1),
            out,
            name_col="k",
            duplicatesStrategy="fail",
        )
    assert "dupkey7" in str(err.value)
    assert "duplicate" in str(err.value).lower()
    assert snapshot(out, dirs=False) == before
    assert [(r.k, list(r.x)) for r in load(spark, out).collect()] == [("old", [9.0])]


def test_kv_duplicate_across_partitions_fails(spark: Any, tmp_path: Any) -> None:
    """Keys in different partitions (tasks) are duplicates of one dataset too."""
    out = tmp_path / "dup2"
    before = _existing(spark, out)
    rows = [("a", [1.0]), ("dupkey8", [2.0]), ("dupkey8", [3.0]), ("c", [4.0])]
    df = df_of(spark, rows, "k string, x array<float>", parts=2)  # one dupkey8 per partition
    with pytest.raises(SPARK_ERRORS) as err:
        save(df, out, name_col="k", duplicatesStrategy="fail")
    assert "dupkey8" in str(err.value)
    assert snapshot(out, dirs=False) == before


# -- index --------------------------------------------------------------------------------


def _index_rows(folder: Any) -> list[tuple[str, str, list[int], str]]:
    path = folder / INDEX
    assert path.is_file()  # one parquet file, not a folder
    table = pq.read_table(path)
    assert table.column_names == ["tensor_key", "file_name", "shape", "dtype"]
    return sorted(
        (r["tensor_key"], r["file_name"], list(r["shape"]), r["dtype"]) for r in table.to_pylist()
    )


def _header_rows(folder: Any) -> list[tuple[str, str, list[int], str]]:
    return sorted(
        (name, shard, list(t.shape), t.dtype)
        for shard, tensors in shards_by_name(folder).items()
        for name, t in tensors.items()
    )


def test_generate_index_batch_and_append(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "idx"
    rows = [(i, [float(i)] * 3) for i in range(7)]
    save(df_of(spark, rows, "id long, x array<float>"), out, batch_size=2, generate_index="true")
    assert_consistent(out)
    index = _index_rows(out)
    assert len(index) == 2 * len(listed(load_manifest(out)))
    assert index == _header_rows(out)
    assert ("x", sorted(listed(load_manifest(out)))[0], [2, 3], "F32") in index
    # append keeps the index current
    save(
        df_of(spark, rows[:3], "id long, x array<float>", parts=1),
        out,
        mode="append",
        batch_size=2,
        generate_index="true",
    )
    assert_consistent(out)
    assert _index_rows(out) == _header_rows(out)
    assert len({r[1] for r in _index_rows(out)}) == len(shard_files(out))


def test_generate_index_kv_many_shards(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "idxkv"
    df = df_of(spark, _kv_rows(8), "name string, v array<float>, s long", parts=2)
    # option names are case-insensitive
    opts = {"NAME_COL": "name", "Target_Shard_Size_MB": 0.0005, "Generate_Index": True}
    save(df, out, **opts)
    doc = assert_consistent(out)
    assert len(doc["shards"]) > 2
    index = _index_rows(out)
    assert index == _header_rows(out)
    assert len(index) == 16
    assert ("k05__s", index[[r[0] for r in index].index("k05__s")][1], [], "I64") in index


# -- save modes ---------------------------------------------------------------------------


def test_overwrite_replaces_dataset(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "ow"
    save(
        df_of(spark, [(i, [1.0]) for i in range(5)], "id long, x array<float>"),
        out,
        batch_size=2,
        generate_index="true",
    )
    old = shard_files(out)
    assert len(old) == 3  # partitions of 2 and 3 rows, batches of 2
    save(
        df_of(spark, [(i, [2.0]) for i in range(100, 103)], "id long, x array<float>", 1),
        out,
        batch_size=3,
    )
    doc = assert_consistent(out)
    assert set(shard_files(out)).isdisjoint(old)
    assert len(doc["shards"]) == 1
    assert doc["total_samples"] == 3
    assert not (out / INDEX).exists()  # no stale index of the replaced shards
    assert sorted((r.id, list(r.x)) for r in load(spark, out).collect()) == [
        (100, [2.0]),
        (101, [2.0]),
        (102, [2.0]),
    ]


def test_append_adds_shards(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "ap"
    save(df_of(spark, [(i, [1.0]) for i in range(5)], "id long, x array<float>"), out, batch_size=2)
    first = load_manifest(out)
    save(
        df_of(spark, [(i, [2.0]) for i in range(10, 13)], "id long, x array<float>"),
        out,
        mode="append",
        batch_size=2,
    )
    doc = assert_consistent(out)
    assert set(listed(first)) < set(listed(doc))
    assert doc["total_samples"] == 5 + 3
    assert doc["total_bytes"] == first["total_bytes"] + sum(
        s["bytes"] for s in doc["shards"] if s["shard_path"] not in listed(first)
    )
    assert len(doc["shards"]) == 3 + 2
    got = sorted(r.id for r in load(spark, out).collect())
    assert got == [0, 1, 2, 3, 4, 10, 11, 12]


def test_write_option_columns_selects_columns(spark: Any, tmp_path: Any) -> None:
    out = tmp_path / "cols"
    rows = [(i, [float(i)], "note") for i in range(4)]
    save(
        df_of(spark, rows, "id long, x array<float>, note string", 1),
        out,
        batch_size=4,
        columns="x, id",
    )
    (shard,) = shards_by_name(out).values()
    assert set(shard) == {"x", "id"}
    assert set(load_manifest(out)["schema"]) == {"x", "id"}


# -- failed task attempts -----------------------------------------------------------------


def _assert_recovered(spark: Any, out: Any, n: int) -> None:
    doc = assert_consistent(out)  # manifest == files, all exist, no _staging
    assert doc["total_samples"] == n
    for p in listed(doc):
        assert (out / p).is_file()
    got = sorted((r.id, list(r.x)) for r in load(spark, out).collect())
    assert got == [(i, [float(i), -float(i)]) for i in range(n)]


def test_udf_failure_on_first_attempt_is_retried(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    out = tmp_path / "retry"
    marker = str(tmp_path / "udf-failed")

    def flaky(x: list[float]) -> list[float]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 0 and x[0] >= 3:
            open(marker, "w").close()
            raise RuntimeError("injected failure")
        return x

    udf = F.udf(flaky, "array<float>")
    rows = [(i, [float(i), -float(i)]) for i in range(12)]
    df = df_of(spark, rows, "id long, x array<float>").withColumn("x", udf("x"))
    save(df, out, batch_size=2)
    assert os.path.exists(marker)  # the first attempt did fail
    _assert_recovered(spark, out, 12)


def test_writer_failure_after_staging_is_retried(spark: Any, tmp_path: Any) -> None:
    """The first attempt of task 0 writes its shards into staging, then fails."""
    from pyspark.sql.datasource import DataSourceArrowWriter

    from tensorfile.spark import SafetensorsDataSource

    out = tmp_path / "retry2"
    marker = str(tmp_path / "staged.json")

    class FlakyWriter(DataSourceArrowWriter):
        def __init__(self, inner: Any, path: str) -> None:
            self.inner = inner
            self.path = path

        def write(self, iterator: Any) -> Any:
            import json as _json
            import os as _os

            from pyspark import TaskContext

            message = self.inner.write(iterator)
            ctx = TaskContext.get()
            if ctx.attemptNumber() == 0 and ctx.partitionId() == 0:
                staged = [
                    f
                    for _root, _dirs, files in _os.walk(_os.path.join(self.path, "_staging"))
                    for f in files
                    if f.startswith("part-00000-")
                ]
                with open(marker, "w") as f:
                    _json.dump(staged, f)
                raise RuntimeError("injected failure after staging")
            return message

        def commit(self, messages: Any) -> None:
            self.inner.commit(messages)

        def abort(self, messages: Any) -> None:
            self.inner.abort(messages)

    class Flaky(SafetensorsDataSource):
        @classmethod
        def name(cls) -> str:
            return "safetensors_flaky"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return FlakyWriter(super().writer(schema, overwrite), self.options["path"])

    spark.dataSource.register(Flaky)
    rows = [(i, [float(i), -float(i)]) for i in range(10)]
    df = df_of(spark, rows, "id long, x array<float>")
    df.write.format("safetensors_flaky").mode("overwrite").option("batch_size", 2).save(str(out))
    with open(marker) as f:
        staged = json.load(f)
    assert staged  # attempt 0 of task 0 had written its shards into staging
    assert not set(staged) & set(shard_files(out))  # ... and none of it reached the dataset
    assert not os.path.exists(out / STAGING)
    _assert_recovered(spark, out, 10)


def test_the_session_is_a_cluster_of_separate_executors(spark: Any) -> None:
    # tests/spark/conftest.py: local-cluster[2,1,1024] unless TENSORFILE_SPARK_MASTER says
    # otherwise; the JVM counts the driver and each executor
    from tests.spark.conftest import MASTER

    if MASTER.startswith("local-cluster[2"):
        assert spark.sparkContext.master == MASTER
        assert spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() == 3
        pids = set(spark.sparkContext.parallelize(range(8), 8).map(lambda _: os.getpid()).collect())
        assert os.getpid() not in pids


def test_a_job_failing_in_every_attempt_keeps_the_previous_dataset(
    spark: Any, tmp_path: Any
) -> None:
    import time

    from pyspark.sql import functions as F

    out = tmp_path / "doomed"
    rows = [(i, [float(i), -float(i)]) for i in range(8)]
    save(df_of(spark, rows, "id long, x array<float>"), out, batch_size=3)
    before = snapshot(out)

    def always(x: list[float]) -> list[float]:
        if x[0] >= 5:  # the second partition fails in every attempt, after the first wrote
            raise RuntimeError("injected failure, every attempt")
        return x

    df = df_of(spark, [(i, [float(i), -float(i)]) for i in range(10)], "id long, x array<float>")
    df = df.withColumn("x", F.udf(always, "array<float>")("x"))
    for mode in ("overwrite", "append"):
        with pytest.raises(SPARK_ERRORS):
            save(df, out, mode=mode, batch_size=2)
        # a task Spark was killing when it aborted removes its own staged shards
        deadline = time.monotonic() + 60
        while (out / "_staging").exists():
            assert time.monotonic() < deadline, snapshot(out)
            time.sleep(0.5)
        assert snapshot(out) == before  # byte for byte; no shard outside the manifest
    assert_consistent(out)
    got = sorted((r.id, list(r.x)) for r in load(spark, out).collect())
    assert got == rows


def test_a_relative_path_is_the_driver_folder(spark: Any, tmp_path: Any) -> None:
    # executors run in working directories of their own: a relative path means the driver's
    # (the folder Spark started in, as for Spark's own file sources), not each executor's
    rel = os.path.relpath(tmp_path / "rel" / "ds", os.getcwd())
    assert not os.path.isabs(rel)
    rows = [(i, [float(i)]) for i in range(6)]
    save(df_of(spark, rows, "id long, x array<float>"), rel, batch_size=4)
    assert (tmp_path / "rel" / "ds" / "dataset_manifest.json").is_file()
    assert_consistent(tmp_path / "rel" / "ds")
    assert sorted((r.id, list(r.x)) for r in load(spark, rel).collect()) == rows


def test_a_job_raced_by_another_writer_fails_and_publishes_nothing(
    spark: Any, tmp_path: Any
) -> None:
    """An append job whose dataset is overwritten by another writer while its tasks run (the
    other writer commits from inside a task, so the order is certain) fails at its commit
    with ConcurrentWriteError: the dataset is the other writer's, and none of the job's
    shards is listed or left behind."""
    from pyspark.sql import functions as F

    out = tmp_path / "raced"
    rows = [(i, [float(i), -float(i)]) for i in range(6)]
    save(df_of(spark, rows, "id long, x array<float>"), out, batch_size=3)
    flag = str(tmp_path / "raced-once")
    path = str(out)

    def race(x: list[float]) -> list[float]:
        if not os.path.exists(flag):
            open(flag, "w").close()
            from tensorfile import dataset

            other = {"id": np.arange(900, 904), "x": np.zeros((4, 2), np.float32)}
            dataset.write(other, path, batch_size=2, mode="overwrite")
        return x

    df = df_of(spark, [(i, [float(i), 1.0]) for i in range(50, 54)], "id long, x array<float>")
    df = df.withColumn("x", F.udf(race, "array<float>")("x"))
    with pytest.raises(SPARK_ERRORS, match="another writer committed"):
        save(df, out, mode="append", batch_size=2)
    doc = assert_consistent(out)
    assert doc["total_samples"] == 4
    got = sorted(r.id for r in load(spark, out).collect())
    assert got == [900, 901, 902, 903]
