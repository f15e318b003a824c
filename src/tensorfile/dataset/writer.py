"""Write a table as a dataset of safetensors shards, with the commit protocol Spark uses too.

Tasks write their shards into a staging folder under the output path and return a
:class:`TaskResult` (the commit message: what they wrote). The job's :func:`commit` moves
the committed shards into place, writes the manifest atomically and the index, and only
then, for ``overwrite``, removes the previous dataset's files: only what
:func:`~tensorfile.dataset.files.deletable` proves to be theirs (regular files in the folder,
named like shards, listed by the previous manifest; never the new manifest or index, never
through a symlink), so a lying manifest cannot make a commit delete anything else;
:func:`abort` removes the staging folder. A task that fails, is retried or runs twice leaves
nothing outside its own staging folder, so the previous dataset stays readable and no shard
outside the manifest appears. :func:`write` runs the whole protocol locally, as one task.

Example:
    >>> import numpy as np, os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> m = write({"x": np.arange(10, dtype=np.float32).reshape(5, 2)}, out, batch_size=2)
    >>> m.total_samples, [s.samples_count for s in m.shards]
    (5, [2, 2, 1])
    >>> m = write({"x": np.arange(5, dtype=np.int8)}, out, batch_size=2, tail_strategy="pad")
    >>> m.total_samples, [s.samples_count for s in m.shards], m.real_total
    (6, [2, 2, 2], 5)
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import InvalidArgumentError, SourceError
from ..formats import read_catalog
from ..safetensors.numpy import save_file
from .convert import Column, columns_and_keys
from .files import INDEX_NAME, check_shard_file, delete_previous
from .index import write_index
from .manifest import (
    Manifest,
    ShardEntry,
    check_capacity,
    previous_listing,
    read_manifest,
    shard_file,
    split_key,
)
from .options import WriteOptions, parse_options
from .shards import batch_shards, kv_shards

__all__ = ["STAGING", "TaskResult", "abort", "commit", "write", "write_task"]

STAGING = "_staging"
MODES = ("overwrite", "append")


@dataclass(frozen=True)
class TaskResult:
    """What one task wrote (its commit message)."""

    folder: str
    shards: list[ShardEntry]
    index: list[tuple[str, str, list[int], str]]
    schema: dict[str, dict[str, Any]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)


def shard_name(task_id: int, shard_index: int, run: str) -> str:
    """``part-{taskId:05d}-{shardIndex:04d}-{uuid}.safetensors`` (§3.2)."""
    return f"part-{task_id:05d}-{shard_index:04d}-{run}.safetensors"


def make_folder(path: str, what: str = "the dataset folder") -> None:
    """Create the folder ``path`` (and its parents) if needed; a file in the way is a
    :class:`~tensorfile.errors.SourceError`."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot create {what} {path}: {exc.strerror or exc}") from exc


def staging_folder(path: str, job: str, task_id: int) -> str:
    """A new staging folder for one attempt of one task, under a real ``_staging`` folder of
    the dataset (not a symlink to somewhere else: shards are staged beside the dataset)."""
    root = os.path.join(path, STAGING)
    make_folder(root, "the staging folder")
    if not os.path.isdir(root) or os.path.islink(root):
        raise SourceError(f"the staging folder {root} is not a folder of the dataset")
    folder = os.path.join(root, job, f"task-{task_id:05d}-{uuid.uuid4().hex[:12]}")
    make_folder(folder, "the staging folder")
    return folder


def write_task(
    columns: Sequence[Column],
    rows: int,
    keys: Sequence[str] | None,
    opts: WriteOptions,
    folder: str,
    task_id: int,
) -> TaskResult:
    """Write the shards of one task's rows into its staging ``folder``."""
    run = str(uuid.uuid4())
    shards = (
        kv_shards(columns, keys or [], opts)
        if opts.mode == "kv"
        else batch_shards(columns, rows, opts)
    )
    entries: list[ShardEntry] = []
    index: list[tuple[str, str, list[int], str]] = []
    schema: dict[str, dict[str, Any]] = {}
    dtype_of = {c.name: c.dtype for c in columns}
    for k, shard in enumerate(shards):
        name = shard_name(task_id, k, run)
        target = os.path.join(folder, name)
        save_file(shard.tensors, target)
        real = shard.samples if shard.padding else None  # samples_count: the rows stored
        entries.append(ShardEntry(name, shard.rows, os.path.getsize(target), real_samples=real))
        for key, value in shard.tensors.items():
            col = split_key(key, opts.kv_separator, list(dtype_of))[1] if opts.mode == "kv" else key
            dtype = dtype_of.get(col) or dtype_of.get(key) or "F32"
            shape = (
                [opts.batch_size or 1, *value.shape[1:]]
                if opts.mode == "batch"
                else list(value.shape)
            )
            index.append((key, name, list(value.shape), dtype))
            schema.setdefault(key, {"dtype": dtype, "shape": shape})
    return TaskResult(folder, entries, index, schema, [c.name for c in columns])


