"""One SparkSession for all of tests/spark, with the safetensors data source.

The master is ``local-cluster[2,1,1024]``: a real standalone cluster of two executor JVMs,
each with its own Python workers and working directory, started from the pip-installed
pyspark (~10-20 s). Nothing can rely on driver-local state; every failed task is retried
(``spark.task.maxFailures`` 4, as on a cluster). ``TENSORFILE_SPARK_MASTER`` overrides it
(``local[2,4]`` starts faster while working on a test).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

MASTER = os.environ.get("TENSORFILE_SPARK_MASTER") or "local-cluster[2,1,1024]"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session, on :data:`MASTER`."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the standalone workers of local-cluster keep their folders here, not in the venv's
    # pyspark/work
    os.environ.setdefault("SPARK_WORKER_DIR", tempfile.mkdtemp(prefix="tensorfile-spark-work-"))
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tensorfile.spark import SafetensorsDataSource

    session = (
        SparkSession.builder.master(MASTER)
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
