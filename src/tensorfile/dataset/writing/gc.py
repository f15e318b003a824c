"""Collect what killed writers left in a dataset folder (``tensorfile dataset gc``).

A writer killed between moving its shards into place and publishing its manifest (or an
``overwrite`` killed after publishing, before it deleted the previous shards) leaves shard
files that no manifest lists; one killed at any point leaves its staging folder
(``_staging/<job>/``) and, on a local disk, temporary files of an atomic write. Readers
never see them (they trust only the manifest); :func:`gc` removes them:

* **unlisted shards**: regular files directly in the dataset folder, named like a writer's
  shards (``part-*-*-<uuid>.safetensors``), that the manifest does not list, and that have
  not changed for ``older_than`` (default an hour);
* **staging folders of dead jobs**: ``_staging/<job>/`` whose newest file (the job's marker,
  a task's staged shard, a temporary file being written) is older than ``older_than``, and
  empty staging folders; only a write job's folder as a writer leaves it: named as a writer
  names a job (32 hex digits), holding only its marker ``_JOB`` and task folders
  ``task-<id>-<12 hex digits>`` that hold only shards (any of these may be a temporary file
  being written). Any other folder under ``_staging`` is kept, with why;
* **temporary files** (local folders): ``.dataset_manifest.json.tensorfile-*.tmp`` and the
  like, older than ``older_than``, removed only when no writer holds their lock.

It refuses (:class:`~tensorfile.errors.InvalidArgumentError`, before it removes anything) a
folder that holds no manifest, no ``*.safetensors`` shard and no write job's staging
folder: that is no dataset (a project folder given by mistake, with its own ``_staging``).

What it never touches: the manifest, the index, a file the manifest lists, a name that is
not a writer's (a shard named otherwise, another file, a folder under ``_staging`` that is
no write job's or holds anything a writer does not make), anything that is not a regular file
(a symlink named like a shard is left alone, never followed), anything outside the dataset
folder (names come from listing the folder, never from the manifest; in a local folder
nothing is listed or removed through a symlink at any level, not even a ``_staging`` or a
job's folder swapped for one while :func:`gc` runs: it is kept, with why). A dataset
without a manifest (read by scanning its ``*.safetensors``) has no unlisted shards: its
shards are left alone.

Safe against a running writer: a shard a live writer has moved into place but not yet
published is never removed, because

1. the folder is listed first, the manifest read after it: a shard published by then is
   listed;
2. a shard's age is the time since it last changed *in content or in place* (a local file's
   later of its modification and change times, which the rename into place sets; an
   object's last-modified time, which the server-side copy into place sets), so a shard
   moved less than ``older_than`` ago is kept however long ago it was written;
3. right before each removal the manifest is checked again (under the store's lock, where
   it has one: a local folder, ``memory://``; there no commit's publish can fall between the
   check and the removal): a shard a commit published meanwhile is kept.

The limit: a writer that spends longer than ``older_than`` between moving a shard and
publishing its manifest (a process stopped for that long mid-commit) can publish a manifest
listing a shard :func:`gc` removed; keep ``older_than`` far above your longest commit. A
job that writes nothing into its staging folder for ``older_than`` (a task computing for
longer than that before its first shard) is taken for dead: its staging folder goes, and
the job fails at its commit with :class:`~tensorfile.errors.ConcurrentWriteError`,
publishing nothing (no data is lost; run it again). A store that cannot tell a file's age
(a :class:`~tensorfile.sources.MemoryStore`) has all its files taken as new: only
``older_than=0`` removes them.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.zeros((4, 2), np.float32)}, out, batch_size=2)
    >>> orphan = "part-00007-0000-123e4567-e89b-12d3-a456-426614174000.safetensors"
    >>> _ = open(os.path.join(out, orphan), "wb").write(b"left by a killed writer")
    >>> [g.name for g in gc(out, dry_run=True).kept]  # new: maybe a running writer's
    ['part-00007-0000-123e4567-e89b-12d3-a456-426614174000.safetensors']
    >>> [g.name for g in gc(out, older_than=0).removed], len(dataset.open(out))
    (['part-00007-0000-123e4567-e89b-12d3-a456-426614174000.safetensors'], 4)
"""

from __future__ import annotations

