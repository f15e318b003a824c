"""Spark's Python workers run an interpreter that has tensorfile: a job started with the
venv's python but without the venv on PATH (no PYSPARK_PYTHON) works, and a worker
interpreter that lacks tensorfile is a clear error at registration, naming PYSPARK_PYTHON
and the driver's interpreter, not a ModuleNotFoundError deep in a Java stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tensorfile.errors import InvalidArgumentError, UnsupportedError
from tensorfile.spark import SafetensorsDataSource, configure
from tensorfile.spark.workers import check_worker_python, choose_worker_python, is_local
from tests.helpers.spark import (
    JVM_OPTIONS,
    env_without_venv,
    load,
    python_without_tensorfile,
    save,
)

JOB = """
import json, os, sys
from pyspark.sql import SparkSession
from tensorfile.errors import UnsupportedError
from tensorfile.spark import SafetensorsDataSource

bad, out, jvm_options = sys.argv[1], sys.argv[2], sys.argv[3]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", jvm_options).getOrCreate())
sc = spark.sparkContext
report = {"pyspark_chose": sc.pythonExec}
# 1. a worker interpreter chosen on the context that lacks tensorfile: refused at once
sc.pythonExec = bad
try:
    spark.dataSource.register(SafetensorsDataSource)
    report["bad"] = "registered"
except UnsupportedError as exc:
    report["bad"] = str(exc)
# 2. nothing chosen (PySpark's default, python3 from PATH, which lacks tensorfile here):
#    registering picks the driver's interpreter, and the workers write and read
sc.pythonExec = "python3"
spark.dataSource.register(SafetensorsDataSource)
report["workers_run"] = sc.pythonExec
df = spark.createDataFrame([([1.0, 2.0], True), ([3.0, 4.0], False)], "x array<float>, b boolean")
df.write.format("safetensors").mode("overwrite").option("batch_size", 2).save(out)
report["rows"] = [[r.x, r.b] for r in spark.read.format("safetensors").load(out).collect()]
spark.stop()
print("REPORT " + json.dumps(report))
"""


def test_a_job_without_the_venv_on_path(tmp_path: Path) -> None:
    bad = python_without_tensorfile(tmp_path)
    env = env_without_venv(tmp_path)
    probe = [bad, "-c", "import tensorfile"]
    assert subprocess.run(probe, env=env, capture_output=True).returncode != 0  # the trap is set
    job = tmp_path / "job.py"
    job.write_text(JOB)
    done = subprocess.run(
        [sys.executable, str(job), bad, str(tmp_path / "ds"), JVM_OPTIONS],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[0].removeprefix("REPORT "))
    assert report["pyspark_chose"] == "python3"
    assert report["bad"].startswith(f"Spark's Python workers would run {bad} (chosen by ")
    assert "cannot import tensorfile" in report["bad"]
    assert f"PYSPARK_PYTHON={sys.executable}" in report["bad"]
    assert report["workers_run"] == sys.executable
    assert sorted(report["rows"]) == [[[1.0, 2.0], True], [[3.0, 4.0], False]]
    assert "No module named" not in done.stderr


# -- the choice and the check, without a session ----------------------------------------------


def test_choose_worker_python() -> None:
    exe = sys.executable
    assert choose_worker_python("python3", {}, None, "local[2]")[0] == exe
    assert choose_worker_python("python3", {}, None, "local-cluster[2,1,1024]")[0] == exe
    assert choose_worker_python("python3", {}, None, "yarn") == (
        "python3",
        "PySpark's default (PYSPARK_PYTHON is not set)",
    )
    assert choose_worker_python("/p", {"PYSPARK_PYTHON": "/p"}, "/c", "local") == (
        "/p",
        "PYSPARK_PYTHON",
    )
    assert choose_worker_python("python3", {}, "/c", "local") == ("/c", "spark.pyspark.python")
    assert choose_worker_python("/x", {"PYSPARK_PYTHON": "/p"}, None, "local") == (
        "/x",
        "SparkContext.pythonExec",
    )


@pytest.mark.parametrize(
    ("master", "local"),
    [("local", True), ("local[*]", True), ("local[2,4]", True), ("localhost", False),
     ("spark://h:7077", False), ("k8s://h", False)],
)  # fmt: skip
def test_is_local(master: str, local: bool) -> None:
    assert is_local(master) is local


def test_check_worker_python(tmp_path: Path) -> None:
    check_worker_python(sys.executable, "a test")
    bad = python_without_tensorfile(tmp_path)
    with pytest.raises(UnsupportedError, match="cannot import tensorfile") as caught:
        check_worker_python(bad, "PYSPARK_PYTHON")
    assert f"PYSPARK_PYTHON={sys.executable}" in str(caught.value)
    with pytest.raises(UnsupportedError, match="cannot be started"):
        check_worker_python(str(tmp_path / "missing"), "spark.pyspark.python")
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(UnsupportedError, match="fails to start \\(boom\\)"):
        check_worker_python(str(broken), "PYSPARK_PYTHON")


def test_configure_builder_sets_pyspark_python(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    builder = SparkSession.builder.master("local[1]")
    assert configure(builder) is builder
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/chosen/python")  # a choice made is kept
    configure(builder)
    assert os.environ["PYSPARK_PYTHON"] == "/chosen/python"


def test_configure_rejects_other_things() -> None:
    with pytest.raises(InvalidArgumentError, match=r"SparkSession\.Builder"):
        configure("local[2]")


# -- with the shared session ----------------------------------------------------------------


def test_configure_a_session_registers_the_data_source(spark: Any, tmp_path: Path) -> None:
    assert configure(spark) is spark
    assert configure(None) is spark  # the active session
    assert spark.sparkContext.pythonExec == sys.executable  # PYSPARK_PYTHON, set by conftest
    save(spark.range(3).selectExpr("array(cast(id as float)) as x"), tmp_path, batch_size=3)
    assert load(spark, tmp_path).count() == 3


def test_registering_with_a_worker_python_that_lacks_tensorfile(spark: Any, tmp_path: Path) -> None:
    sc = spark.sparkContext
    bad = python_without_tensorfile(tmp_path)
    sc.pythonExec = bad
    try:
        with pytest.raises(UnsupportedError, match=r"chosen by SparkContext\.pythonExec"):
            spark.dataSource.register(SafetensorsDataSource)
    finally:
        sc.pythonExec = sys.executable
    spark.dataSource.register(SafetensorsDataSource)  # the session is left as it was
