"""Write a table as a dataset of safetensors shards, with the commit protocol Spark uses too.

The dataset is anywhere a :class:`~tensorfile.sources.Store` reaches: a local
folder or an fsspec URL (``s3://...``). Tasks write their shards into a staging folder
under the output path (``_staging/{job}/task-...``; on an object store each shard is written
to a local temporary file and uploaded there) and return a :class:`TaskResult` (the commit
message: what they wrote). The job's :func:`commit` moves the committed shards into place
(a rename, or a server-side copy on an object store), writes the manifest atomically (the
single commit point: readers trust only the manifest) and the index, and only then, for
``overwrite``, removes the previous dataset's files: only what
:func:`~tensorfile.dataset.layout.files.deletable` proves to be theirs (regular files in the folder,
named like shards, listed by the previous manifest; never the new manifest or index, never
through a symlink), so a lying manifest cannot make a commit delete anything else;
:func:`abort` removes the staging folder. A task that fails, is retried or runs twice leaves
nothing outside its own staging folder, so the previous dataset stays readable and no shard
outside the manifest appears. :func:`~tensorfile.dataset.writing.job.write` runs the whole
protocol locally (:mod:`tensorfile.dataset.writing.job`).

Concurrent writers: :func:`start_job` records the version of the manifest the job starts
from (:meth:`~tensorfile.sources.Store.version`) in the job's marker, and :func:`commit`
publishes the new manifest only if it is still that version
(:meth:`~tensorfile.sources.Store.write_if`: a conditional put on S3, a lock of the folder
on a local disk). So of two jobs that overlap (an append racing an overwrite, two appends),
the first to commit wins and the other fails with
:class:`~tensorfile.errors.ConcurrentWriteError` before or at its commit point, removing
the shards it had moved into place: no manifest ever lists the shards of a writer that lost,
or builds on a dataset that changed under it. Run the losing job again.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.dataset import write
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> m = write({"x": np.arange(10, dtype=np.float32).reshape(5, 2)}, out, batch_size=2)
    >>> m.total_samples, [s.samples_count for s in m.shards]
    (5, [2, 2, 1])
    >>> m = write({"x": np.arange(5, dtype=np.int8)}, out, batch_size=2, tail_strategy="pad")
    >>> m.total_samples, [s.samples_count for s in m.shards], m.real_total
    (6, [2, 2, 2], 5)
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import ConcurrentWriteError, InvalidArgumentError, SourceError, TensorFileError
from ...formats import SAFETENSORS
from ...formats.safetensors.faces import prepare_array, write_file
from ..layout.files import INDEX_NAME, MANIFEST_NAME
from ..layout.index import check_index_slot, follow_manifest, index_bytes, index_exists
from ..layout.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ShardEntry,
    check_capacity,
    infer_reference,
    parse_json,
    read_manifest,
    shard_reader,
    split_key,
)
from ..layout.storage import (
    Location,
    Store,
    check_shard,
    delete_previous,
    locate_shard,
    open_located,
    storage_for,
)
from .columns import Column
from .options import WriteOptions
from .shards import batch_shards, kv_shards
from .staging import JOB_MARKER, JOB_NAME, STAGING, TASK_FOLDER, new_job

__all__ = [
    "JOB_MARKER",
    "JOB_NAME",
    "STAGING",
    "TASK_FOLDER",
    "TaskResult",
    "abort",
    "commit",
    "new_job",
    "previous_listing",
    "start_job",
    "write_task",
]

MODES = ("overwrite", "append")


@dataclass(frozen=True)
class TaskResult:
    """What one task wrote (its commit message); ``folder`` is its staging folder, relative
    to the dataset's root."""

    folder: str
    shards: list[ShardEntry]
    index: list[tuple[str, str, list[int], str]]
    schema: dict[str, dict[str, Any]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)


def shard_name(task_id: int, shard_index: int, run: str) -> str:
    """``part-{taskId:05d}-{shardIndex:04d}-{uuid}.safetensors`` (§3.2)."""
    return f"part-{task_id:05d}-{shard_index:04d}-{run}{SAFETENSORS.suffixes[0]}"


def make_folder(path: Location, storage_options: dict[str, Any] | None = None) -> Store:
    """The storage of the dataset at ``path``, its folder created if needed (a file in the
    way is a :class:`~tensorfile.errors.SourceError`)."""
    store = storage_for(path, storage_options)
    store.make_root()
    return store


