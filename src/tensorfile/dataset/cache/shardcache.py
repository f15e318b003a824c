"""A size-limited local cache of whole shards of a remote dataset, shared by every process
of a node (DataLoader workers, ranks), for :func:`tensorfile.dataset.open` with
``cache_dir=``.

Each shard is downloaded whole the first time it is needed (:mod:`._shardfetch`: parallel
ranged GETs into the file) and read from the local copy, memory-mapped like a local dataset.

Layout, under the cache folder::

    shards-v1/.lock                      flock'ed (exclusively) while space is reserved
    shards-v1/<key>.shard                a complete shard
    shards-v1/<key>.lock                 flock'ed (exclusively) while <key> is downloaded
    shards-v1/<key>.sum                  its XXH3-64 and ETag at download (a record)
    shards-v1/.<key>.shard.tensorfile-<hex>.tmp          a download in progress

``key`` is 40 hex digits of a SHA-256 of the dataset's location (its URL without
credentials, and the endpoint options), a hash of the manifest (a rewritten dataset never
hits stale shards), the shard's path and size: nothing secret is stored in a name.

What holds:

* **The limit.** The cache's files (complete shards, and downloads in progress counted at
  their full size from the moment they start: the temporary file is preallocated while the
  cache-wide lock is held) never exceed the limit. A download first reserves its size under
  ``.lock``, evicting the least recently used whole shards (readers touch what they open);
  a shard some process has open (it holds a shared ``flock`` on it) or this process has
  queued is evicted last, and only by a read that cannot proceed otherwise. Evicting a
  file another process has mapped is safe on POSIX (the name goes, the mapping keeps its
  pages until it is closed; the disk space is freed then). A shard larger than the limit
  is an :class:`~tensorfile.errors.InvalidArgumentError`.
* **One download per shard.** A per-shard ``flock`` makes other processes (and threads)
  wait for the download, then use the file.
* **Atomic.** A download goes to a temporary file that is fsync'ed and renamed into place
  (:class:`~tensorfile.core.atomic.AtomicFile`). A process killed mid-download leaves a
  temporary file whose lock is free: the next reservation removes it (and so releases its
  space), and the shard's lock is free for the next process.
* **Checked.** A cached file of the wrong size (truncated by another program), or not a
  regular file, is removed and fetched again, never read; the reader checks every header
  against the manifest. That is all by default: data bytes changed in place, or an object
  replaced on the store under an identical manifest, are seen only with
  ``$TENSORFILE_CACHE_VERIFY=1`` (each open hashes the file and asks the store for the
  object's ETag, both compared with the record).
* **Fork-safe.** Lock-holding descriptors are closed in a forked child
  (:mod:`._cachefiles`): a child never keeps its parent's locks.

Example:
    >>> parse_limit("512MiB"), parse_limit(1000)
    (536870912, 1000)
    >>> try:
    ...     parse_limit("12 parsecs")
    ... except InvalidArgumentError as exc:
    ...     print(str(exc).partition(":")[0])
    cache_limit '12 parsecs'
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import stat
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from ...core.atomic import AtomicFile, preallocate, remove_stale_temps
from ...core.errors import InvalidArgumentError, SourceError, TensorFileError
from ...core.sizes import parse_size
from ...sources import CACHE_DIR_ENV, Store, resolve_cache_dir
from ._cachefiles import (
    adopt,
    close_fd,
    digest_fd,
    forget,
    guarded,
    heal,
    lock_fd,
    lock_same,
    open_fd,
    read_record,
    remove_unused,
    write_record,
)
from ._shardfetch import download, remote_version

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
    "CACHE_VERIFY_ENV",
    "DEFAULT_LIMIT",
    "LAYOUT",
    "CacheConfig",
    "ShardCache",
    "cache_folder",
    "location_id",
    "parse_limit",
]

CACHE_SIZE_ENV = "TENSORFILE_CACHE_SIZE"
"""The default size limit (``"20GiB"``, ``"500MB"``, a number of bytes)."""
DEFAULT_LIMIT = 20 << 30
"""The size limit when neither ``cache_limit`` nor ``$TENSORFILE_CACHE_SIZE`` says: 20 GiB."""
LAYOUT = "shards-v1"
"""The folder under the cache folder that holds this layout."""
CACHE_VERIFY_ENV = "TENSORFILE_CACHE_VERIFY"
"""Set to ``1``: every open of a cached shard checks its XXH3-64 against the record made at
download and asks the store for the object's ETag (the single-file cache's switch too)."""
WAIT_SECONDS = 120.0
"""How long a read waits for other processes' downloads to free room before it fails."""

