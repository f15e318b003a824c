"""The Spark data source on an object store: a real S3 API server on 127.0.0.1 (moto in server
mode), written and read by the two executors of the ``local-cluster[2,1,1024]`` session.

Every write mode and the commit protocol: overwrite, append, KV with its index, a task that
fails on its first attempt (retried), a job that fails in every attempt (aborted); each
leaves exactly one dataset readable and no shard outside the manifest, and every shard
loads with the reference ``safetensors``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

from tensorfile import dataset
from tests.helpers.manifests import schema_errors
from tests.helpers.spark import SPARK_ERRORS, df_of, load, save


def _rows(n: int, sign: float = 1.0) -> list[tuple[int, list[float]]]:
    return [(i, [sign * i, sign * -i]) for i in range(n)]


def _write(s3: Any, df: Any, url: str, mode: str = "overwrite", **options: Any) -> None:
    save(df, url, mode=mode, storage_options=s3.options_json(), **options)


def _read(spark: Any, s3: Any, url: str, **options: Any) -> Any:
    return load(spark, url, storage_options=s3.options_json(), **options)


def _consistent(s3: Any, prefix: str) -> dict[str, Any]:
    """The manifest, after checking: valid against the schema, its shards are exactly the
    shard objects in the folder, each of its listed size and loadable by the reference, and
    nothing is staged."""
    fs = s3.fs
    keys = s3.keys(prefix)
    doc: dict[str, Any] = json.loads(fs.cat_file(f"{prefix}/dataset_manifest.json"))
    assert schema_errors(doc) == []
    listed = sorted(s["shard_path"] for s in doc["shards"])
    assert [k for k in keys if k.endswith(".safetensors")] == listed
    assert not any(k.startswith("_staging") for k in keys)
    for s in doc["shards"]:
        blob = fs.cat_file(f"{prefix}/{s['shard_path']}")
        assert len(blob) == s["bytes"]
        safetensors.numpy.load(blob)
    return doc


def _ids(spark: Any, s3: Any, url: str) -> list[tuple[int, list[float]]]:
    return sorted((r.id, list(r.x)) for r in _read(spark, s3, url).collect())


def test_write_and_read_back_on_s3(spark: Any, s3: Any) -> None:
    bucket = s3.bucket()
    url, prefix = s3.url(bucket, "ds"), f"{bucket}/ds"
    df = df_of(spark, _rows(20), "id long, x array<float>", parts=4)
    _write(s3, df, url, batch_size=3)
    doc = _consistent(s3, prefix)
    assert doc["total_samples"] == 20
    assert _ids(spark, s3, url) == _rows(20)
    # and tensorfile.dataset reads what Spark wrote
    with dataset.open(url, storage_options=s3.options) as ds:
        assert sorted(int(r["id"]) for r in ds) == list(range(20))
    # overwrite, then append
    _write(s3, df_of(spark, _rows(6, -1.0), "id long, x array<float>"), url, batch_size=2)
    _consistent(s3, prefix)
    assert _ids(spark, s3, url) == _rows(6, -1.0)
    _write(s3, df_of(spark, _rows(4), "id long, x array<float>"), url, "append", batch_size=2)
    _consistent(s3, prefix)
    assert _ids(spark, s3, url) == sorted(_rows(6, -1.0) + _rows(4))


def test_kv_with_index_on_s3(spark: Any, s3: Any) -> None:
    bucket = s3.bucket()
    url, prefix = s3.url(bucket, "kv"), f"{bucket}/kv"
    rows = [(f"k{i:02d}", [float(i), 1.0]) for i in range(10)]
    df = df_of(spark, rows, "name string, v array<float>", parts=3)
    _write(s3, df, url, name_col="name", generate_index="true")
    _consistent(s3, prefix)
    assert "_tensor_index.parquet" in s3.keys(prefix)
    got = sorted((r.name, list(r.v)) for r in _read(spark, s3, url).collect())
    assert got == rows
    with dataset.open(url, storage_options=s3.options) as ds:
        assert ds.get("k07")["v"].tolist() == [7.0, 1.0]


def test_a_task_failing_on_its_first_attempt_on_s3(spark: Any, s3: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    bucket = s3.bucket()
    url, prefix = s3.url(bucket, "retry"), f"{bucket}/retry"
    marker = str(tmp_path / "failed-once")

    def flaky(x: list[float]) -> list[float]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 0 and x[0] >= 3:
            open(marker, "w").close()
            raise RuntimeError("injected failure")
        return x

    df = df_of(spark, _rows(12), "id long, x array<float>").withColumn(
        "x", F.udf(flaky, "array<float>")("x")
    )
    _write(s3, df, url, batch_size=2)
    assert os.path.exists(marker)  # the first attempt did fail
    doc = _consistent(s3, prefix)
    assert doc["total_samples"] == 12
    assert _ids(spark, s3, url) == _rows(12)


def test_a_job_failing_in_every_attempt_on_s3(spark: Any, s3: Any) -> None:
    from pyspark.sql import functions as F

    bucket = s3.bucket()
    url, prefix = s3.url(bucket, "doomed"), f"{bucket}/doomed"
    _write(s3, df_of(spark, _rows(8), "id long, x array<float>"), url, batch_size=3)
    before = {k: s3.fs.cat_file(f"{prefix}/{k}") for k in s3.keys(prefix)}

    def always(x: list[float]) -> list[float]:
        if x[0] >= 5:  # the second partition fails in every attempt, after the first wrote
            raise RuntimeError("injected failure, every attempt")
        return x

    df = df_of(spark, _rows(10), "id long, x array<float>").withColumn(
        "x", F.udf(always, "array<float>")("x")
    )
    for mode in ("overwrite", "append"):
        with pytest.raises(SPARK_ERRORS):
            _write(s3, df, url, mode, batch_size=2)
        # Spark aborts the job without waiting for a task it is killing: such a late task
        # finds its job ended and removes its own staged shards (writer.start_job)
        deadline = time.monotonic() + 60
        while any(k.startswith("_staging") for k in s3.keys(prefix)):
            assert time.monotonic() < deadline, s3.keys(prefix)
            time.sleep(0.5)
        after = {k: s3.fs.cat_file(f"{prefix}/{k}") for k in s3.keys(prefix)}
        assert after == before  # exactly the previous dataset; nothing staged or added
    assert _ids(spark, s3, url) == _rows(8)


def test_select_on_s3_reads_the_selected_column(spark: Any, s3: Any) -> None:
    bucket = s3.bucket()
    url = s3.url(bucket, "cols")
    rows = [(i, [float(i)] * 4, [i, -i]) for i in range(9)]
    df = df_of(spark, rows, "id long, x array<float>, y array<int>")
    _write(s3, df, url, batch_size=4)
    got = sorted(tuple(r.y) for r in _read(spark, s3, url).select("y").collect())
    assert got == sorted((i, -i) for i in range(9))
    assert np.array_equal(
        sorted(r.id for r in _read(spark, s3, url).select("id").collect()), list(range(9))
    )


def test_bad_storage_options_fail_clearly(spark: Any, s3: Any) -> None:
    bucket = s3.bucket()
    url = s3.url(bucket, "x")
    df = df_of(spark, _rows(2), "id long, x array<float>")
    for bad in ("{not json", "[1, 2]"):
        with pytest.raises(SPARK_ERRORS) as err:
            save(df, url, storage_options=bad, batch_size=1)
        assert "storage_options" in str(err.value)