def commit(
    path: str,
    results: Sequence[TaskResult],
    *,
    mode: str,
    opts: WriteOptions,
    job: str | None = None,
) -> Manifest:
    """Move the committed shards into place, write the manifest and the index, and for
    ``overwrite`` remove the previous dataset's files; then remove the job's staging folder
    (with whatever failed or duplicate task attempts left there)."""
    if mode not in MODES:
        raise InvalidArgumentError(f"save mode {mode!r} is not supported; use {' or '.join(MODES)}")
    # append builds on the previous manifest, which must be valid; overwrite only needs the
    # names it listed, and deletes none of them unless deletable() proves it may
    old = read_manifest(path) if mode == "append" else None
    if old is not None:  # what is appended to must be a dataset a reader accepts
        for entry in old.shards:
            check_shard_file(path, entry.shard_path, entry.bytes)
        check_capacity(path, old)
    previous = previous_listing(path) if mode == "overwrite" else []
    shards = list(old.shards) if old is not None else []
    schema = dict(old.schema) if old is not None else {}
    index: list[tuple[str, str, list[int], str]] = []
    index_path = os.path.join(path, INDEX_NAME)
    # an existing index is kept current on append, even without generate_index
    with_index = opts.generate_index or (mode == "append" and os.path.lexists(index_path))
    if with_index and os.path.isdir(index_path):
        raise SourceError(f"cannot write the index {index_path}: a folder is in the way")
    if old is not None and with_index:
        index += _index_of(path, old)
    columns: list[str] = list(old.columns) if old is not None else []
    if old is not None and old.shards:
        _check_columns(old, results, opts)
    _check_schema(schema, results, opts)
    results = _resolve_duplicates(results, opts, set(schema) if opts.mode == "kv" else set())
    moved: list[str] = []
    staged_index: str | None = None
    try:
        for r in results:
            for entry in r.shards:
                target = shard_file(path, entry)
                try:
                    os.replace(shard_file(r.folder, entry), target)
                except OSError as exc:
                    raise SourceError(f"cannot move {entry.shard_path} into {path}: {exc}") from exc
                moved.append(target)
            shards += r.shards
            index += r.index
            for key, info in r.schema.items():
                schema.setdefault(key, info)
            for c in r.columns:
                if c not in columns:
                    columns.append(c)
        manifest = Manifest(
            shards,
            schema,
            mode=opts.mode,
            columns=columns,
            kv_separator=opts.kv_separator,
            name_col=opts.name_col,
        )
        staged_index = write_index(path, index, final=False) if with_index else None
        manifest.write(path)  # the commit point: the new dataset exists from here on
    except BaseException:
        for target in moved:  # the previous dataset stays as it was
            _remove(target)
        if staged_index is not None:
            _remove(staged_index)
        raise
    failed: OSError | None = None
    if staged_index is not None:
        try:
            os.replace(staged_index, index_path)
        except OSError as exc:  # the dataset is committed; its index is not
            failed = exc
            _remove(staged_index)
    if mode == "overwrite":
        delete_previous(path, previous, keep={s.shard_path for s in shards})
        if not with_index:
            _remove_index(index_path)
    _cleanup(path, results)
    if job is not None:
        abort(path, job)
    if failed is not None:
        raise SourceError(
            f"the dataset in {path} is written, but its index {index_path} is not: "
            f"{failed.strerror or failed}"
        ) from failed
    return manifest


def _check_columns(old: Manifest, results: Sequence[TaskResult], opts: WriteOptions) -> None:
    """An append writes the dataset's mode and columns: shards of other columns would make
    samples that differ from shard to shard."""
    if old.mode != opts.mode:
        raise InvalidArgumentError(
            f"the dataset is in {old.mode} mode; appending in {opts.mode} mode is refused"
        )
    want = sorted(old.tensor_columns())
    for r in results:
        if r.shards and sorted(r.columns) != want:
            raise InvalidArgumentError(
                f"the dataset has columns {want}; appending columns {sorted(r.columns)} is "
                "refused (write the dataset again with mode overwrite)"
            )


def _sample_info(
    key: str, info: dict[str, Any], opts: WriteOptions
) -> tuple[str, str, tuple[int, ...]]:
    """(column, dtype, per-sample shape) of a schema entry."""
    if opts.mode == "batch":
        return key, info["dtype"], tuple(info["shape"][1:])
    return key.rpartition(opts.kv_separator)[2], info["dtype"], tuple(info["shape"])


def _check_schema(
    existing: dict[str, dict[str, Any]], results: Sequence[TaskResult], opts: WriteOptions
) -> None:
    """Every task (and, on append, the dataset) must agree on each column's dtype and
    sample shape: a partition of different arrays is refused, not written."""
    seen: dict[str, tuple[str, tuple[int, ...]]] = {}
    sources = [("the existing dataset", existing)] + [
        (f"task {i}", r.schema) for i, r in enumerate(results)
    ]
    columns = [c for r in results for c in r.columns] or None
    for where, schema in sources:
        for key, info in schema.items():
            col, dtype, shape = _sample_info(key, info, opts)
            if columns and opts.mode == "kv":
                col = split_key(key, opts.kv_separator, columns)[1]
            got = seen.setdefault(col, (dtype, shape))
            if got != (dtype, shape):
                raise InvalidArgumentError(
                    f"column {col!r}: {where} has {dtype} samples of shape {list(shape)}, "
                    f"elsewhere they are {got[0]} of shape {list(got[1])}; every sample of a "
                    "column must have one dtype and shape"
                )


