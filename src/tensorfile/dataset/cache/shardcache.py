"""The shard cache of a remote dataset, for :func:`tensorfile.dataset.open` with
``cache_dir=``: whole shards kept in the cache folder shared by every process of a node
(DataLoader workers, ranks), read from the local copy, memory-mapped like a local dataset.

The cache itself (the folder's one size limit over shards and chunks of remote files, the
LRU, the locks, the downloads into temporary files renamed into place, the records, the
healing of damaged entries) is :mod:`tensorfile.sources.cache`'s
(:mod:`~tensorfile.sources.cache.entries`). What is the dataset's: which shard, downloaded
how (:mod:`._shardfetch`: parallel ranged GETs checked against the manifest), and the key:
40 hex digits of a SHA-256 of the dataset's location (its URL without credentials, and the
endpoint: never a credential, so a rotated session token finds the same shards), a hash of
the manifest (a rewritten dataset never hits stale shards), the shard's path and size.

Example:
    >>> parse_limit("512MiB"), parse_limit(1000)
    (536870912, 1000)
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ...core.atomic import AtomicFile
from ...sources import CacheWarning, Store
from ...sources.cache.entries import FileEntries
from ...sources.cache.files import close_fd
from ...sources.cache.folder import FILES
from ...sources.cache.guards import CacheBypass
from ...sources.cache.keys import endpoint_id, identity
from ...sources.cache.settings import (
    CACHE_DIR_ENV,
    CACHE_SIZE_ENV,
    CACHE_VERIFY_ENV,
    DEFAULT_LIMIT,
    parse_limit,
    resolve_cache_dir,
    verify_default,
)
from ...sources.router import resolved_endpoint
from ._shardfetch import download, remote_version

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
    "CACHE_VERIFY_ENV",
    "DEFAULT_LIMIT",
    "LAYOUT",
    "CacheBypass",
    "CacheConfig",
    "NoLocation",
    "ShardCache",
    "bypassed",
    "cache_folder",
    "close_fd",
    "location_id",
    "parse_limit",
]

LAYOUT = FILES
"""The folder under the cache folder that holds the shards."""


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


def bypassed(where: str, exc: CacheBypass) -> None:
    """Warn (a :class:`~tensorfile.sources.CacheWarning`) that ``where`` is read without
    the shard cache, and why: a lock another process holds, a folder another user could
    write in."""
    warnings.warn(f"{where}: {exc}", CacheWarning, stacklevel=3)


class NoLocation(CacheBypass):
    """The store of a dataset has no :meth:`~tensorfile.sources.Store.location` (a
    :class:`~tensorfile.sources.Store` subclass that does not say where its files live):
    the dataset is read without the shard cache."""


def location_id(store: Store) -> str:
    """What names a dataset's location in cache keys: its URL as the store's client reads it
    (:meth:`~tensorfile.sources.Store.location`: ``#...`` and ``?...`` kept where they name
    objects), without credentials (:func:`~tensorfile.sources.cache.keys.identity`), and the
    endpoint it is read from (never a credential). A store without a location:
    :class:`NoLocation` (the read bypasses the cache).

    Example:
        >>> from tensorfile.sources import store_for
        >>> a = store_for("memory://loc-doc/ds")
        >>> location_id(a).split("\\0")
        ['memory://loc-doc/ds', '[]']
        >>> location_id(store_for("memory://loc-doc/ds#b")).split("\\0")[0]
        'memory://loc-doc/ds#b'
    """
    # the store's own location, never url(): that is the redacted form messages show, and
    # cuts a "?..." or "#..." that names another folder on s3:// and memory://; two stores
    # may share it (every MemoryStore's is "<memory-store>")
    where = store.location()
    if where is None:
        raise NoLocation(
            f"{type(store).__name__} does not say where its files live (its location() is "
            "None): its shards could be mixed with another store's, so the read bypasses the "
            "shard cache"
        )
    endpoint = endpoint_id(store.options, resolved_endpoint(where, store.options))
    return f"{identity(where)}\0{endpoint}"


class ShardCache:
    """The shard cache of one opened dataset (see the module docstring): ``fetch`` gives the
    local path of a shard, downloading it first when it is not cached."""

    def __init__(self, config: CacheConfig, store: Store, manifest_digest: str) -> None:
        self.config = config
        self.store = store
        self.files = FileEntries(config.folder, config.limit, verify=verify_default())
        self.root = self.files.root
        self._prefix = f"tensorfile-shards-v1\0{location_id(store)}\0{manifest_digest}"

    @property
    def downloads(self) -> int:
        """Shards this object downloaded (in this process)."""
        return self.files.downloads

    @property
    def verify(self) -> bool:
        """Whether opens check the shard's checksum and ETag (``$TENSORFILE_CACHE_VERIFY``)."""
        return self.files.verify

    def prepare(self) -> None:
        """Create the folder; a cache folder that is a file or cannot be written is a
        :class:`~tensorfile.errors.SourceError` naming it."""
        self.files.prepare("the shard cache")

    def key(self, shard_path: str, size: int) -> str:
        """The cache key of the shard ``shard_path`` of ``size`` bytes."""
        text = f"{self._prefix}\0{shard_path}\0{size}"
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def path(self, key: str) -> str:
        """The file of a complete shard."""
        return self.files.path(key)

    def record(self, key: str) -> str:
        """The record of a shard (its checksum and ETag at download)."""
        return self.files.record(key)

    def open_cached(
        self, shard_path: str, size: int, *, locked: bool = False, fresh: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the cached shard
        (:meth:`~tensorfile.sources.cache.entries.FileEntries.open_cached`); None when it is
        not cached."""
        return self.files.open_cached(
            self.key(shard_path, size), size, locked=locked, fresh=fresh,
            version=lambda: remote_version(self.store, shard_path, size),
        )  # fmt: skip

    def fetch(
        self, shard_path: str, size: int, *, protect: Collection[str] = (), background: bool = False
    ) -> tuple[str, int] | None:
        """``(path, fd)`` of the shard as :meth:`open_cached` gives it, downloaded first when
        it is not cached (once across the node: others wait on the shard's lock). ``protect``:
        keys this process will read soon (evicted last). ``background``: a prefetch, which
        gives up (None) rather than evict shards in use or wait for room."""
        self.prepare()
        return self.files.fetch(
            self.key(shard_path, size), size,
            lambda fd: download(self.store, shard_path, size, fd)[1],
            where=self.store.url(shard_path), protect=protect, background=background,
            version=lambda: remote_version(self.store, shard_path, size),
        )  # fmt: skip

    def discard(self, shard_path: str, size: int) -> None:
        """Remove the cached copy of a shard (one found corrupt by its reader)."""
        self.files.discard(self.key(shard_path, size))

    def _reserve(
        self, key: str, size: int, protect: set[str], background: bool
    ) -> AtomicFile | None:
        """A preallocated temporary file for ``key`` (a download's first step: tests)."""
        return self.files.reserve(key, size, protect, background, where=self.store.url())

    def usage(self) -> int:
        """Bytes the cache folder's entries (shards and chunks) and downloads take now."""
        return self.files.usage()
