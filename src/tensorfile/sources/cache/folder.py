"""The cache folder as one budget: one size limit, one lock, one LRU over both kinds of
entries (chunks of remote files, :mod:`._chunkdir`; whole files such as a dataset's shards,
:mod:`.entries`).

Layout, under the cache folder (``cache_dir=`` or ``$TENSORFILE_CACHE_DIR``)::

    .lock                                flock'ed (exclusively) while room is reserved or
                                         the folder swept; its mtime: the last sweep
    chunks-v1/<key>/info.json            a remote file's chunks (:mod:`._chunkdir`)
    chunks-v1/<key>/<index>.chunk
    shards-v1/<key>.shard, .sum, .lock   whole files (:mod:`.entries`)

What holds: the regular files of both layouts (entries, records, ``info.json``, and the
temporary files of writes in progress, counted at their full size from the moment they
start: they are made and sized while ``.lock`` is held) never take more than the limit.
Every write first reserves its bytes under ``.lock`` (:meth:`CacheFolder.reserve`), evicting
the least recently used entries of either kind (readers touch what they use); a whole file
that some process has open (a shared ``flock``) or this process will read soon is evicted
last, and only by a read that cannot go on otherwise. A scan removes what killed writers
left (their temporary files' locks are free), and anything but a regular file or folder at
an entry's name (:func:`~.files.heal`), and anything but a real folder at a layout
folder's name (:func:`~.files.open_folder`: a symlink is removed, never followed, so nothing
outside the cache folder is touched). Every folder below the cache folder is opened without
following a symlink and what is in it listed, made, renamed and removed relative to that
descriptor, never through its path: a folder swapped for a symlink by another process a
moment after its check leads nowhere. The per-layout lock and sweep marker of older
versions (``chunks-v1/.lock``, ``chunks-v1/.swept``, ``shards-v1/.lock``) are removed.

Example:
    >>> import os, tempfile
    >>> cache = CacheFolder(tempfile.mkdtemp(), limit=1000)
    >>> cache.reserve(600, lambda: "room"), cache.reserve(2000, lambda: "room")
    ('room', None)
    >>> cache.sweep().bytes
    0
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from ...core.atomic import remove_stale_temps
from .files import close_fd, heal, lock_fd, open_folder, open_folders, remove_unused

__all__ = [
    "CHUNKS",
    "FILES",
    "RESERVE",
    "STALE_SWEEP",
    "CacheFolder",
    "Entry",
    "SweepResult",
    "free_space",
]

CHUNKS = "chunks-v1"
"""The folder of the chunk layout (another layout, another folder: nothing is misread)."""
FILES = "shards-v1"
"""The folder of the whole-file layout (a dataset's shards)."""
LOCK = ".lock"
STALE_SWEEP = 3600.0
"""A cache not swept for this many seconds is swept when a file is opened through it."""
RESERVE = 1 << 30
"""Free space a chunk write leaves on the cache's file system (else it is not written)."""

_KEY = re.compile(r"[0-9a-f]{40}")
_CHUNK = re.compile(r"(0|[1-9][0-9]{0,11})\.chunk")
_CHUNK_TEMP = re.compile(
    r"\.((?:0|[1-9][0-9]{0,11})\.chunk|info\.json)\.tensorfile-[0-9a-f]{12}\.tmp"
)
_DATA = re.compile(r"([0-9a-f]{40})\.shard")
_SIDE = re.compile(r"([0-9a-f]{40})\.(?:lock|sum)")
_FILE_TEMP = re.compile(r"\.([0-9a-f]{40}\.(?:shard|sum))\.tensorfile-[0-9a-f]{12}\.tmp")
_OLD = ((CHUNKS, ".lock"), (CHUNKS, ".swept"), (FILES, ".lock"))

T = TypeVar("T")

_THREADS: dict[str, threading.RLock] = {}
"""One lock per cache folder for this process's threads: they queue for the folder's
``.lock`` here, woken the moment it is released, instead of polling its ``flock`` (which
only other processes then contend for); a sweep or reservation of one thread is never
slowed by another's backing off."""
_THREADS_GUARD = threading.Lock()


def _thread_lock(folder: str) -> threading.RLock:
    with _THREADS_GUARD:
        lock = _THREADS.get(folder)
        if lock is None:
            lock = _THREADS[folder] = threading.RLock()
        return lock


def _forget_thread_locks() -> None:
    # a fork's child has one thread: a lock another thread held at the fork is never freed
    global _THREADS_GUARD
    _THREADS.clear()
    _THREADS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_thread_locks)


