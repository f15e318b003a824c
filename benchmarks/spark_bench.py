"""Spark benchmark: the safetensors data source against ``df.write.parquet`` in one session.

* ``spark_write``: 1,000,000 rows × ``array<float>[16]`` (a cached DataFrame, 2 partitions)
  written with ``format("safetensors")`` (``batch_size`` 65,536) and with ``.parquet``,
  alternately; ratio = parquet time ÷ safetensors time (the issue: safetensors ≤ 1.0×
  parquet's time, so ratio ≥ 1.0).
* ``spark_read``: both datasets read back and reduced to one number that touches every
  value (the sum of every array), alternately.
* ``spark_read_floor``: parquet against a Python data source that yields the same Arrow
  arrays from memory, reading nothing: the cost of Spark's Python data source path alone.
* ``spark_read_batch64k``: the same with ``spark.sql.execution.arrow.maxRecordsPerBatch``
  at 65,536 (the default 10,000 makes Spark cut each 65,536-row shard into seven Arrow
  batches on its way from the Python reader to the JVM; parquet's reader does not use it).

``--quick`` uses 100,000 rows.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable

from benchmarks.common import Config, Result, check

ROWS_FULL = 1_000_000
ROWS_QUICK = 100_000
WIDTH = 16


def _session() -> object:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tensorfile.spark import SafetensorsDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tensorfile-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SafetensorsDataSource)
    return spark


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def runners(cfg: Config, quick: bool) -> dict[str, Callable[[], Result]]:
    """The Spark benchmarks by name (one session shared by both)."""
    state: dict[str, object] = {}
    rows = ROWS_QUICK if quick else ROWS_FULL
    repeat = max(1, min(cfg.repeat_big, 3))
    st_path = str(cfg.data / "spark-safetensors")
    pq_path = str(cfg.data / "spark-parquet")

    def setup() -> tuple[object, object]:
        if "spark" not in state:
            from pyspark.sql import functions as F

            spark = _session()
            cols = [F.rand(seed=i).cast("float") for i in range(WIDTH)]
            df = spark.range(rows).repartition(2).select(F.array(*cols).alias("x")).cache()  # type: ignore[attr-defined]
            df.count()
            state["spark"], state["df"] = spark, df
        return state["spark"], state["df"]

    def write_st() -> None:
        _, df = setup()
        df.write.format("safetensors").mode("overwrite").option("batch_size", 65536).save(st_path)  # type: ignore[attr-defined]

    def write_pq() -> None:
        _, df = setup()
        df.write.mode("overwrite").parquet(pq_path)  # type: ignore[attr-defined]

    def bench_write() -> Result:
        write_st()
        write_pq()  # warm-up, both
        from tensorfile import dataset

        check(len(dataset.open(st_path)) == rows, "spark_write: the dataset has the wrong length")
        ref, tf = [], []
        for _ in range(repeat):
            ref.append(_timed(write_pq))
            tf.append(_timed(write_st))
        return Result(
            "spark_write",
            f"Spark write, {rows:,} rows x array<float>[{WIDTH}]: parquet vs safetensors",
            rows * WIDTH * 4,
            tf,
            ref,
        )

    def total(fmt: str) -> float:
        spark, _ = setup()
        from pyspark.sql import functions as F

        reader = spark.read.format(fmt)  # type: ignore[attr-defined]
        df = reader.load(st_path if fmt == "safetensors" else pq_path)
        row = df.select(
            F.sum(F.aggregate("x", F.lit(0.0), lambda a, b: a + b)).alias("s")
        ).collect()
        return float(row[0]["s"])

    def bench_read(batch: int | None = None) -> Result:
        spark, _ = setup()
        if not os.path.exists(st_path) or not os.path.exists(pq_path):
            write_st()
            write_pq()
        conf = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(conf)  # type: ignore[attr-defined]
        if batch is not None:
            spark.conf.set(conf, str(batch))  # type: ignore[attr-defined]
        try:
            a, b = total("parquet"), total("safetensors")
            check(abs(a - b) <= 1e-6 * abs(a) + 1e-3, f"spark_read: sums differ ({a} vs {b})")
            ref, tf = [], []
            for _ in range(repeat):
                ref.append(_timed(lambda: total("parquet")))
                tf.append(_timed(lambda: total("safetensors")))
        finally:
            spark.conf.set(conf, before)  # type: ignore[attr-defined]
        name = "spark_read" if batch is None else f"spark_read_batch{batch // 1024}k"
        how = "" if batch is None else f", Arrow batches of {batch:,} rows"
        return Result(
            name,
            f"Spark read + sum, {rows:,} rows x array<float>[{WIDTH}]: parquet vs safetensors"
            + how,
            rows * WIDTH * 4,
            tf,
            ref,
        )

    def cleanup() -> None:
        for p in (st_path, pq_path):
            shutil.rmtree(p, ignore_errors=True)

    state["cleanup"] = cleanup

    def bench_floor() -> Result:
        """Parquet against a Python data source that reads nothing: it yields the same
        Arrow list arrays from memory. What Spark's Python data source path costs by itself
        (planning workers, Arrow transfer to the JVM, rows), the ceiling of any reader on it."""
        spark, _ = setup()
        _register_floor(spark, rows)
        from pyspark.sql import functions as F

        agg = F.sum(F.aggregate("x", F.lit(0.0), lambda a, b: a + b))

        def floor() -> float:
            return float(spark.read.format("tensorfile_floor").load().select(agg).collect()[0][0])  # type: ignore[attr-defined]

        check(floor() == rows * WIDTH, "spark_read_floor: wrong sum")
        total("parquet")
        ref, tf = [], []
        for _ in range(repeat):
            ref.append(_timed(lambda: total("parquet")))
            tf.append(_timed(floor))
        return Result(
            "spark_read_floor",
            f"Spark read + sum, {rows:,} rows x array<float>[{WIDTH}]: parquet vs a Python "
            "data source yielding the Arrow batches from memory (no I/O)",
            rows * WIDTH * 4,
            tf,
            ref,
        )

    return {
        "spark_write": bench_write,
        "spark_read": bench_read,
        "spark_read_batch64k": lambda: bench_read(65536),
        "spark_read_floor": bench_floor,
    }


def _register_floor(spark: object, rows: int) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import numpy as np
            import pyarrow as pa

            n = rows // 2
            values = pa.array(np.ones(n * WIDTH, np.float32))
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * WIDTH)
            yield pa.RecordBatch.from_arrays([pa.ListArray.from_arrays(offsets, values)], ["x"])

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tensorfile_floor"

        def schema(self) -> str:
            return "x array<float>"

        def reader(self, schema: object) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(Floor)  # type: ignore[attr-defined]
