"""Whole files in the cache folder (a dataset's shards): downloaded once across a node's
processes into a temporary file whose room is reserved first, renamed into place, read
locally and held while in use. The folder's one budget, lock and LRU are :mod:`.folder`'s;
what names an entry (its key) and how its bytes are fetched are the caller's.

Layout, under the cache folder::

    shards-v1/<key>.shard                a complete file
    shards-v1/<key>.lock                 flock'ed (exclusively) while <key> is downloaded
    shards-v1/<key>.sum                  its XXH3-64 and ETag at download (a record)
    shards-v1/.<key>.shard.tensorfile-<hex>.tmp          a download in progress

What holds:

* **The limit.** A download reserves its size and its record's room under the folder's
  lock (:meth:`~.folder.CacheFolder.reserve`), the temporary file preallocated then: the
  folder never holds more than its limit. A file some process has open (a shared ``flock``)
  or this process will read soon (``protect``) is evicted last, and only by a read that
  cannot proceed otherwise. A file larger than the limit is an
  :class:`~tensorfile.errors.InvalidArgumentError`.
* **One download per file.** A per-key ``flock`` makes other processes (and threads) wait
  for the download, then use the file. No lock is waited for without bound
  (:mod:`.guards`): the per-key lock for :data:`WAIT_SECONDS`, the folder's and a cached
  file's shared lock for :data:`~.guards.LOCK_WAIT`; then the read goes on without the
  cache (:class:`~.guards.LockHeld`, which the caller turns into a warning).
* **Only this user's.** A cache folder (or ``shards-v1``) another user could write in is
  refused (:class:`~.guards.UntrustedFolder`); a cached file of another user's is removed,
  never read.
* **Atomic.** A download goes to a temporary file that is fsync'ed and renamed into place;
  a process killed mid-download leaves a temporary file whose lock is free: the next scan
  removes it (and so releases its room).
* **Checked.** A cached file of the wrong size, or not a regular file, is removed and
  fetched again, never read. With ``verify``, each open hashes the file and asks for the
  object's version, both compared with the record.
* **Fork-safe.** Lock-holding descriptors are closed in a forked child (:mod:`.files`).

Example:
    >>> import os, tempfile
    >>> files = FileEntries(tempfile.mkdtemp(), limit=1 << 20)
    >>> def download(fd: int) -> str | None:
    ...     os.pwrite(fd, b"0123456789", 0)
    ...     return '"v1"'
    >>> path, fd = files.fetch("ab" * 20, 10, download, where="doc")
    >>> open(path, "rb").read(), files.downloads
    (b'0123456789', 1)
    >>> close_fd(fd)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Collection, Iterator

from ...core.atomic import AtomicFile
from ...core.errors import InvalidArgumentError, SourceError, TensorFileError
from .files import (
    RECORD_BYTES,
    close_fd,
    digest_fd,
    drop,
    end_temp,
    heal,
    is_entry,
    lock_fd,
    lock_same,
    new_temp,
    open_fd,
    open_folders,
    read_record,
    remove_stuck,
    write_record,
)
from .folder import FILES, CacheFolder
from .guards import CacheBypass, check_root, distrust
from .settings import CACHE_SIZE_ENV

__all__ = ["WAIT_SECONDS", "FileEntries", "close_fd"]

WAIT_SECONDS = 120.0
"""How long a read waits for other processes' downloads: to free room (then it fails), and
of the same file (its lock; still held then, the read goes on without the cache:
:class:`~.guards.LockHeld`)."""

Download = Callable[[int], "str | None"]
"""Fill the open file (already sized) with the entry's bytes; returns its version."""
Version = Callable[[], "str | None"]
"""The entry's version as its store has it now (for ``verify``)."""