def staging_folder(path: Location, job: str, task_id: int) -> str:
    """A new staging folder for one attempt of one task (relative to the dataset's root):
    ``_staging/{job}/task-{id}-{random}``. On a local file system it is created under a real
    ``_staging`` folder of the dataset (not a symlink to somewhere else)."""
    store = storage_for(path)
    folder = f"{STAGING}/{job}/task-{task_id:05d}-{uuid.uuid4().hex[:12]}"
    if _job_ended(store, folder):  # a late attempt: nothing to stage
        raise _late(store)
    store.make_folder(STAGING, "the staging folder")
    store.make_folder(folder, "the staging folder")
    return folder


def start_job(path: Location, job: str) -> None:
    """Mark ``job`` as running (its staging folder's :data:`JOB_MARKER`, which records the
    version of the manifest the job starts from: :func:`commit` publishes only over that
    one). A task checks the marker after it has written its shards: when the job was
    committed or aborted meanwhile (Spark does not wait for a killed or speculative task
    before aborting), the task removes what it wrote itself, so no staged shard outlives its
    job."""
    store = storage_for(path)
    base = store.version(MANIFEST_NAME)
    marker = json.dumps({"base": base}).encode()
    for attempt in range(_ATTEMPTS):
        try:
            store.make_folder(STAGING, "the staging folder")
            store.make_folder(f"{STAGING}/{job}", "the staging folder")
            store.write_atomic(_marker(job), marker)
            return
        except SourceError:
            # another job's cleanup removed the empty staging folder between the two
            # steps (it goes once no job is left in it): make it again
            if attempt == _ATTEMPTS - 1:
                raise


_ATTEMPTS = 5


def _marker(job: str) -> str:
    return f"{STAGING}/{job}/{JOB_MARKER}"


_MAX_MARKER_BYTES = 4096


def _job_base(store: Store, job: str) -> str | None:
    """The manifest version ``job`` started from, as :func:`start_job` recorded it."""
    raw = store.read_bounded(_marker(job), "the job marker", _MAX_MARKER_BYTES)
    if raw is None:
        raise ConcurrentWriteError(
            f"{store}: the write job {job} is not running (its marker "
            f"{store.url(_marker(job))} is gone: the job was aborted or committed); "
            "nothing was published"
        )
    try:
        base = json.loads(raw)["base"]
    except (ValueError, TypeError, KeyError, RecursionError):
        base = False
    if base is not None and not isinstance(base, str):
        raise SourceError(
            f"{store.url(_marker(job))} is not a job marker tensorfile wrote; nothing was published"
        )
    return base


def _job_ended(store: Store, folder: str) -> bool:
    """Whether the job of the staging ``folder`` (``_staging/{job}/task-...``) has ended:
    it was started with a marker, and the marker is gone."""
    parts = folder.split("/")
    if len(parts) != 3 or parts[0] != STAGING:
        return False
    try:
        return store.file_size(f"{STAGING}/{parts[1]}/{JOB_MARKER}") is None
    except SourceError:
        return False


def _drop_late(store: Store, folder: str) -> None:
    """Remove a late task's staging ``folder`` and, locally, the job's and the staging
    folder when that leaves them empty (the commit or abort already removed the rest)."""
    store.remove_tree(folder)
    for empty in (folder.rpartition("/")[0], STAGING):
        if not store.remove_empty_folder(empty):
            break  # not empty: another task's, or a live job's


def _late(store: Store) -> SourceError:
    return SourceError(
        f"{store}: the write job ended (committed or aborted) before this task finished; "
        "what the task wrote was removed"
    )


def write_task(
    columns: Sequence[Column],
    rows: int,
    keys: Sequence[str] | None,
    opts: WriteOptions,
    folder: str,
    task_id: int,
    store: Location | None = None,
) -> TaskResult:
    """Write the shards of one task's rows into its staging ``folder`` of the dataset in
    ``store`` (a local ``folder`` path alone, as before, when ``store`` is None)."""
    if store is None:
        store, folder = storage_for(folder), ""
    where = storage_for(store)
    if folder and _job_ended(where, folder):
        _drop_late(where, folder)
        raise _late(where)
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
        size = where.write_file(_join(folder, name), functools.partial(_save, shard.tensors))
        real = shard.samples if shard.padding else None  # samples_count: the rows stored
        entries.append(ShardEntry(name, shard.rows, size, real_samples=real))
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
    if folder and _job_ended(where, folder):  # a late attempt: its job is gone
        _drop_late(where, folder)
        raise _late(where)
    return TaskResult(folder, entries, index, schema, [c.name for c in columns])