_DATA = re.compile(r"([0-9a-f]{40})\.shard")
_LOCK = re.compile(r"([0-9a-f]{40})\.(?:lock|sum)")
_TEMP = re.compile(r"\.([0-9a-f]{40}\.shard)\.tensorfile-[0-9a-f]{12}\.tmp")
_SECRET = ("key", "secret", "token", "password", "passwd", "credential", "auth", "session")


def parse_limit(value: int | str | None) -> int:
    """A cache size limit in bytes: ``value`` (an int, or a text like ``"20GB"`` or
    ``"512MiB"``), else ``$TENSORFILE_CACHE_SIZE``, else :data:`DEFAULT_LIMIT`."""
    where = "cache_limit"
    if value is None:
        text = os.environ.get(CACHE_SIZE_ENV, "").strip()
        if not text:
            return DEFAULT_LIMIT
        value, where = text, f"${CACHE_SIZE_ENV}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(
            f"{where} {value!r}: give a whole number of bytes (an int > 0) or a size text "
            "such as '20GiB' or '500MB'"
        )
    try:
        return parse_size(value)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where} {value!r}: {str(exc).partition(': ')[2]}") from None


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Where a dataset's shards are cached and how much the folder may hold."""

    folder: str
    limit: int

    @staticmethod
    def resolve(cache_dir: Any, cache_limit: int | str | None) -> CacheConfig | None:
        """The config of ``cache_dir`` (None: ``$TENSORFILE_CACHE_DIR``; ``False``/``""``:
        no cache) and ``cache_limit``; None when there is no cache."""
        folder = cache_folder(cache_dir)
        limit = parse_limit(cache_limit)
        return None if folder is None else CacheConfig(os.path.abspath(folder), limit)


def cache_folder(cache_dir: Any) -> str | None:
    """The cache folder: ``cache_dir`` when given (``False`` or ``""``: none; ``True``:
    ``$TENSORFILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorfile``), else
    ``$TENSORFILE_CACHE_DIR`` (unset or empty: none): the single-file cache's rule
    (:func:`tensorfile.sources.resolve_cache_dir`).

    Example:
        >>> cache_folder("/tmp/c"), cache_folder(False), cache_folder(""), cache_folder(b"/tmp/b")
        ('/tmp/c', None, None, '/tmp/b')
    """
    return resolve_cache_dir(cache_dir)


def location_id(store: Store) -> str:
    """What names a dataset's location in cache keys: its URL without credentials and the
    store options that say where it is (not the secrets)."""
    kept: list[tuple[str, str]] = []
    for k, v in sorted(store.options.items(), key=lambda kv: str(kv[0])):
        if not any(s in str(k).lower() for s in _SECRET):
            kept.append((str(k), repr(v)))
    return f"{store.url()}\0{kept!r}"


