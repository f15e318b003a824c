"""``dataset gc`` on a staging folder nested deeper than Python's recursion limit (review 35
j09): a result (the job's folder removed, or kept and said why), never a foreign exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorfile import dataset
from tests.helpers.cli import run
from tests.helpers.datasets import cols_a


def _plant(path: Path, deep: Callable[..., None]) -> Path:
    dataset.write(cols_a(2), str(path), batch_size=2)
    job = path / "_staging" / "job-dead"
    job.mkdir(parents=True)
    (job / "_JOB").write_bytes(b"{}")
    deep(job / "task-00000-0123456789ab")
    return job


def test_gc_of_a_deep_staging_tree(tmp_path: Path, deep: Callable[..., None]) -> None:
    job = _plant(tmp_path / "ds", deep)
    done = dataset.gc(str(tmp_path / "ds"), older_than=0)
    removed = {g.name for g in done.removed}
    kept = {g.name for g in done.kept}
    assert "_staging/job-dead/" in removed | kept
    assert job.exists() == ("_staging/job-dead/" in kept)


def test_the_cli_gc_of_a_deep_staging_tree(
    tmp_path: Path, capsys: Any, deep: Callable[..., None]
) -> None:
    _plant(tmp_path / "ds", deep)
    res = run(capsys, "dataset", "gc", tmp_path / "ds", "--older-than", "0")
    assert res.code == 0, res.err
    assert "_staging/job-dead/" in res.out and "internal error" not in res.err
