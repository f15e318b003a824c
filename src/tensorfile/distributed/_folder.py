"""A local (or shared) checkpoint folder while a save writes it: the coordinator's lock,
the staging files every rank writes into, and what is left of dead saves.

Staging files are named ``.tensorfile-dcp-<save id>-<file>.part``: hidden, and never ending
in ``.safetensors`` (torch's ``HuggingFaceStorageReader`` takes every such file of a folder).
The lock is an exclusive ``flock`` of the folder itself, held by the coordinator from the
plan to the publication: no file is left for it, and it goes with the process, however
that ends. Under it no other save is live, so every staging file found is a dead save's.

Example:
    >>> staging_name("0a1b", "model.safetensors")
    '.tensorfile-dcp-0a1b-model.safetensors.part'
"""

from __future__ import annotations

import errno
import fcntl
import os

from tensorfile.core.atomic import (
    TEMP_TAG,
    is_temp_name,
    preallocate,
    remove_if_unlocked,
    remove_stale_temps,
    write_all,
)
from tensorfile.core.digests import Digest
from tensorfile.core.errors import ConcurrentWriteError, SourceError
from tensorfile.core.parallel import in_threads

from . import _objects

__all__ = [
    "create",
    "digests",
    "fsync_file",
    "lock",
    "remove_dead_saves",
    "remove_old_sidecars",
    "staging_name",
]

_STAGING = ".tensorfile-dcp-"
_READ_STEP = 16 << 20


def staging_name(save_id: str, name: str) -> str:
    """The staging name of the file ``name`` of the save ``save_id``."""
    return f"{_STAGING}{save_id}-{name}.part"


def lock(folder: str) -> int:
    """An exclusive ``flock`` of ``folder`` (its descriptor: closing it releases the lock);
    a :class:`~tensorfile.errors.ConcurrentWriteError` when another save holds it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(f"cannot open {folder}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise ConcurrentWriteError(
                f"{folder}: another job is saving a checkpoint to this folder; nothing was written"
            ) from None
        raise SourceError(f"cannot lock {folder}: {exc.strerror or exc}") from exc
    return fd


def create(stage: str, header: bytes, size: int) -> None:
    """A staging file of ``size`` bytes: the header, then the data region reserved."""
    try:
        fd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise SourceError(f"cannot create {stage}: {exc.strerror or exc}") from exc
    try:
        write_all(fd, memoryview(header))
        preallocate(fd, size - len(header), len(header))
        os.ftruncate(fd, size)
    except OSError as exc:
        raise SourceError(f"cannot write {stage}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """Flush the file ``path`` to stable storage."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def digests(
    fd: int, shown: str, regions: dict[str, tuple[int, int]], algorithm: str, threads: int
) -> dict[str, str]:
    """The digest of each tensor's bytes in the open file ``fd``, on ``threads`` threads."""
    found: dict[str, str] = {}

    def one(item: tuple[str, tuple[int, int]]) -> None:
        name, (start, stop) = item
        d = Digest(algorithm)
        pos = start
        while pos < stop:
            chunk = os.pread(fd, min(_READ_STEP, stop - pos), pos)
            if not chunk:
                raise SourceError(f"{shown} ended early at byte {pos}")
            d.update(chunk)
            pos += len(chunk)
        found[name] = d.value()

    in_threads(threads, list(regions.items()), one)
    return found


def remove_dead_saves(folder: str, prefix: str, index_name: str) -> None:
    """The staging files of saves that died (call it holding the folder's lock), and the
    temporary files their commits left: an objects file's (a name no later save writes
    again) and the index's (a later save of one file writes no index)."""
    tag = f".{TEMP_TAG}-"
    for name in _listing(folder):
        if name.startswith(_STAGING):
            _unlink(os.path.join(folder, name))
        elif name.startswith(".") and tag in name:
            sidecar = name[1 : name.rfind(tag)]
            if _objects.is_sidecar(sidecar, prefix) and is_temp_name(name, sidecar):
                remove_if_unlocked(os.path.join(folder, name))
    remove_stale_temps(os.path.join(folder, index_name))


def remove_old_sidecars(folder: str, prefix: str, keep: str | None) -> None:
    """The objects files of earlier saves."""
    for name in _listing(folder):
        if _objects.is_sidecar(name, prefix) and name != keep:
            _unlink(os.path.join(folder, name))


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