def save_file(tensors: dict[str, Any], path: str) -> None:
    """Write one shard: ``tensors`` as a safetensors file, atomically."""
    write_file([prepare_array(name, arr) for name, arr in tensors.items()], path, None)


def _save(tensors: dict[str, Any], path: str) -> None:
    save_file(tensors, path)


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def commit(
    path: Location,
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
    store = storage_for(path)
    # the manifest this job started from (another writer's commit since then fails this
    # one, now or at the conditional write of the new manifest)
    expected = _job_base(store, job) if job is not None else store.version(MANIFEST_NAME)
    _published_over(store, expected, lambda: store.check_version(MANIFEST_NAME, expected))
    # append builds on the previous manifest, which must be valid; overwrite only needs the
    # names it listed, and deletes none of them unless deletable() proves it may
    try:
        old = read_manifest(store) if mode == "append" else None
        if old is not None:  # what is appended to must be a dataset a reader accepts
            infer_reference(store, old)
            for entry in old.shards:
                check_shard(store, entry.shard_path, entry.bytes)
            check_capacity(store, old)
        previous = previous_listing(store) if mode == "overwrite" else []
        shards = list(old.shards) if old is not None else []
        schema = dict(old.schema) if old is not None else {}
        index: list[tuple[str, str, list[int], str]] = []
        # an existing index is kept current on append, even without generate_index
        with_index = opts.generate_index or (mode == "append" and index_exists(store))
        if with_index:
            check_index_slot(store)
        if old is not None and with_index:
            index += _index_of(store, old)
        columns: list[str] = list(old.columns) if old is not None else []
        if old is not None and old.shards:
            _check_columns(old, results, opts)
        _check_schema(schema, results, opts)
        existing = set(schema) if opts.mode == "kv" else set()
        results = _resolve_duplicates(store, results, opts, existing)
    except TensorFileError:  # a dataset committed since the check (read, or deleted): lost
        _published_over(store, expected, lambda: store.check_version(MANIFEST_NAME, expected))
        raise
    moved: list[str] = []
    try:
        for r in results:
            for entry in r.shards:
                _move_staged(store, r.folder, entry.shard_path, job)
                moved.append(entry.shard_path)
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
            layout=opts.layout,
        )
        staged_index = index_bytes(index) if with_index else None  # (before the commit)
        # the commit point: the new dataset exists from here on
        ours = _published_over(
            store, expected, lambda: store.write_if(MANIFEST_NAME, manifest.to_bytes(), expected)
        )
    except BaseException:
        for name in moved:  # the previous dataset stays as it was
            _remove(store, name)
        raise
    failed = follow_manifest(store, ours, staged_index, mode == "overwrite")
    if mode == "overwrite":
        delete_previous(store, previous, {s.shard_path for s in shards})
    _cleanup(store, results)
    if job is not None:
        abort(store, job)
    if failed is not None:
        raise SourceError(
            f"the dataset in {store} is written, but its index {store.url(INDEX_NAME)} is "
            f"not: {failed}"
        ) from failed
    return manifest


def _move_staged(store: Store, folder: str, name: str, job: str | None) -> None:
    """Move the staged shard ``name`` of ``folder`` into place; a move that fails because
    the job's staging was taken meanwhile (``dataset gc`` took the job for dead, or it was
    aborted: its marker is gone) raises :class:`ConcurrentWriteError`: nothing is
    published and the job can be run again."""
    try:
        store.move(_join(folder, name), name)
    except SourceError as exc:
        if job is not None and _job_ended(store, folder):
            raise ConcurrentWriteError(
                f"{store}: the staging of the write job {job} was removed while it committed "
                f"(its marker {store.url(_marker(job))} is gone: `dataset gc` took the job "
                "for dead, or it was aborted); nothing was published, run it again"
            ) from exc
        raise


