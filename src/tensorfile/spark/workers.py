"""Which Python interpreter Spark's Python workers run, so that they can import tensorfile.

The data source's reader and writer run in Spark's Python workers, which unpickle
:class:`~tensorfile.spark.SafetensorsDataSource` and so must import tensorfile. PySpark starts
them with the interpreter it read from the ``PYSPARK_PYTHON`` environment variable when the
SparkContext was created, or else ``python3`` from ``PATH``; the Spark conf
``spark.pyspark.python`` is honoured by ``spark-submit`` but not when a script started with
``python job.py`` creates the session. So ``.venv/bin/python job.py`` without the venv on
``PATH`` has its workers fail with ``No module named 'tensorfile'``, deep in a Java stack.

tensorfile settles this in the driver, when the data source is registered
(``spark.dataSource.register(SafetensorsDataSource)`` asks the class for its name, in the
driver, just before it records the interpreter its workers will run):

* the interpreter is the one chosen for the workers (:func:`choose_worker_python`):
  ``PYSPARK_PYTHON``, or an interpreter set on the SparkContext, or ``spark.pyspark.python``;
  when none was chosen and the master is local (``local``, ``local[n]``,
  ``local-cluster[...]``: the workers run on this machine), the driver's own interpreter
  (``sys.executable``), which has tensorfile;
* with a local master, that interpreter is then checked (:func:`check_worker_python`): one
  that cannot import tensorfile raises :class:`~tensorfile.errors.UnsupportedError` at once,
  naming it, why it was chosen, and the fix (``PYSPARK_PYTHON=<sys.executable>``).

On a cluster the executors' interpreters are not visible from the driver: set
``spark.pyspark.python`` (or ``PYSPARK_PYTHON``) to an interpreter that has tensorfile on
every node. :func:`tensorfile.spark.configure` does the setup explicitly, for a builder
before the session starts, or for a running session (it then registers the data source too).

Example:
    >>> choose_worker_python("python3", {}, None, "local[2]")[1]
    "the driver's interpreter (no worker Python was chosen; the master is local)"
    >>> choose_worker_python("/opt/py/bin/python", {"PYSPARK_PYTHON": "/opt/py/bin/python"},
    ...                      None, "local[2]")
    ('/opt/py/bin/python', 'PYSPARK_PYTHON')
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from ..core.errors import UnsupportedError

__all__ = [
    "PUSHDOWN_CONF",
    "check_worker_python",
    "choose_worker_python",
    "enable_filter_pushdown",
    "is_local",
    "prepare_context",
    "prepare_driver",
]

PYSPARK_DEFAULT = "python3"
"""The interpreter PySpark gives its workers when ``PYSPARK_PYTHON`` is not set."""
_PROBE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('tensorfile') else 3)"


def is_local(master: str) -> bool:
    """Whether Spark master URL ``master`` runs the executors on this machine.

    Example:
        >>> [is_local(m) for m in ("local", "local[2,4]", "local-cluster[2,1,1024]", "yarn")]
        [True, True, True, False]
    """
    return master == "local" or master.startswith(("local[", "local-cluster["))


def choose_worker_python(
    current: str, env: Mapping[str, str], conf: str | None, master: str
) -> tuple[str, str]:
    """``(interpreter, why)``: the Python that Spark's workers should run, from the
    SparkContext's ``pythonExec`` (``current``), the environment, the conf value of
    ``spark.pyspark.python`` and the master URL. A choice already made is kept: an
    interpreter set on the context, the ``PYSPARK_PYTHON`` variable, the conf (which PySpark
    itself ignores when a script creates the session). Without one, a local master gets the
    driver's interpreter, anything else PySpark's default.

    Example:
        >>> choose_worker_python("python3", {}, "/opt/py/bin/python", "local[*]")
        ('/opt/py/bin/python', 'spark.pyspark.python')
        >>> choose_worker_python("python3", {}, None, "yarn")
        ('python3', "PySpark's default (PYSPARK_PYTHON is not set)")
    """
    if current != (env.get("PYSPARK_PYTHON") or PYSPARK_DEFAULT):
        return current, "SparkContext.pythonExec"
    if env.get("PYSPARK_PYTHON"):
        return current, "PYSPARK_PYTHON"
    if conf:
        return conf, "spark.pyspark.python"
    if is_local(master):
        why = "the driver's interpreter (no worker Python was chosen; the master is local)"
        return sys.executable, why
    return current, "PySpark's default (PYSPARK_PYTHON is not set)"


def _same_as_driver(python: str) -> bool:
    found = shutil.which(python)
    # a venv's python is a symlink to the base interpreter: compare the paths, not targets
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def check_worker_python(python: str, why: str) -> None:
    """Raise :class:`~tensorfile.errors.UnsupportedError` unless ``python`` (chosen for
    Spark's workers because of ``why``) can import tensorfile. The driver's own interpreter
    passes at once; another is asked in a subprocess.

    Example:
        >>> import sys
        >>> check_worker_python(sys.executable, "a test")  # the driver's: it has tensorfile
        >>> try:
        ...     check_worker_python("/no/such/python", "PYSPARK_PYTHON")
        ... except UnsupportedError as exc:
        ...     print(str(exc)[:76])
        Spark's Python workers would run /no/such/python (chosen by PYSPARK_PYTHON),
    """
    if _same_as_driver(python):
        return
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, timeout=60, check=False, text=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        problem = f"which cannot be started ({exc})"
    else:
        if done.returncode == 0:
            return
        problem = "which cannot import tensorfile"
        if done.returncode != 3:  # not the probe's answer: the interpreter failed
            problem = f"which fails to start ({(done.stderr or '').strip()[-200:]})"
    raise UnsupportedError(
        f"Spark's Python workers would run {python} (chosen by {why}), {problem}; the "
        f"driver runs {sys.executable}, which has tensorfile. Set the environment variable "
        f"PYSPARK_PYTHON={sys.executable} before the SparkSession starts, or build it with "
        "tensorfile.spark.configure(SparkSession.builder...), or install tensorfile for "
        f"{python}"
    )


def prepare_context(sc: Any) -> str:
    """Point the workers of SparkContext ``sc`` at an interpreter that has tensorfile
    (:func:`choose_worker_python`; ``sc.pythonExec`` is set when that differs from PySpark's
    choice) and, with a local master, check it (:func:`check_worker_python`). Returns the
    interpreter. It affects what is registered afterwards (the data source, UDFs).

    Example:
        >>> import sys
        >>> class Context:  # the attributes of a SparkContext read here
        ...     pythonExec, master = sys.executable, "local[2]"
        ...     def getConf(self):
        ...         return {"spark.pyspark.python": sys.executable}
        >>> sc = Context()
        >>> prepare_context(sc) == sc.pythonExec == sys.executable
        True
    """
    conf = sc.getConf().get("spark.pyspark.python", None)
    python, why = choose_worker_python(sc.pythonExec, os.environ, conf, sc.master)
    if python != sc.pythonExec:
        sc.pythonExec = python
    if is_local(sc.master):
        check_worker_python(python, why)
    return str(python)


def prepare_driver() -> None:
    """:func:`prepare_context` for the active SparkContext of this process, if there is one
    (in the driver of a classic session; not in a worker or a Spark Connect client)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        prepare_context(sc)
        enable_filter_pushdown()


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
"""Spark's switch for Python data sources' ``pushFilters`` (off by default in Spark 4; a
reader that has ``pushFilters`` fails while it is off)."""


def enable_filter_pushdown() -> None:
    """Turn on :data:`PUSHDOWN_CONF` in the active session, which the data source's key
    filters need (a session without it cannot use the reader). Nothing without a session."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is not None and str(spark.conf.get(PUSHDOWN_CONF)).lower() != "true":
        spark.conf.set(PUSHDOWN_CONF, "true")
