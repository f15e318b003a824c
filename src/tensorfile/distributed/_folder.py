"""A local (or shared) checkpoint folder while a save writes it: the coordinator's lock,
the staging files every rank writes into, and what is left of dead saves.

Staging files are named ``.tensorfile-dcp-<save id>-<file>.part``: hidden, and never ending
in ``.safetensors`` (torch's ``HuggingFaceStorageReader`` takes every such file of a folder).
Two locks, both ``flock`` (they go with the process, however it ends):

* the folder's own (:func:`folder_lock`), held briefly: while a save creates its staging
  files and while it publishes, so two saves never publish at once;
* each save's (:func:`save_lock`, on ``.tensorfile-dcp-<save id>.lock``), held by its
  coordinator from the plan until it publishes or is given up: a staging file whose save's
  lock is free is a dead save's, and the next save removes it.

A save that another one published over since it planned fails at its own publication
(:class:`~tensorfile.errors.ConcurrentWriteError`): saves of two jobs never interleave.

Example:
    >>> staging_name("0a1b", "model.safetensors")
    '.tensorfile-dcp-0a1b-model.safetensors.part'
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

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
    "CAN_FLUSH_RANGE",
    "create",
    "digests",
    "drop_save_lock",
    "flush_range",
    "folder_lock",
    "fsync_file",
    "remove_dead_saves",
    "remove_old_sidecars",
    "save_lock",
    "staging_name",
    "version",
]

_STAGING = ".tensorfile-dcp-"
_READ_STEP = 16 << 20


def staging_name(save_id: str, name: str) -> str:
    """The staging name of the file ``name`` of the save ``save_id``."""
    return f"{_STAGING}{save_id}-{name}.part"


def _flock(path: str, flags: int, *, create: bool = False) -> int | None:
    """An exclusive ``flock`` of ``path`` (its descriptor: closing it releases the lock);
    None when another holds it."""
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
    except OSError as exc:
        raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise SourceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
    return fd


@contextlib.contextmanager
def folder_lock(folder: str, timeout: float = 60.0) -> Iterator[None]:
    """The folder's lock while the block runs (waiting up to ``timeout`` seconds for
    another save's short hold; then a :class:`~tensorfile.errors.ConcurrentWriteError`)."""
    deadline = time.monotonic() + timeout
    while (fd := _flock(folder, os.O_RDONLY | os.O_DIRECTORY)) is None:
        if time.monotonic() > deadline:
            raise ConcurrentWriteError(
                f"{folder}: another save held the folder for over {timeout:g} s; nothing "
                "was written"
            )
        time.sleep(0.01)
    try:
        yield
    finally:
        os.close(fd)


def save_lock(folder: str, save_id: str) -> int:
    """The lock of the save ``save_id`` (held until its descriptor is closed)."""
    fd = _flock(os.path.join(folder, f"{_STAGING}{save_id}.lock"), os.O_RDWR, create=True)
    if fd is None:  # (a fresh random id: nobody else has it)
        raise ConcurrentWriteError(f"{folder}: save {save_id} is already running")
    return fd


def drop_save_lock(folder: str, save_id: str) -> None:
    """Remove the lock file of the save ``save_id`` (it still holds the lock: call it
    holding the folder's lock, then close the lock's descriptor)."""
    _unlink(os.path.join(folder, f"{_STAGING}{save_id}.lock"))


def version(folder: str, name: str) -> str | None:
    """What tells the file ``name`` apart from any other version of it (None: no file)."""
    try:
        st = os.stat(os.path.join(folder, name))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"cannot stat {folder}/{name}: {exc.strerror or exc}") from exc
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


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


def _libc_sync_file_range() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range() if sys.platform == "linux" else None
CAN_FLUSH_RANGE = _SYNC_FILE_RANGE is not None
"""Whether :func:`flush_range` writes a byte range out on its own (Linux's
``sync_file_range``); elsewhere it flushes the whole file."""

_WAIT_WRITE_WAIT = 1 | 2 | 4  # SYNC_FILE_RANGE_WAIT_BEFORE | _WRITE | _WAIT_AFTER


def flush_range(fd: int, offset: int, length: int) -> None:
    """Write the dirty pages of ``length`` bytes of ``fd`` from ``offset`` to the device and
    wait for them (the data only: the file's metadata is flushed by :func:`fsync_file`,
    which the coordinator runs on every file before it publishes). Ranks writing parts of
    one file flush their own parts at once, rather than each the whole file."""
    if _SYNC_FILE_RANGE is None:
        os.fdatasync(fd)
        return
    if _SYNC_FILE_RANGE(fd, offset, length, _WAIT_WRITE_WAIT) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


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
    """The staging files of saves that died or were given up (their lock is free; call it
    holding the folder's lock, so no save is creating its lock meanwhile), and the
    temporary files their commits left: an objects file's (a name no later save writes
    again) and the index's (a later save of one file writes no index); a live writer holds
    its temporary file's ``flock``, and that file stays."""
    listing = _listing(folder)
    names = [n for n in listing if n.startswith(_STAGING)]
    ids = {n[len(_STAGING) :].partition("-")[0].partition(".")[0] for n in names}
    for save_id in ids:
        lock_name = f"{_STAGING}{save_id}.lock"
        if lock_name in names:
            fd = _flock(os.path.join(folder, lock_name), os.O_RDWR)
            if fd is None:
                continue  # a live save's
            os.close(fd)
        for name in names:
            if name.startswith(f"{_STAGING}{save_id}-"):
                _unlink(os.path.join(folder, name))
        _unlink(os.path.join(folder, lock_name))  # (last: its files are gone first)
    tag = f".{TEMP_TAG}-"
    for name in listing:
        if name.startswith(".") and tag in name:
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