def _published_over(store: Store, expected: str | None, step: Any) -> Any:
    """Run ``step`` (a check or the conditional write of the manifest), telling a
    :class:`ConcurrentWriteError` as the dataset's; returns what ``step`` returns."""
    try:
        return step()
    except ConcurrentWriteError as exc:
        if exc.changed is None:  # (another writer held the lock too long: its own words)
            raise
        raise ConcurrentWriteError(
            f"{store}: another writer committed to this dataset while this job was writing "
            f"(its manifest is no longer the one the job started from"
            f"{'' if expected is not None else ', which was none'}); this job published "
            "nothing: run it again",
            changed=MANIFEST_NAME,
        ) from None


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
    store: Store, results: Sequence[TaskResult], opts: WriteOptions, existing: set[str]
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
        out.append(_without(store, r, drop, opts) if drop else r)
    return out


def _without(store: Store, result: TaskResult, drop: set[str], opts: WriteOptions) -> TaskResult:
    """``result`` with the tensors ``drop`` removed from its (staged) shard files."""
    shards: list[ShardEntry] = []
    for entry in result.shards:
        staged = _join(result.folder, entry.shard_path)
        with open_located(locate_shard(store, staged)) as reader:
            tensors = reader.get_tensors()
        kept = {k: v for k, v in tensors.items() if k not in drop}
        if len(kept) == len(tensors):
            shards.append(entry)
            continue
        store.remove(staged)
        if not kept:
            continue
        size = store.write_file(staged, functools.partial(_save, kept))
        columns = result.columns
        names = {split_key(k, opts.kv_separator, columns)[0] for k in kept}
        shards.append(ShardEntry(entry.shard_path, len(names), size))
    live = {s.shard_path for s in shards}
    index = [row for row in result.index if row[0] not in drop and row[1] in live]
    schema = {k: v for k, v in result.schema.items() if k not in drop}
    return TaskResult(result.folder, shards, index, schema, result.columns)


def _index_of(store: Store, manifest: Manifest) -> list[tuple[str, str, list[int], str]]:
    """Index rows of existing shards, read from their headers (never from the old index)."""
    rows = []
    for s in manifest.shards:
        with shard_reader(store, s) as reader:  # checked by commit
            for name, info in reader.catalog.tensors.items():
                rows.append((name, s.shard_path, list(info.shape), info.dtype.name))
    return rows


def _remove(store: Store, name: str) -> None:
    try:
        store.remove(name)
    except SourceError:
        pass


def _cleanup(store: Store, results: Sequence[TaskResult]) -> None:
    """Remove the tasks' staging folders, and locally their job's folder and the staging
    folder when that leaves them empty (never another job's folder: a job that is starting
    has an empty one for a moment)."""
    for r in results:
        if r.folder:
            store.remove_tree(r.folder)
    jobs = {r.folder.rpartition("/")[0] for r in results if r.folder.startswith(STAGING)}
    for folder in (*sorted(jobs), STAGING):
        store.remove_empty_folder(folder)  # (left when another task's or job's is in it)


def abort(path: Location, job: str) -> None:
    """Remove the staging folder of ``job``: nothing it wrote reaches the dataset."""
    store = storage_for(path)
    store.remove_tree(f"{STAGING}/{job}")
    store.remove_empty_folder(STAGING)  # (left when another job's is in it)


def previous_listing(folder: Location) -> list[str]:
    """The shard paths the manifest in ``folder`` lists, read leniently: whatever strings sit
    at ``shards[i].shard_path`` of a readable JSON manifest, else none. This is what an
    ``overwrite`` passes to :func:`~tensorfile.dataset.layout.files.deletable`, which trusts none
    of it.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> _ = open(os.path.join(folder, MANIFEST_NAME), "w").write(
        ...     '{"shards": [{"shard_path": "../x"}, {"shard_path": 7}]}')
        >>> previous_listing(folder)
        ['../x']
    """
    try:
        store = storage_for(folder)
        path = store.url(MANIFEST_NAME)
        raw = store.read_bounded(MANIFEST_NAME, "the manifest", MAX_MANIFEST_BYTES)
        doc = parse_json(raw, path) if raw is not None else None
    except TensorFileError:
        return []
    shards = doc.get("shards") if isinstance(doc, dict) else None
    if not isinstance(shards, list):
        return []
    return [
        s["shard_path"]
        for s in shards
        if isinstance(s, dict) and isinstance(s.get("shard_path"), str)
    ]