def _resolve_duplicates(
    results: Sequence[TaskResult], opts: WriteOptions, existing: set[str]
) -> list[TaskResult]:
    """KV keys written by several tasks: an error with ``fail``; with ``lastWin`` the task
    with the highest partition id wins and the others' shards are rewritten without them."""
    if opts.mode != "kv":
        return list(results)
    owner: dict[str, int] = {}
    for i, r in enumerate(results):
        for key in {row[0] for row in r.index}:
            if key in existing:
                raise InvalidArgumentError(
                    f"tensor key {key!r} is already in the dataset; appending a key twice is "
                    "refused (write the dataset again with mode overwrite)"
                )
            if key in owner and opts.duplicates_strategy == "fail":
                raise InvalidArgumentError(
                    f"duplicate tensor key {key!r} written by two tasks; use "
                    "duplicatesStrategy=lastWin to keep the last"
                )
            owner[key] = i
    out = []
    for i, r in enumerate(results):
        drop = {row[0] for row in r.index if owner.get(row[0]) != i}
        out.append(_without(r, drop, opts) if drop else r)
    return out


def _without(result: TaskResult, drop: set[str], opts: WriteOptions) -> TaskResult:
    """``result`` with the tensors ``drop`` removed from its (staged) shard files."""
    from ..safetensors.numpy import load_file

    shards: list[ShardEntry] = []
    for entry in result.shards:
        file = shard_file(result.folder, entry)
        tensors = load_file(file)
        kept = {k: v for k, v in tensors.items() if k not in drop}
        if len(kept) == len(tensors):
            shards.append(entry)
            continue
        os.unlink(file)
        if not kept:
            continue
        save_file(kept, file)
        columns = result.columns
        names = {split_key(k, opts.kv_separator, columns)[0] for k in kept}
        shards.append(ShardEntry(entry.shard_path, len(names), os.path.getsize(file)))
    live = {s.shard_path for s in shards}
    index = [row for row in result.index if row[0] not in drop and row[1] in live]
    schema = {k: v for k, v in result.schema.items() if k not in drop}
    return TaskResult(result.folder, shards, index, schema, result.columns)


def _index_of(path: str, manifest: Manifest) -> list[tuple[str, str, list[int], str]]:
    """Index rows of existing shards, read from their headers (never from the old index)."""
    rows = []
    for s in manifest.shards:
        cat = read_catalog(shard_file(path, s), format="safetensors")  # checked by commit
        for name, info in cat.tensors.items():
            rows.append((name, s.shard_path, list(info.shape), info.dtype.name))
    return rows


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_index(path: str) -> None:
    """Remove the previous dataset's index: a regular file, or a symlink (only the link goes);
    a folder or FIFO of that name is not the dataset's and stays."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            os.unlink(path)
    except OSError:
        pass  # the new dataset is committed; a reader finds a stale index stale


def _cleanup(path: str, results: Sequence[TaskResult]) -> None:
    for r in results:
        shutil.rmtree(r.folder, ignore_errors=True)
    root = os.path.join(path, STAGING)
    try:
        for job in os.listdir(root):
            if not os.listdir(os.path.join(root, job)):
                os.rmdir(os.path.join(root, job))
        os.rmdir(root)
    except OSError:
        pass  # another job's staging folder is still there


def abort(path: str, job: str) -> None:
    """Remove the staging folder of ``job``: nothing it wrote reaches the dataset."""
    shutil.rmtree(os.path.join(path, STAGING, job), ignore_errors=True)
    try:
        os.rmdir(os.path.join(path, STAGING))
    except OSError:
        pass


def write(
    data: Any, path: str | os.PathLike[str], *, mode: str = "overwrite", **options: Any
) -> Manifest:
    """Write ``data`` (a pyarrow Table or RecordBatch(es), a pandas DataFrame or a dict of
    numpy arrays) as a dataset at ``path``, with the Spark data source's options
    (``batch_size`` or ``name_col``, ``columns``, ``shapes``, ``dtype``, ``tail_strategy``,
    ``kv_separator``, ``target_shard_size_mb``, ``duplicatesStrategy``, ``generate_index``,
    ``rounding``). ``mode`` is ``overwrite`` or ``append``."""
    if mode not in MODES:
        raise InvalidArgumentError(f"save mode {mode!r} is not supported; use {' or '.join(MODES)}")
    out = os.fspath(path)
    opts = parse_options(options)
    cols, rows, keys = columns_and_keys(data, opts)
    make_folder(out)
    job = uuid.uuid4().hex
    folder = staging_folder(out, job, 0)
    try:
        result = write_task(cols, rows, keys, opts, folder, 0)
        return commit(out, [result], mode=mode, opts=opts, job=job)
    except BaseException:
        abort(out, job)
        raise
