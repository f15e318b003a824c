"""The Spark data source as the tests call it: ``format("safetensors")`` reads and writes
with options, DataFrames whose partitions the tests choose, and the errors Spark raises.

The session itself is the ``spark`` fixture of tests/spark/conftest.py; the dataset layout
checks are in :mod:`tests.helpers.manifests`.
"""

from __future__ import annotations

import os
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

SPARK_ERRORS = (PySparkException, Py4JJavaError)
FMT = "safetensors"
TENSOR_STRUCT = "struct<data:binary,shape:array<int>,dtype:string>"


def df_of(spark: Any, rows: list[Any], schema: str, parts: int = 2) -> Any:
    """A DataFrame whose partitions are the consecutive slices of ``rows`` (``parallelize``
    slices deterministically: with n rows, partition i holds rows [i*n/p, (i+1)*n/p))."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, parts), schema)


def save(df: Any, path: str | os.PathLike[str], mode: str = "overwrite", **options: Any) -> None:
    """``df.write.format("safetensors")`` with ``options``."""
    w = df.write.format(FMT).mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(str(path))


def load(spark: Any, path: str | os.PathLike[str], **options: Any) -> Any:
    """``spark.read.format("safetensors")`` with ``options``."""
    r = spark.read.format(FMT)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(str(path))