import datetime
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ...core.atomic import is_temp_name, remove_if_unlocked
from ...core.errors import FormatError, InvalidArgumentError, SourceError, UnsupportedError
from ...core.values import brief
from ...formats import SAFETENSORS
from ..layout.files import INDEX_NAME, MANIFEST_NAME, SHARD_NAME
from ..layout.manifest import read_manifest
from ..layout.storage import Location, Store, storage_for
from .staging import JOB_MARKER, JOB_NAME, STAGING, TASK_FOLDER

__all__ = ["DEFAULT_OLDER_THAN", "Collected", "Leftover", "gc", "parse_duration"]

DEFAULT_OLDER_THAN = 3600.0
"""Seconds a leftover must have been left alone before :func:`gc` removes it (an hour)."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?)\s*([smhd]?)")
_TEMP = re.compile(r"\.(.+)\.tensorfile-[0-9a-f]{12}\.tmp")


@dataclass(frozen=True)
class Leftover:
    """One thing :func:`gc` found: ``name`` relative to the dataset folder (a folder ends in
    ``/``), ``what`` it is (or why it is kept), and ``age``: seconds since it last changed
    (None when the store cannot tell)."""

    name: str
    what: str
    age: float | None


@dataclass(frozen=True)
class Collected:
    """What :func:`gc` removed (on a ``dry_run``: would remove) and what it kept of what no
    manifest lists, with why."""

    removed: list[Leftover] = field(default_factory=list)
    kept: list[Leftover] = field(default_factory=list)
    dry_run: bool = False


def parse_duration(value: float | int | str | datetime.timedelta) -> float:
    """Seconds of a duration: a number of seconds, a :class:`~datetime.timedelta`, or text
    such as ``90``, ``90s``, ``30m``, ``1.5h``, ``2d``.

    Example:
        >>> parse_duration("1.5h"), parse_duration(90), parse_duration("2d")
        (5400.0, 90.0, 172800.0)
    """
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # (an int past a float's range)
            seconds = float("inf")
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value.strip().lower())):
        seconds = float(m[1]) * _UNITS[m[2] or "s"]
    else:
        raise InvalidArgumentError(
            "a duration is a number of seconds or text such as 90s, 30m, 1h or 2d, not "
            + brief(value)
        )
    if not 0 <= seconds < float("inf"):
        raise InvalidArgumentError(
            f"a duration must be 0 or more seconds, and finite, not {brief(value)}"
        )
    return seconds


class _Listing:
    """The shard names the dataset's manifest lists, and the manifest's version they were
    read at (read before the content, so a publish in between shows as a new version)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.version: str | None = None
        self.names: set[str] = set()
        self.has_manifest = False
        self.read()

    def read(self) -> None:
        self.version = self.store.version(MANIFEST_NAME)
        try:
            manifest = read_manifest(self.store)
        except FormatError as exc:
            raise FormatError(
                f"{exc}; nothing was collected (gc removes only what a readable manifest "
                "does not list)"
            ) from None
        self.has_manifest = manifest is not None
        self.names = {s.shard_path for s in manifest.shards} if manifest is not None else set()

    def lists(self, name: str) -> bool:
        """Whether the manifest as it is now lists ``name`` (read again if it changed)."""
        if self.store.version(MANIFEST_NAME) != self.version:
            self.read()
        return name in self.names or not self.has_manifest