class ShardCache:
    """The shard cache of one opened dataset (see the module docstring): ``fetch`` gives the
    local path of a shard, downloading it first when it is not cached."""

    def __init__(self, config: CacheConfig, store: Store, manifest_digest: str) -> None:
        self.config = config
        self.store = store
        self.root = os.path.join(config.folder, LAYOUT)
        self._prefix = f"tensorfile-shards-v1\0{location_id(store)}\0{manifest_digest}"
        self.downloads = 0
        """Shards this object downloaded (in this process)."""
        self.verify = os.environ.get(CACHE_VERIFY_ENV, "").strip().lower() in ("1", "true", "yes")
        """Whether opens check the shard's checksum and ETag (``$TENSORFILE_CACHE_VERIFY``)."""
        self._ready = False
        self._names: dict[str, str] = {}

    # -- the folder --------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the folder; a cache folder that is a file or cannot be written is a
        :class:`~tensorfile.errors.SourceError` naming it."""
        if self._ready:
            return
        where = f"cache_dir {self.config.folder}"
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            why = "it is a file, not a folder" if exc.errno in (errno.ENOTDIR, errno.EEXIST) else (
                exc.strerror or str(exc))  # fmt: skip
            raise SourceError(f"{where} cannot hold the shard cache: {why}") from exc
        if not os.path.isdir(self.root):
            raise SourceError(f"{where} cannot hold the shard cache: it is not a folder")
        try:
            close_fd(lock_fd(os.path.join(self.root, ".lock"), wait=False))
            probe = AtomicFile(os.path.join(self.root, ".probe"))
            probe.abort()
        except (OSError, SourceError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SourceError(f"{where} cannot hold the shard cache: {why}") from exc
        self._ready = True

    def key(self, shard_path: str, size: int) -> str:
        """The cache key of the shard ``shard_path`` of ``size`` bytes."""
        text = f"{self._prefix}\0{shard_path}\0{size}"
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def path(self, key: str) -> str:
        """The file of a complete shard."""
        return os.path.join(self.root, f"{key}.shard")

    def record(self, key: str) -> str:
        """The record of a shard (its checksum and ETag at download)."""
        return os.path.join(self.root, f"{key}.sum")

    # -- using shards -------------------------------------------------------------------------

    def open_cached(
        self, shard_path: str, size: int, *, locked: bool = False, fresh: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the cached shard, its ``fd`` holding a shared lock that marks it
        in use (close it with :func:`._cachefiles.close_fd`), touched as recently used; None
        when it is not cached. A file of the wrong size, anything but a regular file, and
        (with :attr:`verify`) a file whose checksum or ETag differs from its record is
        removed (and None returned); ``locked``: the caller holds the shard's lock;
        ``fresh``: it was just downloaded (not verified again)."""
        self.prepare()
        key = self.key(shard_path, size)
        path = self.path(key)
        for _ in range(8):
            try:
                fd = open_fd(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a symlink, socket
                    self._damaged(key, None, locked)
                    return None
                raise SourceError(f"cannot read the cached shard {path}: {exc.strerror}") from exc
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):  # a FIFO, a directory: never read, removed
                    close_fd(fd)
                    self._damaged(key, None, locked)
                    return None
                if not lock_same(fd, path, st, fcntl.LOCK_SH):
                    close_fd(fd)  # evicted or replaced meanwhile: look again
                    continue
                if st.st_size != size or (
                    self.verify and not fresh and not self._ok(key, fd, size)
                ):
                    close_fd(fd)
                    self._damaged(key, st, locked)
                    return None
                with contextlib.suppress(OSError):
                    os.utime(path)  # recently used
                return path, fd
            except BaseException:
                with contextlib.suppress(OSError):
                    close_fd(fd)
                raise
        return None

    def _ok(self, key: str, fd: int, size: int) -> bool:
        """Whether the open shard of ``key`` matches its record: the checksum of its bytes,
        and the ETag the store gives now (when it gives one)."""
        found = read_record(self.record(key))
        if found is None:
            return False  # (a crash between the two renames, or an older cache)
        digest, version = found
        if digest_fd(fd, os.fstat(fd).st_size) != digest:
            return False
        if version is None:
            return True
        shard = self._names.get(key)
        if shard is None:
            return True
        now = remote_version(self.store, shard, size)
        return now is None or now == version

    def fetch(
        self, shard_path: str, size: int, *, protect: Collection[str] = (), background: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the shard as :meth:`open_cached` gives it, downloaded first when
        it is not cached (once across the node: others wait on the shard's lock). ``protect``:
        keys this process will read soon (evicted last). ``background``: a prefetch, which
        gives up (None) rather than evict shards in use or wait for room."""
        self._names[self.key(shard_path, size)] = shard_path
        try:
            return self._fetch(shard_path, size, protect, background)
        except TensorFileError:
            raise  # (a SourceError of the store is an OSError too: it says what it is)
        except OSError as exc:  # the folder removed or made unusable under us
            raise SourceError(
                f"{self.store.url(shard_path)}: the shard cache {self.config.folder} failed: "
                f"{exc.strerror or exc}"
            ) from exc

    def _fetch(
        self, shard_path: str, size: int, protect: Collection[str], background: bool
    ) -> tuple[str, int] | None:
        found = self.open_cached(shard_path, size)
        if found is not None:
            return found
        if size > self.config.limit:
            raise InvalidArgumentError(
                f"{self.store.url(shard_path)}: the shard is {size:,} bytes, more than the "
                f"cache limit of {self.config.limit:,} bytes (cache_limit, or "
                f"${CACHE_SIZE_ENV}); raise the limit or read without cache_dir"
            )
        key = self.key(shard_path, size)
        with self._shard_lock(key):
            found = self.open_cached(shard_path, size, locked=True)
            if found is not None:
                return found
            tmp = self._reserve(key, size, set(protect) | {key}, background)
            if tmp is None:
                return None
            try:
                rw = open_fd(tmp.tmp, os.O_RDWR)  # (for mmap)
                try:
                    _, version = download(self.store, shard_path, size, rw)
                    digest = digest_fd(rw, size)
                finally:
                    close_fd(rw)
                write_record(self.record(key), digest, version)  # (before the shard: see _ok)
                os.fsync(tmp.fd)
                tmp.fsync = False
                with guarded():  # the rename and close are quick: a fork waits for them
                    forget(tmp.fd)
                    tmp.commit()
            except BaseException:
                with guarded():
                    forget(tmp.fd)
                    tmp.abort()
                raise
            self.downloads += 1
            return self.open_cached(shard_path, size, locked=True, fresh=True)

    def discard(self, shard_path: str, size: int) -> None:
        """Remove the cached copy of a shard (one found corrupt by its reader)."""
        key = self.key(shard_path, size)
        with self._shard_lock(key):
            for name in (self.path(key), self.record(key)):
                with contextlib.suppress(OSError):
                    os.unlink(name)

    def _damaged(self, key: str, seen: os.stat_result | None, locked: bool) -> None:
        """Remove the cached file of ``key`` if it is still the one ``seen`` (a wrong size or
        checksum), or whatever is there if it is not a regular file (``seen`` None)."""
        with contextlib.nullcontext() if locked else self._shard_lock(key):
            path = self.path(key)
            if seen is None:
                heal(path)
                return
            try:
                now = os.stat(path, follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
                    os.unlink(path)
                    os.unlink(self.record(key))
            except OSError:
                pass

    # -- locks --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _shard_lock(self, key: str) -> Iterator[None]:
        """Hold the exclusive lock of ``key``."""
        fd = lock_fd(os.path.join(self.root, f"{key}.lock"))
        try:
            yield
        finally:
            close_fd(fd)

    @contextlib.contextmanager
    def _cache_lock(self) -> Iterator[None]:
        fd = lock_fd(os.path.join(self.root, ".lock"))
        try:
            yield
        finally:
            close_fd(fd)

    # -- room ---------------------------------------------------------------------------------

    def _reserve(
        self, key: str, size: int, protect: set[str], background: bool
    ) -> AtomicFile | None:
        """A preallocated temporary file for ``key``, made while the cache-wide lock is held
        once the cache has room for ``size`` more bytes (see the module docstring)."""
        give_up = time.monotonic() + WAIT_SECONDS
        while True:
            with self._cache_lock():
                used, shards = self._scan()
                excess = used + size - self.config.limit
                if excess > 0:
                    excess -= self._evict(shards, excess, protect, force=False)
                if excess > 0 and not background:
                    excess -= self._evict(shards, excess, {key}, force=True)
                if excess <= 0:
                    return self._start(key, size)
            if background:
                return None
            if time.monotonic() > give_up:
                raise SourceError(
                    f"{self.store.url()}: the shard cache in {self.config.folder} has no room "
                    f"for {size:,} more bytes within its limit of {self.config.limit:,}: other "
                    "processes' downloads fill it"
                )
            time.sleep(0.1)

    def _start(self, key: str, size: int) -> AtomicFile:
        """The temporary file of ``key``'s download, ``size`` bytes preallocated (a size
        the disk cannot hold is refused before anything is written)."""
        try:
            st = os.statvfs(self.root)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        if free is not None and size > free:
            raise SourceError(
                f"{self.store.url()}: a shard of {size:,} bytes does not fit on the disk of "
                f"the shard cache {self.config.folder} ({free:,} bytes free)"
            )
        with guarded():  # (its descriptor holds a lock: a forked child must close it)
            heal(self.path(key))
            tmp = AtomicFile(self.path(key), fsync=True)
            adopt(tmp.fd)
        try:
            preallocate(tmp.fd, size)
            if os.fstat(tmp.fd).st_size != size:
                os.ftruncate(tmp.fd, size)
        except BaseException as exc:
            with guarded():
                forget(tmp.fd)
                tmp.abort()
            if isinstance(exc, OSError) and not isinstance(exc, TensorFileError):
                raise SourceError(
                    f"cannot write {self.path(key)} in the shard cache: {exc.strerror or exc}"
                ) from exc
            raise
        return tmp

    def _scan(self) -> tuple[int, list[tuple[float, int, str, str]]]:
        """Bytes the folder's shard and temporary files take (dead writers' temporary files
        removed first) and the complete shards as ``(mtime, size, key, path)``."""
        used = 0
        shards: list[tuple[float, int, str, str]] = []
        temps: set[str] = set()
        others: set[str] = set()
        with os.scandir(self.root) as entries:
            listed = list(entries)
        for e in listed:
            m = _TEMP.fullmatch(e.name)
            if m is not None:
                temps.add(m.group(1))
                continue
            m = _LOCK.fullmatch(e.name)
            if m is not None:
                others.add(m.group(1))
                if not e.is_file(follow_symlinks=False):
                    heal(e.path)  # planted: a lock or record is always a regular file
                continue
            m = _DATA.fullmatch(e.name)
            if m is None:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                used += st.st_size
                shards.append((st.st_mtime, st.st_size, m.group(1), e.path))
            else:
                heal(e.path)  # planted: no one can be reading it
        for base in sorted(temps):
            remove_stale_temps(os.path.join(self.root, base))  # killed writers' leftovers
        counted = {k for _, _, k, _ in shards}
        for e in listed:
            m = _TEMP.fullmatch(e.name)
            if m is not None:
                try:
                    st = os.stat(e.path, follow_symlinks=False)
                except OSError:  # a dead writer's, removed; or renamed into place since
                    used += _renamed(self.root, m.group(1), counted, shards)  # the listing
                    continue
                if stat.S_ISREG(st.st_mode):
                    used += st.st_size
                else:
                    heal(e.path)  # planted: no download writes there
        for key in sorted(others - counted):
            self._drop_lock(key)
        return used, shards

    def _drop_lock(self, key: str) -> None:
        """Remove the lock file and record of a shard that is not cached, if no one holds its
        lock (a download writes the record before the shard)."""
        path = os.path.join(self.root, f"{key}.lock")
        try:
            fd = open_fd(path, os.O_RDWR)
        except FileNotFoundError:
            if not os.path.lexists(self.path(key)):
                with contextlib.suppress(OSError):
                    os.unlink(self.record(key))
            return
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.lexists(self.path(key)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.record(key))
                os.unlink(path)
        except OSError:
            pass
        finally:
            close_fd(fd)

    def _evict(
        self,
        shards: list[tuple[float, int, str, str]],
        excess: int,
        protect: Collection[str],
        *,
        force: bool,
    ) -> int:
        """Remove least recently used shards until ``excess`` bytes are freed; returns the
        bytes freed. Without ``force``, shards in ``protect`` or open anywhere (a shared
        lock held) are kept."""
        freed = 0
        for entry in sorted(shards):
            if freed >= excess:
                break
            _, size, key, path = entry
            if key in protect:
                continue
            if remove_unused(path, self.record(key), force=force):
                freed += size
                shards.remove(entry)
        return freed

    def usage(self) -> int:
        """Bytes the cache folder's shard files and downloads take now."""
        self.prepare()
        with self._cache_lock():
            return self._scan()[0]


def _renamed(
    root: str, name: str, counted: set[str], shards: list[tuple[float, int, str, str]]
) -> int:
    """The bytes of shard file ``name`` when a download renamed it into place after the
    folder was listed (its temporary file was listed, the shard was not): counted once, so
    that a scan racing a commit never sees the cache emptier than it is."""
    m = _DATA.fullmatch(name)
    if m is None or m.group(1) in counted:
        return 0
    path = os.path.join(root, name)
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0  # (a dead writer's temporary file, removed)
    if not stat.S_ISREG(st.st_mode):
        return 0
    counted.add(m.group(1))
    shards.append((st.st_mtime, st.st_size, m.group(1), path))
    return st.st_size
