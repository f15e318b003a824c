"""One local SparkSession for all of tests/spark, with the safetensors data source."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """``local[2,4]``: two cores, and every failed task is retried up to 4 times."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tensorfile.spark import SafetensorsDataSource

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("tensorfile-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(SafetensorsDataSource)
    yield session
    session.stop()