def gc(
    path: Location,
    *,
    older_than: float | str | datetime.timedelta = DEFAULT_OLDER_THAN,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> Collected:
    """Remove from the dataset at ``path`` (a folder or an fsspec URL) the shards no
    manifest lists, the staging folders of dead write jobs and dead writers' temporary
    files, each only once it has not changed for ``older_than`` (seconds, a timedelta, or
    ``"30m"``, ``"1h"``...; default an hour); with ``dry_run``, remove nothing and say
    what would go. The module docstring says exactly what is safe against a running writer.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> _ = dataset.write({"x": np.zeros((4, 2), np.float32)}, out, batch_size=2)
        >>> dataset.gc(out, older_than="1h")
        Collected(removed=[], kept=[], dry_run=False)
    """
    grace = parse_duration(older_than)
    store = storage_for(path, storage_options)
    if not store.is_folder():
        raise InvalidArgumentError(f"{store} is not a dataset folder")
    if not dry_run and not store.supports_deletes:
        raise UnsupportedError(f"cannot collect garbage in {store}: it cannot delete files")
    names = store.list_files()  # (before the manifest is read: see the module docstring)
    listing = _Listing(store)
    staged = _staged_jobs(store)
    if not (
        listing.has_manifest
        or any(n.endswith(SAFETENSORS.suffixes) for n in names)
        or any(isinstance(s, _Job) for s in staged)
    ):
        raise InvalidArgumentError(
            f"{store} is not a dataset folder: it holds no manifest ({MANIFEST_NAME}), no "
            f"shard (*{SAFETENSORS.suffixes[0]}) and no write job's staging folder; nothing "
            "was collected"
        )
    out = Collected(dry_run=dry_run)
    _shards(store, names, listing, grace, out)
    _temps(store, names, grace, out)
    _staging(store, staged, grace, out)
    return out


def _age(store: Store, name: str) -> float | None:
    when = store.modified(name)
    return None if when is None else max(0.0, time.time() - when)


def _old(age: float | None, grace: float) -> bool:
    """Whether something of ``age`` (None: unknown, taken as new) has been left alone for
    longer than ``grace``."""
    return grace == 0 or (age is not None and age > grace)


def _why_kept(age: float | None, grace: float) -> str:
    when = "of unknown age" if age is None else f"changed {_human(age)} ago"
    return f"{when}, less than older_than ({_human(grace)}): maybe a running writer's"


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _shards(
    store: Store, names: list[str], listing: _Listing, grace: float, out: Collected
) -> None:
    """The unlisted shards: removed when old enough and still unlisted right before."""
    if not listing.has_manifest:
        return  # (the folder's shards are the dataset, read by scanning)
    what = "a shard no manifest lists"
    for name in names:
        if not SHARD_NAME.fullmatch(name) or name in listing.names:
            continue
        try:
            age = _age(store, name)
        except SourceError:
            out.kept.append(Leftover(name, "named like a shard, but not a regular file", None))
            continue
        if not _old(age, grace):
            out.kept.append(Leftover(name, f"{what}; {_why_kept(age, grace)}", age))
        elif out.dry_run:
            out.removed.append(Leftover(name, what, age))
        else:
            with store.locked():  # (no publish between this check and the removal)
                if listing.lists(name):
                    out.kept.append(Leftover(name, "listed by a commit meanwhile", age))
                    continue
                try:
                    age = _age(store, name)
                except SourceError:
                    continue  # (swapped meanwhile: left alone)
                if not _old(age, grace):
                    continue
                store.remove(name)
            out.removed.append(Leftover(name, what, age))


def _temps(store: Store, names: list[str], grace: float, out: Collected) -> None:
    """Temporary files of the manifest, the index or a shard in a local dataset folder,
    removed only while no writer holds their lock."""
    root = store.local_path()
    if root is None:
        return  # (an object store writes each file in one put: no temporary files)
    what = "a temporary file of a writer that is gone"
    for name in names:
        base = _temp_of(name)
        if base is None or not (base in (MANIFEST_NAME, INDEX_NAME) or SHARD_NAME.fullmatch(base)):
            continue
        try:
            age = _age(store, name)
        except SourceError:
            continue
        if not _old(age, grace):
            out.kept.append(Leftover(name, f"a temporary file; {_why_kept(age, grace)}", age))
        elif out.dry_run:
            out.removed.append(Leftover(name, f"{what} (if it is: no writer holds it)", age))
        elif remove_if_unlocked(os.path.join(root, name)):
            out.removed.append(Leftover(name, what, age))
        else:
            out.kept.append(Leftover(name, "a temporary file a live writer holds", age))


def _temp_of(name: str) -> str | None:
    """The name whose tensorfile temporary file ``name`` is (None: it is none)."""
    m = _TEMP.fullmatch(name)
    return m[1] if m is not None and is_temp_name(name, m[1]) else None


@dataclass(frozen=True)
class _Job:
    """A write job's staging ``folder`` (``_staging/{job}``), the ``age`` of its newest
    file (None: unknown) and whether it holds no file at all."""

    folder: str
    age: float | None
    empty: bool


class _NotAJob(Exception):
    """A folder under ``_staging`` that holds what no writer makes (why: the message)."""


def _staged_jobs(store: Store) -> list[_Job | Leftover]:
    """Each folder under ``_staging``: a write job's (a :class:`_Job`), or else a
    :class:`Leftover` that says why it is kept. A local store lists without following a
    symlink at any level (a ``_staging`` or a job's folder swapped for one is refused with a
    SourceError): what it refuses is kept, with why."""
    try:
        jobs = store.list_folders(STAGING)
    except SourceError as exc:
        return [Leftover(f"{STAGING}/", f"not entered: {exc}", None)]
    found: list[_Job | Leftover] = []
    for job in jobs:
        folder = f"{STAGING}/{job}"
        try:
            found.append(_job(store, job))
        except _NotAJob as exc:
            found.append(Leftover(f"{folder}/", f"not a write job's: {exc}", None))
        except SourceError as exc:  # (a symlink, swapped in meanwhile: never followed)
            found.append(Leftover(f"{folder}/", f"not removed: {exc}", None))
    return found


def _job(store: Store, job: str) -> _Job:
    """The staging folder of the write job ``job`` as a writer leaves it: a name
    :func:`~.staging.new_job` makes, holding only its marker (:data:`~.staging.JOB_MARKER`)
    and task folders (``task-{id}-{random}``) that hold only shards; any of these may be a
    temporary file being written. Anything else (another name, a deeper folder, a file
    that is not a regular file) is no writer's: a :class:`_NotAJob` says which."""
    if not JOB_NAME.fullmatch(job):
        raise _NotAJob(f"no writer names a job {brief(job)}")
    folder = f"{STAGING}/{job}"
    files = [(folder, n) for n in store.list_files(folder)]
    for task in store.list_folders(folder):
        if not TASK_FOLDER.fullmatch(task):
            raise _NotAJob(f"it holds a folder {brief(task)}, which no writer makes")
        where = f"{folder}/{task}"
        if deeper := store.list_folders(where):
            raise _NotAJob(f"{task}/ holds a folder {brief(deeper[0])}, which no writer makes")
        files += [(where, n) for n in store.list_files(where)]
    ages: list[float | None] = []
    for where, name in files:
        base = _temp_of(name) or name  # (a task's shard, or the job's marker, being written)
        if not (SHARD_NAME.fullmatch(base) if where != folder else base == JOB_MARKER):
            raise _NotAJob(f"it holds {brief(_inside(folder, where, name))}, which no writer makes")
        try:
            ages.append(_age(store, f"{where}/{name}"))
        except SourceError:
            raise _NotAJob(
                f"it holds {brief(_inside(folder, where, name))}, which is not a regular file"
            ) from None
    if any(a is None for a in ages):
        return _Job(folder, None, False)
    return _Job(folder, min((a for a in ages if a is not None), default=None), not ages)


def _inside(folder: str, where: str, name: str) -> str:
    """The path of ``name`` in ``where``, relative to the job's ``folder``."""
    return f"{where}/{name}"[len(folder) + 1 :]


def _staging(store: Store, staged: list[_Job | Leftover], grace: float, out: Collected) -> None:
    """Remove the staging folders of write jobs whose newest file is older than ``grace``
    (each checked again right before); keep the rest, with why."""
    what = "the staging folder of a write job that is gone"
    for job in staged:
        if isinstance(job, Leftover):
            out.kept.append(job)
            continue
        try:
            _collect_job(store, job, grace, out, what)
        except _NotAJob as exc:  # (changed meanwhile)
            out.kept.append(Leftover(f"{job.folder}/", f"not a write job's: {exc}", None))
        except SourceError as exc:  # (a symlink, swapped in meanwhile: never followed)
            out.kept.append(Leftover(f"{job.folder}/", f"not removed: {exc}", None))
    if not out.dry_run and store.supports_deletes:
        store.remove_empty_folder(STAGING)


def _collect_job(store: Store, job: _Job, grace: float, out: Collected, what: str) -> None:
    """Remove (or, on a dry run, list) the ``job``'s staging folder if its newest file is
    older than ``grace``."""
    folder, age = job.folder, job.age
    if not job.empty and not _old(age, grace):
        out.kept.append(
            Leftover(f"{folder}/", f"a write job's staging; {_why_kept(age, grace)}", age)
        )
        return
    if not out.dry_run:
        # right before: a task that wrote meanwhile, or anything else put there
        now = _job(store, folder.rpartition("/")[2])
        if (now.empty and not job.empty) or not (now.empty or _old(now.age, grace)):
            return  # (emptied: the job committed or aborted meanwhile; or written to)
        age = now.age
        store.remove_tree(folder)
    out.removed.append(Leftover(f"{folder}/", what, age))