class FileEntries:
    """Whole-file entries of the cache folder ``folder`` (see the module docstring)."""

    def __init__(self, folder: str, limit: int, *, verify: bool = False) -> None:
        self.folder = folder
        self.limit = limit
        self.cache = CacheFolder(folder, limit)
        self.root = os.path.join(folder, FILES)
        self.verify = verify
        self.downloads = 0
        """Files this object downloaded (in this process)."""
        self._ready = False

    def prepare(self, what: str = "the shard cache") -> None:
        """Create the folder; a cache folder that is a file or cannot be written is a
        :class:`~tensorfile.errors.SourceError` naming it, one another user could write in
        an :class:`~.guards.UntrustedFolder` (read without the cache)."""
        if self._ready:
            return
        where = f"cache_dir {self.folder}"
        try:
            os.makedirs(self.folder, 0o700, exist_ok=True)
        except OSError as exc:
            why = "it is a file, not a folder" if exc.errno in (errno.ENOTDIR, errno.EEXIST) else (
                exc.strerror or str(exc))  # fmt: skip
            raise SourceError(f"{where} cannot hold {what}: {why}") from exc
        if not os.path.isdir(self.folder):
            raise SourceError(f"{where} cannot hold {what}: it is not a folder")
        check_root(self.folder)
        try:
            close_fd(lock_fd(os.path.join(self.folder, ".lock"), wait=False))
            with self._at_root() as fd:  # (a planted link, FIFO or file: removed, not followed)
                end_temp(new_temp(os.path.join(self.root, ".probe"), 0, dir_fd=fd), commit=False)
        except CacheBypass:
            raise
        except (OSError, SourceError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SourceError(f"{where} cannot hold {what}: {why}") from exc
        self._ready = True

    def path(self, key: str) -> str:
        """The file of a complete entry."""
        return os.path.join(self.root, f"{key}.shard")

    @contextlib.contextmanager
    def _at_root(self) -> Iterator[int]:
        """A descriptor of the layout folder (``shards-v1``), opened without following a
        symlink (anything but a real folder there removed, and a folder made): every entry
        is opened, made, renamed and removed relative to it, never through the folder's
        path, which another process may swap for a symlink meanwhile."""
        fd = open_folders(self.folder, FILES)
        try:
            yield fd
        finally:
            os.close(fd)

    def record(self, key: str) -> str:
        """The record of an entry (its checksum and ETag at download)."""
        return os.path.join(self.root, f"{key}.sum")

    # -- using entries ------------------------------------------------------------------------

    def open_cached(
        self,
        key: str,
        size: int,
        *,
        locked: bool = False,
        fresh: bool = False,
        version: Version | None = None,
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the cached entry, its ``fd`` holding a shared lock that marks it
        in use (close it with :func:`~.files.close_fd`), touched as recently used; None when
        it is not cached. A file of the wrong size, anything but a regular file, and (with
        :attr:`verify`) a file whose checksum or ``version()`` differs from its record is
        removed (and None returned); ``locked``: the caller holds the entry's lock;
        ``fresh``: it was just downloaded (not verified again)."""
        self.prepare()
        with self._at_root() as root:
            return self._open_cached(root, key, size, locked, fresh, version)

    def _open_cached(
        self,
        root: int,
        key: str,
        size: int,
        locked: bool,
        fresh: bool,
        version: Version | None,
    ) -> tuple[str, int] | None:
        path = self.path(key)
        for _ in range(8):
            try:
                fd = open_fd(path, os.O_RDONLY, dir_fd=root)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a symlink, socket
                    self._damaged(key, None, locked)
                    return None
                raise SourceError(f"cannot read the cached file {path}: {exc.strerror}") from exc
            try:
                st = os.fstat(fd)
                if not is_entry(st):  # a FIFO, a directory, a hard link: never used, removed
                    close_fd(fd)
                    self._damaged(key, None, locked)
                    return None
                if distrust(st, fd) is not None:  # another user's: never read, removed
                    close_fd(fd)
                    drop(path, st, dir_fd=root)
                    return None
                # (remembered by the folder: one user holding every shard costs one wait)
                if not lock_same(fd, path, st, fcntl.LOCK_SH, dir_fd=root, memory=self.root):
                    close_fd(fd)  # evicted or replaced meanwhile: look again
                    continue
                if st.st_size != size or (
                    self.verify and not fresh and not self._ok(root, key, fd, version)
                ):
                    close_fd(fd)
                    self._damaged(key, st, locked)
                    return None
                with contextlib.suppress(OSError):
                    os.utime(fd)  # recently used
                return path, fd
            except BaseException:
                with contextlib.suppress(OSError):
                    close_fd(fd)
                raise
        return None

    def _ok(self, root: int, key: str, fd: int, version: Version | None) -> bool:
        """Whether the open entry of ``key`` (in the layout folder ``root``) matches its
        record: the checksum of its bytes, and the version the store gives now (when it
        gives one)."""
        found = read_record(self.record(key), dir_fd=root)
        if found is None:
            return False  # (a crash between the two renames, or an older cache)
        digest, was = found
        if digest_fd(fd, os.fstat(fd).st_size) != digest:
            return False
        if was is None or version is None:
            return True
        now = version()
        return now is None or now == was

    def fetch(
        self,
        key: str,
        size: int,
        download: Download,
        *,
        where: str,
        protect: Collection[str] = (),
        background: bool = False,
        version: Version | None = None,
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the entry as :meth:`open_cached` gives it, ``download``\\ ed
        first when it is not cached (once across the node: others wait on its lock).
        ``where`` names it in errors. ``protect``: keys this process will read soon (evicted
        last). ``background``: a prefetch, which gives up (None) rather than evict files in
        use or wait for room."""
        try:
            return self._fetch(key, size, download, where, protect, background, version)
        except TensorFileError:
            raise  # (a SourceError of the store is an OSError too: it says what it is)
        except OSError as exc:  # the folder removed or made unusable under us
            raise SourceError(
                f"{where}: the shard cache {self.folder} failed: {exc.strerror or exc}"
            ) from exc

    def _fetch(
        self,
        key: str,
        size: int,
        download: Download,
        where: str,
        protect: Collection[str],
        background: bool,
        version: Version | None,
    ) -> tuple[str, int] | None:
        found = self.open_cached(key, size, version=version)
        if found is not None:
            return found
        if size > self.limit - RECORD_BYTES:
            raise InvalidArgumentError(
                f"{where}: the shard is {size:,} bytes, more than the cache limit of "
                f"{self.limit:,} bytes can hold with its record (cache_limit, or "
                f"${CACHE_SIZE_ENV}); raise the limit or read without cache_dir"
            )
        with self._lock(key):
            found = self.open_cached(key, size, locked=True, version=version)
            if found is not None:
                return found
            tmp = self.reserve(key, size, set(protect) | {key}, background, where=where)
            if tmp is None:
                return None
            try:
                rw = open_fd(tmp.tmp, os.O_RDWR, dir_fd=tmp.dir_fd)  # (for mmap)
                try:
                    got = download(rw)
                    digest = digest_fd(rw, size)
                finally:
                    close_fd(rw)
                with self.cache.locked():  # the record takes the room kept for it
                    os.ftruncate(tmp.fd, size)
                    # (before the file, see _ok; in the folder the file is renamed in)
                    write_record(self.record(key), digest, got, dir_fd=tmp.dir_fd)
                end_temp(tmp, commit=True)
            except BaseException:
                end_temp(tmp, commit=False)
                raise
            self.downloads += 1
            return self.open_cached(key, size, locked=True, fresh=True)

    def discard(self, key: str) -> None:
        """Remove the cached copy of an entry (one found corrupt by its reader); one that
        cannot be removed is a :class:`~.guards.StuckEntry` (read without the cache)."""
        with self._lock(key), self._at_root() as root:
            self._unlink(root, key)

    def _damaged(self, key: str, seen: os.stat_result | None, locked: bool) -> None:
        """Remove the cached file of ``key`` if it is still the one ``seen`` (a wrong size or
        checksum), or whatever is there if it is not an entry the cache may use (``seen``
        None). One that cannot be removed is a :class:`~.guards.StuckEntry`: a download
        could never be renamed over it."""
        with contextlib.nullcontext() if locked else self._lock(key), self._at_root() as root:
            if seen is None:
                heal(self.path(key), dir_fd=root)
                return
            try:
                now = os.stat(f"{key}.shard", dir_fd=root, follow_symlinks=False)
            except OSError:
                return
            if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
                self._unlink(root, key)

    def _unlink(self, root: int, key: str) -> None:
        """Remove the file of ``key`` and its record (in the layout folder ``root``)."""
        try:
            os.unlink(f"{key}.shard", dir_fd=root)
        except FileNotFoundError:
            pass
        except OSError as exc:
            remove_stuck(self.path(key), exc, dir_fd=root)
        with contextlib.suppress(OSError):
            os.unlink(f"{key}.sum", dir_fd=root)

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Hold the exclusive lock of ``key``."""
        with self._at_root() as root:
            fd = lock_fd(os.path.join(self.root, f"{key}.lock"), dir_fd=root, within=WAIT_SECONDS)
        try:
            yield
        finally:
            close_fd(fd)

    # -- room ---------------------------------------------------------------------------------

    def reserve(
        self, key: str, size: int, protect: set[str], background: bool, *, where: str
    ) -> AtomicFile | None:
        """A preallocated temporary file for ``key`` (``size`` bytes, and its record's room),
        made under the folder's lock once the folder has room (see the module docstring);
        None for a ``background`` one that finds none."""
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            tmp = self.cache.reserve(
                size + RECORD_BYTES,
                lambda: self._start(key, size, where),
                protect=protect,
                keep=key,
                evict_in_use=not background,
            )
            if tmp is not None or background:
                return tmp
            if time.monotonic() > give_up:
                raise SourceError(
                    f"{where}: the cache in {self.folder} has no room for {size:,} more bytes "
                    f"within its limit of {self.limit:,}: other processes' downloads fill it"
                )
            time.sleep(0.1)

    def _start(self, key: str, size: int, where: str) -> AtomicFile:
        """The temporary file of ``key``'s download, ``size`` bytes and its record's room
        preallocated (a size the disk cannot hold is refused before anything is written)."""
        try:
            st = os.statvfs(self.root)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        if free is not None and size > free:
            raise SourceError(
                f"{where}: a shard of {size:,} bytes does not fit on the disk of the shard "
                f"cache {self.folder} ({free:,} bytes free)"
            )
        try:
            with self._at_root() as root:  # (under the lock, after the scan: a real folder)
                return new_temp(self.path(key), size + RECORD_BYTES, fsync=True, dir_fd=root)
        except OSError as exc:
            if isinstance(exc, TensorFileError):
                raise
            raise SourceError(
                f"cannot write {self.path(key)} in the shard cache: {exc.strerror or exc}"
            ) from exc

    def usage(self) -> int:
        """Bytes the cache folder's entries (of both kinds) and writes in progress take now."""
        self.prepare()
        return self.cache.usage()
