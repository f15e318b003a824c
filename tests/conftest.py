"""Fixtures shared by every test folder (helper code lives in :mod:`tests.helpers`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import pytest

from tests.helpers.frameworks import paddle_before_tensorflow
from tests.helpers.paths import deep_folder

paddle_before_tensorflow()  # (paddle crashes when imported after tensorflow in one process)


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests contact 127.0.0.1 only: proxy settings of the machine are cleared (a test that
    wants a proxy sets its own)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture
def tmp_file(tmp_path: Any) -> str:
    return str(tmp_path / "model.safetensors")


@pytest.fixture
def deep() -> Iterator[Callable[..., None]]:
    """``deep(path, depth=1200)``: a folder nested deeper than Python's recursion limit at
    ``path`` (:func:`tests.helpers.paths.deep_folder`); whatever is at ``path`` after the
    test is removed with ``rm -rf`` (pytest's own clean-up of its temporary folders recurses
    once per level: a deep tree left in one fails every later session's clean-up)."""
    planted: list[Path] = []

    def plant(path: Path, depth: int = 1200) -> None:
        planted.append(path)
        deep_folder(path, depth)

    yield plant
    for path in planted:
        subprocess.run(["rm", "-rf", "--", str(path)], check=False)


@pytest.fixture
def stuck() -> Iterator[Callable[..., None]]:
    """``stuck(path)``: a folder at ``path`` holding a file ``inside`` that cannot be
    removed; ``stuck(path, file=True)``: a regular file at ``path`` that every user could
    write (never read by the cache) and that cannot be removed. ``chattr +i`` as root, else
    the folder that holds it made read-only; made removable again and removed after the
    test."""
    made: list[tuple[Path, Path, Path]] = []

    def plant(path: Path, *, file: bool = False) -> None:
        if file:
            path.write_bytes(b"x" * 100)
            path.chmod(0o666)
            target, holder = path, path.parent
        else:
            path.mkdir()
            target, holder = path / "inside", path
            target.write_bytes(b"")
        made.append((path, target, holder))
        if os.geteuid() != 0:
            holder.chmod(0o500)
        elif subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode:
            pytest.skip("no entry can be made that root cannot remove (chattr +i fails here)")

    yield plant
    for path, target, holder in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(target)], capture_output=True)
        else:
            holder.chmod(0o700)
        subprocess.run(["rm", "-rf", "--", str(path)], check=False)


_ = ml_dtypes  # imported for every test, so that the ml_dtypes numpy types are registered


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real S3 API server on 127.0.0.1 (moto in server mode), one per test session; each
    test takes a bucket of its own (``s3.bucket()``)."""
    from tests.helpers import s3 as s3_helpers

    server = s3_helpers.start(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a virtual environment holding ``pip install .`` of this checkout
    (the base dependencies, no extras), as a user's plain install; built once per run
    (about 15 s), shared by every test (and every xdist worker) that needs a real install."""
    from tests.helpers.venvs import plain_install
    from tests.helpers.workers import once_per_run, run_folder

    # one install for every worker of the run (make test runs the suite in several)
    made = once_per_run(run_folder(tmp_path_factory), "plain-install", plain_install)
    return made / "venv" / "bin"


# the Spark tests run on this many workers, each starting one Spark cluster (about 1 GB and
# 25 s of CPU to start: three JVMs and their Python workers). On 2 cores the suite is bound
# by CPU and one cluster's tests (about 3 minutes of the run) end well before the others;
# with more cores two clusters keep them off the critical path
SPARK_WORKERS = 1 if (os.cpu_count() or 1) <= 2 else 2


# module-scoped fixtures that start processes (seconds of CPU each): the tests of the module
# that take one run on one worker, which makes it once (each worker that got one of them
# made it again)
SHARED_FIXTURES = {
    "tests/dataset/test_ds_torch_resume.py": "ranks",
    "tests/test_loading_walk.py": "walks",
}


