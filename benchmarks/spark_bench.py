"""Spark benchmark: the safetensors data source against ``df.write.parquet`` in one session.

* ``spark_write``: 1,000,000 rows × ``array<float>[16]`` (a cached DataFrame, 2 partitions)
  written with ``format("safetensors")`` (``batch_size`` 65,536) and with ``.parquet``,
  alternately; ratio = parquet time ÷ safetensors time (the issue: safetensors ≤ 1.0×
  parquet's time, so ratio ≥ 1.0).
* ``spark_read``: both datasets read back and reduced to one number that touches every
  value (the sum of every array), alternately.

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

    def bench_read() -> Result:
        if not os.path.exists(st_path) or not os.path.exists(pq_path):
            write_st()
            write_pq()
        a, b = total("parquet"), total("safetensors")
        check(abs(a - b) <= 1e-6 * abs(a) + 1e-3, f"spark_read: sums differ ({a} vs {b})")
        ref, tf = [], []
        for _ in range(repeat):
            ref.append(_timed(lambda: total("parquet")))
            tf.append(_timed(lambda: total("safetensors")))
        return Result(
            "spark_read",
            f"Spark read + sum, {rows:,} rows x array<float>[{WIDTH}]: parquet vs safetensors",
            rows * WIDTH * 4,
            tf,
            ref,
        )

    def cleanup() -> None:
        for p in (st_path, pq_path):
            shutil.rmtree(p, ignore_errors=True)

    state["cleanup"] = cleanup
    return {"spark_write": bench_write, "spark_read": bench_read}
