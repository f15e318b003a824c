"""``configure``: a SparkSession whose Python workers run an interpreter that has tensorfile,
with the ``safetensors`` data source registered (see :mod:`tensorfile.spark.workers`)::

    spark = configure(SparkSession.builder.master("local[4]")).getOrCreate()
    configure(spark)  # checks the workers' interpreter, registers SafetensorsDataSource
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..core.errors import InvalidArgumentError
from .datasource import SafetensorsDataSource
from .workers import prepare_context

__all__ = ["configure"]


def configure(target: Any = None) -> Any:
    """Make Spark's Python workers run an interpreter that has tensorfile.

    * ``target`` a ``SparkSession.Builder`` (before the session starts): unless
      ``PYSPARK_PYTHON`` is set, set it to this interpreter (``sys.executable``), which
      PySpark reads when it creates the SparkContext; returns the builder. For local masters,
      and clusters whose nodes have the same interpreter at the same path.
    * ``target`` a ``SparkSession``, or None for the active one:
      :func:`~tensorfile.spark.workers.prepare_context` for its context, then register
      :class:`~tensorfile.spark.SafetensorsDataSource`; returns the session.

    Example:
        >>> from pyspark.sql import SparkSession
        >>> saved = os.environ.pop("PYSPARK_PYTHON", None)
        >>> builder = configure(SparkSession.builder.master("local[2]"))
        >>> os.environ["PYSPARK_PYTHON"] == sys.executable
        True
        >>> if saved is not None:
        ...     os.environ["PYSPARK_PYTHON"] = saved
    """
    from pyspark.sql import SparkSession

    if isinstance(target, SparkSession.Builder):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return target
    session = SparkSession.getActiveSession() if target is None else target
    if not isinstance(session, SparkSession):
        got = "None, and there is no active session" if target is None else type(target).__name__
        raise InvalidArgumentError(
            "configure() takes a SparkSession.Builder, a SparkSession, or None for the "
            f"active session; got {got}"
        )
    prepare_context(session.sparkContext)
    session.dataSource.register(SafetensorsDataSource)
    return session