def _needs_a_framework(item: pytest.Item) -> bool:
    """Whether ``item`` may import an optional framework (jax, tensorflow, mlx, paddle:
    seconds of CPU and hundreds of MB each): a test of a module that uses
    :mod:`tests.helpers.frameworks` (which names them lazily), or a doctest of a module that
    requires one. Such tests run on one worker, the only one that imports them."""
    dtest = getattr(item, "dtest", None)  # a doctest
    if dtest is not None:
        return bool(dtest.globs.get("__doctest_requires__"))
    module = getattr(item, "module", None)
    helpers = "tests.helpers.frameworks"
    return module is not None and any(
        getattr(value, "__module__", None) == helpers for value in vars(module).values()
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``make test`` spreads the tests over worker processes (pytest-xdist, ``--dist
    loadgroup``: see the Makefile); every test goes to whichever worker is free, except those
    that take the session's Spark cluster (:func:`spark`, or the mark ``spark`` for a test
    that asks for it at run time): they run on :data:`SPARK_WORKERS` workers only, so that
    no more Spark clusters start. A test module of Spark tests stays on one worker. The tests
    that may import an optional framework run on one worker (:func:`_needs_a_framework`), and
    so do those that share a module's processes (:data:`SHARED_FIXTURES`). The other
    session fixtures (servers, the plain install) are made per worker or shared between the
    workers (:mod:`tests.helpers.workers`)."""
    spark = [
        i
        for i in items
        if "spark" in getattr(i, "fixturenames", ()) or i.get_closest_marker("spark")
    ]
    from tests.helpers.workers import join_group

    keys = sorted({_spark_key(item) for item in spark})
    for item in spark:
        join_group(item, f"spark-{keys.index(_spark_key(item)) % SPARK_WORKERS}")
    for item in items:
        path = item.nodeid.split("::")[0]
        if _needs_a_framework(item):
            join_group(item, "frameworks")
        elif SHARED_FIXTURES.get(path) in getattr(item, "fixturenames", ()):
            join_group(item, f"{Path(path).stem}-{SHARED_FIXTURES[path]}")


def _spark_key(item: pytest.Item) -> str:
    """What runs on one Spark worker: a module of tests/spark, or one test elsewhere."""
    return item.nodeid.split("::")[0] if "/spark/" in item.nodeid else item.nodeid


MASTER = os.environ.get("TENSORFILE_SPARK_MASTER") or "local-cluster[2,1,1024]"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One SparkSession for the whole test session, with the safetensors data source
    (tests/spark and the documentation's Spark examples share it).

    The master is ``local-cluster[2,1,1024]``: a real standalone cluster of two executor JVMs,
    each with its own Python workers and working directory, started from the pip-installed
    pyspark (~10-20 s). Nothing can rely on driver-local state; every failed task is retried
    once (``spark.task.maxFailures`` 2, where a cluster's default is 4: a real retry on another
    attempt, in half the time for the tests whose jobs must fail in every attempt). The JVMs
    start with :data:`tests.helpers.spark.JVM_OPTIONS`.
    ``TENSORFILE_SPARK_MASTER`` overrides it
    (``local[2,4]`` starts faster while working on a test).
    """
    pytest.importorskip("pyspark")
    from tools.check_prereqs import java_problem

    problem = java_problem(dict(os.environ))  # one line, not a JVM that fails to start
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the standalone workers of local-cluster keep their folders here, not in the venv's
    # pyspark/work: in the session's temporary folder, removed when the session stops
    work = None
    if "SPARK_WORKER_DIR" not in os.environ:
        work = tmp_path_factory.mktemp("spark-work")
        os.environ["SPARK_WORKER_DIR"] = str(work)
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tensorfile.spark import SafetensorsDataSource
    from tests.helpers.spark import JVM_OPTIONS

    session = (
        SparkSession.builder.master(MASTER)
        .appName("tensorfile-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.task.maxFailures", "2")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(SafetensorsDataSource)
    yield session
    session.stop()
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