@dataclass(order=True, slots=True)
class Entry:
    """One evictable entry: a chunk file, or a whole file with its record (``key``)."""

    mtime: float
    size: int
    path: str
    key: str = ""
    """The whole file's key; ``""``: a chunk."""
    record: str = ""
    folders: tuple[str, ...] = ()
    """The folders from the cache folder down to the entry's (reopened, never followed, to
    remove it)."""


@dataclass(slots=True)
class _Scan:
    used: int = 0
    entries: list[Entry] = field(default_factory=list)
    temps_removed: int = 0


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep found and did."""

    entries: int
    bytes: int
    evicted: int
    evicted_bytes: int
    temps_removed: int

    @property
    def chunks(self) -> int:
        """The entries found (the chunk cache's older name)."""
        return self.entries


class CacheFolder:
    """The budget of one cache folder: ``limit`` bytes over both layouts (see the module
    docstring)."""

    def __init__(self, folder: str, limit: int) -> None:
        self.folder = folder
        self.limit = limit

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """Hold the folder's lock (its descriptor: touched after each sweep), this process's
        other threads queued behind it without polling."""
        with _thread_lock(self.folder):
            fd = lock_fd(os.path.join(self.folder, LOCK))
            try:
                yield fd
            finally:
                close_fd(fd)

    def reserve(
        self,
        size: int | Callable[[], int],
        start: Callable[[], T],
        *,
        protect: Collection[str] = (),
        keep: str | None = None,
        evict_in_use: bool = False,
    ) -> T | None:
        """``start()`` (which makes and sizes the files of ``size`` bytes; a callable: asked
        under the lock, after the scan) called under the lock once the folder has room for
        them, least recently used entries evicted first; None when there is no room. Whole
        files of keys in ``protect``, or open somewhere, are kept, unless ``evict_in_use``
        (then all but ``keep``)."""
        with self.locked() as fd:
            found = self._scan()
            excess = found.used + (size if isinstance(size, int) else size()) - self.limit
            if excess > 0:
                excess -= _evict(self.folder, found, excess, protect, force=False)
            if excess > 0 and evict_in_use:
                kept = () if keep is None else (keep,)
                excess -= _evict(self.folder, found, excess, kept, force=True)
            _touch(fd)
            if excess > 0:
                return None
            return start()

    def sweep(self) -> SweepResult:
        """Under the lock: remove dead writers' temporary files and the least recently used
        entries (whole files open somewhere kept) until the folder fits its limit."""
        with self.locked() as fd:
            found = self._scan()
            total, n = found.used, len(found.entries)
            before = len(found.entries)
            over = total - self.limit
            freed = _evict(self.folder, found, over, (), force=False) if over > 0 else 0
            _touch(fd)
            return SweepResult(n, total, before - len(found.entries), freed, found.temps_removed)

    def usage(self) -> int:
        """Bytes the folder's entries and writes in progress take now."""
        with self.locked():
            return self._scan().used

    def sweep_due(self) -> bool:
        """Whether the folder was last swept over :data:`STALE_SWEEP` seconds ago."""
        try:
            st = os.stat(os.path.join(self.folder, LOCK), follow_symlinks=False)
        except OSError:
            return True
        return time.time() - st.st_mtime > STALE_SWEEP

    # -- the scan -----------------------------------------------------------------------------

    def _scan(self) -> _Scan:
        found = _Scan()
        # each layout folder is opened without following a symlink (a planted link, FIFO or
        # file there is removed) and everything below it is listed, checked and removed
        # relative to descriptors: a folder swapped for a symlink meanwhile is never followed,
        # so nothing outside the cache folder is scanned or removed
        for layout in (CHUNKS, FILES):
            root = os.path.join(self.folder, layout)
            fd = open_folder(root, create=False)
            if fd is None:
                continue
            try:
                for name in (old for where, old in _OLD if where == layout):
                    with contextlib.suppress(OSError):
                        if not heal(os.path.join(root, name), dir_fd=fd):
                            os.unlink(name, dir_fd=fd)
                (_scan_chunks if layout == CHUNKS else _scan_files)(root, fd, found)
            finally:
                os.close(fd)
        return found


def _listing(fd: int) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    except OSError:
        return []


def _regular(e: os.DirEntry[str], folder: str, fd: int) -> os.stat_result | None:
    """``e``'s stat (``e`` listed from ``fd``, the folder ``folder``) when it is a regular
    file; anything else there is removed (None)."""
    try:
        st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode):
        return st
    with contextlib.suppress(OSError):
        heal(os.path.join(folder, e.name), dir_fd=fd)
    return None


