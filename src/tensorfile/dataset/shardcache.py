"""A size-limited local cache of whole shards of a remote dataset, shared by every process
of a node (DataLoader workers, ranks), for :func:`tensorfile.dataset.open` with
``cache_dir=``.

Each shard is downloaded whole the first time it is needed (:mod:`._shardfetch`: parallel
ranged GETs into the file) and read from the local copy, memory-mapped like a local dataset.

Layout, under the cache folder::

    shards-v1/.lock                      flock'ed (exclusively) while space is reserved
    shards-v1/<key>.shard                a complete shard
    shards-v1/<key>.lock                 flock'ed (exclusively) while <key> is downloaded
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
* **Checked.** A cached file of the wrong size (truncated by another program) is removed
  and fetched again, never read; the reader checks every header against the manifest.

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
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.atomic import AtomicFile, preallocate, remove_stale_temps
from ..core.errors import InvalidArgumentError, SourceError
from ..core.sizes import parse_size
from ..sources import CACHE_DIR_ENV, Store
from ._shardfetch import download

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
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
WAIT_SECONDS = 120.0
"""How long a read waits for other processes' downloads to free room before it fails."""

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DATA = re.compile(r"([0-9a-f]{40})\.shard")
_LOCK = re.compile(r"([0-9a-f]{40})\.lock")
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
    ``$TENSORFILE_CACHE_DIR`` (unset or empty: none), as for single files.

    Example:
        >>> cache_folder("/tmp/c"), cache_folder(False), cache_folder("")
        ('/tmp/c', None, None)
    """
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_DIR_ENV) or False
    if cache_dir is True:
        found = os.environ.get(CACHE_DIR_ENV)
        if found:
            return found
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "tensorfile")
    if cache_dir is False or cache_dir == "":
        return None
    if not isinstance(cache_dir, str | os.PathLike):
        raise InvalidArgumentError(
            f"cache_dir must be a folder (a str or os.PathLike), a bool or None, got {cache_dir!r}"
        )
    text = os.fspath(cache_dir)
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidArgumentError(f"cache_dir is not a usable folder name: {text!r}")
    return text


def location_id(store: Store) -> str:
    """What names a dataset's location in cache keys: its URL without credentials and the
    store options that say where it is (not the secrets)."""
    options = getattr(store, "options", None)
    kept: list[tuple[str, str]] = []
    if isinstance(options, Mapping):
        for k, v in sorted(options.items(), key=lambda kv: str(kv[0])):
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
        self._ready = False

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
            fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT | _O_CLOEXEC)
            os.close(fd)
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

    # -- using shards -------------------------------------------------------------------------

    def open_cached(
        self, shard_path: str, size: int, *, locked: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the cached shard, its ``fd`` holding a shared lock that marks it
        in use (close it when done), touched as recently used; None when it is not cached.
        A file of the wrong size is removed (and None returned); ``locked``: the caller holds
        the shard's lock."""
        self.prepare()
        key = self.key(shard_path, size)
        path = self.path(key)
        for _ in range(8):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | _O_CLOEXEC)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise SourceError(f"cannot read the cached shard {path}: {exc.strerror}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                st = os.fstat(fd)
                try:
                    now = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)  # evicted or replaced meanwhile: look again
                    continue
                if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                    os.close(fd)
                    self._discard(key, st, locked)
                    return None
                with contextlib.suppress(OSError):
                    os.utime(path)  # recently used
                return path, fd
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
        return None

    def fetch(
        self, shard_path: str, size: int, *, protect: Collection[str] = (), background: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the shard as :meth:`open_cached` gives it, downloaded first when
        it is not cached (once across the node: others wait on the shard's lock). ``protect``:
        keys this process will read soon (evicted last). ``background``: a prefetch, which
        gives up (None) rather than evict shards in use or wait for room."""
        try:
            return self._fetch(shard_path, size, protect, background)
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
                rw = os.open(tmp.tmp, os.O_RDWR | os.O_NOFOLLOW | _O_CLOEXEC)  # (for mmap)
                try:
                    download(self.store, shard_path, size, rw)
                finally:
                    os.close(rw)
                tmp.commit()
            except BaseException:
                tmp.abort()
                raise
            self.downloads += 1
            return self.open_cached(shard_path, size, locked=True)

    def discard(self, shard_path: str, size: int) -> None:
        """Remove the cached copy of a shard (one found corrupt by its reader)."""
        key = self.key(shard_path, size)
        with self._shard_lock(key), contextlib.suppress(OSError):
            os.unlink(self.path(key))

    def _discard(self, key: str, seen: os.stat_result, locked: bool) -> None:
        """Remove the cached file of ``key`` if it is still the one seen (wrong size)."""
        with contextlib.nullcontext() if locked else self._shard_lock(key):
            try:
                now = os.stat(self.path(key), follow_symlinks=False)
                if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
                    os.unlink(self.path(key))
            except OSError:
                pass

    # -- locks --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _shard_lock(self, key: str) -> Iterator[None]:
        """Hold the exclusive lock of ``key`` (a lock file that a sweep may remove: the lock
        is taken on the file the name still holds)."""
        path = os.path.join(self.root, f"{key}.lock")
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _O_CLOEXEC, 0o666)
            except OSError as exc:
                raise SourceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                try:
                    now = os.stat(path, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
                if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # removed by a sweep before we locked it: take the new one
        try:
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _cache_lock(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

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
        tmp = AtomicFile(self.path(key), fsync=True)
        try:
            preallocate(tmp.fd, size)
            if os.fstat(tmp.fd).st_size != size:
                os.ftruncate(tmp.fd, size)
        except OSError as exc:
            tmp.abort()
            raise SourceError(
                f"cannot write {self.path(key)} in the shard cache: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            tmp.abort()
            raise
        return tmp

    def _scan(self) -> tuple[int, list[tuple[float, int, str, str]]]:
        """Bytes the folder's shard and temporary files take (dead writers' temporary files
        removed first) and the complete shards as ``(mtime, size, key, path)``."""
        used = 0
        shards: list[tuple[float, int, str, str]] = []
        temps: set[str] = set()
        locks: list[str] = []
        with os.scandir(self.root) as entries:
            listed = list(entries)
        for e in listed:
            m = _TEMP.fullmatch(e.name)
            if m is not None:
                temps.add(m.group(1))
                continue
            if _LOCK.fullmatch(e.name):
                locks.append(e.name[:-5])
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
        for base in sorted(temps):
            remove_stale_temps(os.path.join(self.root, base))  # killed writers' leftovers
        for e in listed:
            if _TEMP.fullmatch(e.name):
                try:
                    st = os.stat(e.path, follow_symlinks=False)
                except OSError:
                    continue  # (just removed)
                used += st.st_size
        present = {k for _, _, k, _ in shards}
        for key in locks:
            if key not in present:
                self._drop_lock(key)
        return used, shards

    def _drop_lock(self, key: str) -> None:
        """Remove the lock file of a shard that is not cached, if no one holds it."""
        path = os.path.join(self.root, f"{key}.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | _O_CLOEXEC)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.exists(self.path(key)):
                os.unlink(path)
        except OSError:
            pass
        finally:
            os.close(fd)

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
            if self._remove(path, force=force):
                freed += size
                shards.remove(entry)
        return freed

    @staticmethod
    def _remove(path: str, *, force: bool) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | _O_CLOEXEC)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                if not force:
                    return False  # open somewhere: kept while anything else can go
            os.unlink(path)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def usage(self) -> int:
        """Bytes the cache folder's shard files and downloads take now."""
        self.prepare()
        with self._cache_lock():
            return self._scan()[0]
