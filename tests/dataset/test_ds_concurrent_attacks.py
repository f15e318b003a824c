"""Hostile cases of concurrent dataset writers (found by a hostile review of issue 23):
a forged job marker, an append overtaken while it reads the old dataset, an oversized
marker's message."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile.dataset.writing.writer as writer_module
from tensorfile import dataset
from tensorfile.errors import ConcurrentWriteError, TensorFileError
from tests.dataset.test_ds_concurrent import Job
from tests.helpers.datasets import cols_a, cols_b


def test_a_deeply_nested_forged_job_marker_is_a_tensorfile_error(tmp_path: Path) -> None:
    """A job marker of 4,000 nested ``[`` (under the 4 KiB limit) made json raise a
    RecursionError out of commit instead of a tensorfile error."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    job = Job(store, cols_b(3), "append")
    Path(store.path(f"_staging/{job.job}/_JOB")).write_text("[" * 4000)
    with pytest.raises(TensorFileError, match="job marker"):
        job.commit()
    with dataset.open(store) as ds:
        assert sorted(int(s["id"]) for s in ds) == [0, 1, 2, 3]


@pytest.mark.parametrize("columns_change", [False, True])
def test_an_append_overtaken_while_it_reads_the_old_dataset_is_a_concurrent_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns_change: bool
) -> None:
    """An append checks the manifest's version, then reads the old dataset. An overwrite that
    commits in between (deleting the old shards, or changing the columns) made the append fail
    with a FormatError ("the manifest lists part-..., which is missing": the dataset looks
    damaged, and it is not) or an InvalidArgumentError about columns, instead of the
    ConcurrentWriteError a caller retries on. Seen with 6 processes writing at once."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    other = {"y": np.ones((3, 2), np.float32)} if columns_change else cols_b(3)
    winner = Job(store, other, "overwrite")
    loser = Job(store, {"id": np.arange(50, 53), "x": np.ones((3, 2), np.float32)}, "append")
    real = writer_module.read_manifest

    def overtaken(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(writer_module, "read_manifest", real)
        if columns_change:  # commits before the loser reads the old manifest
            winner.commit()
            return real(*args, **kwargs)
        old = real(*args, **kwargs)
        winner.commit()  # commits (deleting the old shards) before the loser checks them
        return old

    monkeypatch.setattr(writer_module, "read_manifest", overtaken)
    with pytest.raises(ConcurrentWriteError, match="another writer committed"):
        loser.commit()
    assert not {n for n in os.listdir(store.root) if n.endswith(".safetensors")} & loser.shards


def test_the_message_of_an_oversized_job_marker_reads_as_english(tmp_path: Path) -> None:
    """Every store's read_bounded said "... is over 4096 bytes; it is not a dataset's the job
    marker" (``what`` comes with its article)."""
    store = writer_module.make_folder(str(tmp_path / "ds"))
    dataset.write(cols_a(4), store, batch_size=2)
    job = Job(store, cols_b(3), "append")
    Path(store.path(f"_staging/{job.job}/_JOB")).write_text(" " * 5000)
    with pytest.raises(TensorFileError, match="job marker") as caught:
        job.commit()
    assert "dataset's the" not in str(caught.value)