def _renamed(fd: int, base: str, listed: set[str]) -> os.stat_result | None:
    """The stat of ``base`` (in the folder ``fd``) when the temporary file of it that was
    listed is gone and ``base`` was not listed: a write renamed it into place after the
    folder was listed (counted, so that a scan racing a commit never sees the folder
    emptier than it is)."""
    if base in listed:
        return None
    listed.add(base)
    try:
        st = os.stat(base, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None  # (a dead writer's temporary file, removed)
    return st if stat.S_ISREG(st.st_mode) else None


def _temps(folder: str, fd: int, bases: set[str], found: _Scan) -> list[str]:
    """Remove the dead writers' temporary files of ``bases`` in ``folder`` (open as ``fd``)."""
    gone = []
    for base in sorted(bases):
        removed = remove_stale_temps(os.path.join(folder, base), dir_fd=fd)
        found.temps_removed += len(removed)
        gone += removed
    return gone


def _scan_chunks(root: str, root_fd: int, found: _Scan) -> None:
    for top in _listing(root_fd):
        if not _KEY.fullmatch(top.name):
            continue
        folder = os.path.join(root, top.name)
        with contextlib.suppress(OSError):  # (anything but a real folder there: removed)
            fd = open_folder(folder, create=False, parent=root_fd)
            if fd is None:
                continue
            try:
                if _scan_chunk_folder(folder, fd, found) == 0:
                    # no chunk: removed (under the lock: a writer makes its folder under it)
                    with contextlib.suppress(OSError):
                        os.unlink("info.json", dir_fd=fd)
                    with contextlib.suppress(OSError):
                        os.rmdir(top.name, dir_fd=root_fd)
            finally:
                os.close(fd)


def _scan_chunk_folder(folder: str, fd: int, found: _Scan) -> int:
    """Count one file's chunk folder (``folder``, open as ``fd``) into ``found``; the chunks
    (and chunk writes in progress) it holds."""
    listed = _listing(fd)
    names = {e.name for e in listed}
    bases = {m.group(1) for e in listed if (m := _CHUNK_TEMP.fullmatch(e.name))}
    gone = set(_temps(folder, fd, bases, found))
    parts = (CHUNKS, os.path.basename(folder))
    chunks = 0
    for e in listed:
        if e.name in gone:
            continue
        chunk, temp = _CHUNK.fullmatch(e.name), _CHUNK_TEMP.fullmatch(e.name)
        if not (chunk or temp or e.name == "info.json"):
            continue
        st, name = _regular(e, folder, fd), e.name
        if st is None and temp is not None and not _exists(e.name, fd):
            name = temp.group(1)
            st = _renamed(fd, name, names)
            chunk = _CHUNK.fullmatch(name)
        if st is None:
            continue
        found.used += st.st_size
        if chunk:
            path = os.path.join(folder, name)
            found.entries.append(Entry(st.st_mtime, st.st_size, path, folders=parts))
        if name != "info.json":
            chunks += 1
    return chunks


def _exists(name: str, fd: int) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _scan_files(root: str, fd: int, found: _Scan) -> None:
    listed = _listing(fd)
    names = {e.name for e in listed}
    bases = {m.group(1) for e in listed if (m := _FILE_TEMP.fullmatch(e.name))}
    gone = set(_temps(root, fd, bases, found))
    sides: dict[str, int] = {}
    cached: dict[str, Entry] = {}
    for e in listed:
        if e.name in gone:
            continue
        data, side = _DATA.fullmatch(e.name), _SIDE.fullmatch(e.name)
        temp = _FILE_TEMP.fullmatch(e.name)
        if not (data or side or temp):
            continue
        st, name = _regular(e, root, fd), e.name
        if st is None and temp is not None and not _exists(e.name, fd):
            name = temp.group(1)
            st = _renamed(fd, name, names)
            data, side = _DATA.fullmatch(name), _SIDE.fullmatch(name)
        if st is None:
            continue
        found.used += st.st_size
        if data:
            key = data.group(1)
            path, record = os.path.join(root, name), os.path.join(root, f"{key}.sum")
            cached[key] = Entry(st.st_mtime, st.st_size, path, key, record, (FILES,))
        elif side:
            sides[side.group(1)] = sides.get(side.group(1), 0) + st.st_size
    for key, entry in cached.items():
        entry.size += sides.get(key, 0)  # (its record goes with it)
        found.entries.append(entry)
    for key in sorted(sides.keys() - cached.keys()):
        found.used -= _drop_side(root, fd, key)


def _drop_side(root: str, fd: int, key: str) -> int:
    """Remove the lock file and record of a whole file that is not cached (in ``root``,
    open as ``fd``), if no one holds its lock (a download writes the record before the
    file); the bytes removed."""
    lock, record = f"{key}.lock", f"{key}.sum"
    try:
        lfd = lock_fd(os.path.join(root, lock), wait=False, dir_fd=fd)
    except OSError:
        return 0
    try:
        fcntl.flock(lfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _exists(f"{key}.shard", fd):
            return 0
        freed = 0
        with contextlib.suppress(OSError):
            freed = os.stat(record, dir_fd=fd, follow_symlinks=False).st_size
            os.unlink(record, dir_fd=fd)
        os.unlink(lock, dir_fd=fd)
        return freed
    except OSError:
        return 0
    finally:
        close_fd(lfd)


def _evict(folder: str, found: _Scan, excess: int, protect: Collection[str], *, force: bool) -> int:
    """Remove least recently used entries of the cache folder ``folder`` until ``excess``
    bytes are freed; returns the bytes freed. Without ``force``, whole files in ``protect``
    or open anywhere are kept; with it, only those in ``protect``."""
    freed = 0
    for entry in sorted(found.entries):
        if freed >= excess:
            break
        if entry.key and entry.key in protect:
            continue
        if not _remove(folder, entry, force):
            continue
        freed += entry.size
        found.used -= entry.size
        found.entries.remove(entry)
    return freed


def _remove(folder: str, entry: Entry, force: bool) -> bool:
    """Remove ``entry`` (reached from the cache folder ``folder`` through its folders, none
    followed if it is a symlink now: such an entry is not removed); whether it is gone."""
    try:
        fd = open_folders(folder, *entry.folders, create=False)
    except OSError:
        return False
    if fd is None:
        return False
    try:
        if entry.key:
            return remove_unused(entry.path, entry.record, force=force, dir_fd=fd)
        os.unlink(os.path.basename(entry.path), dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _touch(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.utime(fd)


def free_space(folder: str) -> int:
    """Bytes an unprivileged writer may still use on ``folder``'s file system (huge when it
    cannot be told)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize
