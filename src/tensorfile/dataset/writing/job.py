"""Run a whole write job locally: the tasks' shards staged one task after the other, then one
commit (:mod:`tensorfile.dataset.writing.writer` has the protocol).

:func:`write` writes data held in memory as one task. :func:`write_job` takes the tasks as an
iterable and asks for the next one only once the previous one's shards are written into its
staging folder, so an iterator that converts its input chunk by chunk (a parquet file, an
Arrow stream: :mod:`tensorfile.dataset.writing.arrow_stream`) is written in the memory of one
chunk. Whatever fails before the commit removes the job's staging folder: a dataset already
at the path stays as it was (and a local folder the job made is removed again when empty).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.dataset.writing.columns import columns_of
    >>> from tensorfile.dataset.writing.options import parse_options
    >>> opts = parse_options({"batch_size": 2})
    >>> def tasks():
    ...     for start in (0, 4):
    ...         cols, n = columns_of({"x": np.arange(start, start + 4, dtype=np.int32)}, opts)
    ...         yield cols, n, None
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> m = write_job(out, tasks(), mode="overwrite", opts=opts)
    >>> m.total_samples, len(m.shards)
    (8, 4)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from ...core.errors import InvalidArgumentError
from ..layout.manifest import Manifest
from ..layout.storage import Location, Store, storage_for
from .columns import Column, columns_and_keys
from .options import WriteOptions, parse_options
from .staging import new_job
from .writer import (
    MODES,
    TaskResult,
    abort,
    commit,
    make_folder,
    staging_folder,
    start_job,
    write_task,
)

__all__ = ["Task", "check_mode", "write", "write_job"]

Task = tuple[Sequence[Column], int, Sequence[str] | None]
"""What one task writes: its tensor columns, its number of rows and, in key-value mode, its
keys (:func:`~tensorfile.dataset.writing.columns.columns_and_keys` makes one)."""


def check_mode(mode: str) -> None:
    """Refuse a save mode other than ``overwrite`` and ``append``."""
    if mode not in MODES:
        raise InvalidArgumentError(f"save mode {mode!r} is not supported; use {' or '.join(MODES)}")


def write_job(
    path: Location,
    tasks: Iterable[Task],
    *,
    mode: str,
    opts: WriteOptions,
    storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Write ``tasks`` (task ``k`` into its own staging folder, its shards named
    ``part-{k:05d}-...``) and commit them as one dataset at ``path``, in their order."""
    check_mode(mode)
    fresh = not storage_for(path, storage_options).is_folder()
    store = make_folder(path, storage_options)
    job = new_job()
    try:
        start_job(store, job)
        results: list[TaskResult] = []
        for k, (cols, rows, keys) in enumerate(tasks):
            folder = staging_folder(store, job, k)
            results.append(write_task(cols, rows, keys, opts, folder, k, store))
        return commit(store, results, mode=mode, opts=opts, job=job)
    except BaseException:
        abort(store, job)
        if fresh:  # the folder this job made, left empty by the abort
            _remove_empty_root(store)
        raise


def _remove_empty_root(store: Store) -> None:
    root = store.local_path()
    if root is not None:
        try:
            os.rmdir(root)  # (only an empty folder: whatever another writer put there stays)
        except OSError:
            pass


def write(
    data: Any,
    path: Location,
    *,
    mode: str = "overwrite",
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Manifest:
    """Write ``data`` (a pyarrow Table or RecordBatch(es), a pandas DataFrame or a dict of
    numpy arrays) as a dataset at ``path`` (a local folder or an fsspec URL such as
    ``s3://bucket/ds``, with ``storage_options`` for its filesystem), with the Spark data
    source's options (``batch_size`` or ``name_col``, ``columns``, ``shapes``, ``dtype``,
    ``tail_strategy``, ``kv_separator``, ``target_shard_size_mb``, ``duplicatesStrategy``,
    ``generate_index``, ``rounding``). ``mode`` is ``overwrite`` or ``append``.

    Example:
        >>> import numpy as np, os, tempfile
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> write({"x": np.zeros((5, 3), np.float32)}, out, batch_size=2).total_samples
        5
    """
    check_mode(mode)
    opts = parse_options(options)
    task = columns_and_keys(data, opts)
    return write_job(path, [task], mode=mode, opts=opts, storage_options=storage_options)
