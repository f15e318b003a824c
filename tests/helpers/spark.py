"""The Spark data source as the tests call it: ``format("safetensors")`` reads and writes
with options, DataFrames whose partitions the tests choose, and the errors Spark raises.

The session itself is the ``spark`` fixture of tests/spark/conftest.py; the dataset layout
checks are in :mod:`tests.helpers.manifests`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

SPARK_ERRORS = (PySparkException, Py4JJavaError)
# the tests' JVMs (a driver, its executors) compile with C1 alone and collect with the serial
# collector: the tests' jobs are small and short, and C2's compiling at start-up cost as much
# CPU as they do (a local-cluster session started in 7 s instead of 16 on the 2-core machine)
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
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


def python_without_tensorfile(folder: str | os.PathLike[str]) -> str:
    """A ``python3`` in ``folder`` that runs this interpreter without its site-packages
    (``-S``), so it cannot import tensorfile (or pyspark): the stand-in for a system Python
    that Spark would find on ``PATH``. Returns its path."""
    path = os.path.join(folder, "python3")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    os.chmod(path, 0o755)
    return path


def env_without_venv(first: str | os.PathLike[str]) -> dict[str, str]:
    """This process's environment as a newcomer's shell has it: no ``PYSPARK_PYTHON``,
    ``PYSPARK_DRIVER_PYTHON`` or ``PYTHONPATH``, and ``PATH`` without the directory of this
    interpreter (the venv's ``bin``), with ``first`` in front."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")
    }
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    path = env.get("PATH", "").split(os.pathsep)
    rest = [p for p in path if p and os.path.abspath(p) != venv_bin]
    env["PATH"] = os.pathsep.join([os.fspath(first), *rest])
    return env
