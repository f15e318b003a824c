"""A remote dataset read through its shard cache: what :class:`~.reader.Dataset` does with
``cache_dir`` (open shards from the cache, prefetch the next ones, hold the files in use).

A shard in use is held by a descriptor with a shared ``flock`` on its cached file (what
eviction looks at); :meth:`Stream.release` lets it go. A shard the cache cannot give safely
(a lock another process holds past its wait) is read from the store without the cache, with
one :class:`~tensorfile.sources.CacheWarning`. :meth:`Stream.prefetch` queues
background downloads (:mod:`._prefetch`) of the next shards, up to ``predownload`` samples.

Example:
    >>> from tensorfile.dataset.layout.manifest import Manifest, ShardEntry
    >>> m = Manifest([ShardEntry("a.safetensors", 3, 100), ShardEntry("b.safetensors", 5, 9)],
    ...              {"x": {"dtype": "F32", "shape": []}}, columns=["x"])
    >>> predownload_for(None, m, cached=True), predownload_for(None, m, cached=False)
    (10, 0)
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from typing import Any

from ...core.errors import FormatError, InvalidArgumentError, InvalidTypeError, SourceError
from ...core.reader import Reader
from ..cache.shardcache import CacheBypass, ShardCache, bypassed, close_fd
from ..layout.manifest import Manifest, ShardEntry
from ..layout.storage import open_located
from ._prefetch import Prefetcher
from .samples import open_shard, verify_shard

__all__ = ["Stream", "predownload_for"]


def predownload_for(value: Any, manifest: Manifest, *, cached: bool) -> int:
    """``predownload`` checked (a count of samples, 0 or more); by default the samples of
    the two largest shards with a shard cache (one downloads while one is read). Without a
    cache it is 0."""
    if value is None:
        return 2 * max((s.samples for s in manifest.shards), default=0) if cached else 0
    if isinstance(value, bool):
        raise InvalidTypeError(f"predownload must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidTypeError(
            f"predownload must be an integer, got {type(value).__name__}"
        ) from None
    if value < 0:
        raise InvalidArgumentError(f"predownload must be 0 or more samples, got {value}")
    return value if cached else 0


class Stream:
    """The shard cache of one opened dataset, with its prefetcher and the files in use."""

    def __init__(
        self,
        cache: ShardCache,
        manifest: Manifest,
        schema: dict[str, dict[str, Any]],
        predownload: int,
    ) -> None:
        self.cache = cache
        self.manifest = manifest
        self.schema = schema
        self.predownload = predownload
        self._pins: dict[str, int] = {}
        self._pid = os.getpid()
        self._entries: dict[str, ShardEntry] = {}
        self._prefetcher: Prefetcher | None = None
        self._warned = False

    def open(self, shard: ShardEntry) -> tuple[Reader, list[str]]:
        """A reader of the cached copy of ``shard`` (downloaded first if need be), its
        header checked against the manifest, and its KV keys. A copy that fails the check
        is removed and downloaded once more (a file changed on disk by another program); a
        second failure is the shard's own, raised as a
        :class:`~tensorfile.errors.FormatError` naming it. A shard the cache cannot give
        (:class:`~tensorfile.sources.cache.guards.CacheBypass`) is read from the store."""
        self._forked()
        try:
            return self._open_cached(shard)
        except CacheBypass as exc:
            if not self._warned:
                self._warned = True
                bypassed(self.cache.store.url(shard.shard_path), exc)
            return open_shard(self.cache.store, shard, self.manifest, self.schema)

    def _open_cached(self, shard: ShardEntry) -> tuple[Reader, list[str]]:
        cache = self.cache
        window = self._prefetcher.window if self._prefetcher is not None else set()
        where = cache.store.url(shard.shard_path)
        for attempt in (0, 1, 2):
            found = cache.fetch(shard.shard_path, shard.bytes, protect=window)
            if found is None:  # evicted between its download and the open: again
                continue
            path, fd = found
            try:
                reader = open_located(path)
                try:
                    keys = verify_shard(reader, shard, self.manifest, self.schema)
                except BaseException:
                    reader.close()
                    raise
            except FormatError as exc:
                close_fd(fd)
                cache.discard(shard.shard_path, shard.bytes)
                if attempt:
                    raise FormatError(f"shard {where}: {exc}") from exc
                continue
            except BaseException:
                close_fd(fd)
                raise
            self.release(shard.shard_path)
            self._pins[shard.shard_path] = fd
            return reader, keys
        raise SourceError(
            f"shard {where} was evicted from the shard cache three times before it could be "
            "opened: the cache limit is too small for the processes sharing it"
        )

    def release(self, shard_path: str) -> None:
        """Stop holding the cached file of ``shard_path`` (it may be evicted)."""
        self._forked()
        fd = self._pins.pop(shard_path, None)
        if fd is not None:
            close_fd(fd)

    def _forked(self) -> None:
        """In a forked child: forget the parent's pins (their descriptors, which carry
        locks, were closed at the fork by :mod:`tensorfile.sources.cache.files`; the numbers
        may be reused)."""
        if self._pid != os.getpid():
            self._pins = {}
            self._pid = os.getpid()

    def prefetch(self, shards: Sequence[ShardEntry]) -> None:
        """Queue background downloads of ``shards`` (in the order given) up to
        :attr:`predownload` samples; see :meth:`~.reader.Dataset.prefetch`."""
        if self.predownload <= 0:
            return
        window: list[tuple[str, ShardEntry]] = []
        ahead = 0
        for shard in shards:
            if ahead >= self.predownload:
                break
            key = self.cache.key(shard.shard_path, shard.bytes)
            if key in dict(window):
                continue
            ahead += shard.samples
            window.append((key, shard))
        if not window:
            return
        self._entries.update(window)
        if self._prefetcher is None:
            self._prefetcher = Prefetcher(self._download)
        missing = [(k, s) for k, s in window if not os.path.exists(self.cache.path(k))]
        self._prefetcher.submit(missing)
        self._prefetcher.window = {k for k, _ in window}

    def _download(self, key: str, window: frozenset[str]) -> None:
        shard = self._entries[key]
        try:
            found = self.cache.fetch(shard.shard_path, shard.bytes, protect=window, background=True)
        except CacheBypass:
            return  # (the read that needs the shard reads it without the cache)
        if found is not None:
            close_fd(found[1])

    def wait(self) -> None:
        """Wait for the background downloads queued so far."""
        if self._prefetcher is not None:
            self._prefetcher.wait()

    def close(self) -> None:
        """Release every held file and stop the background downloads."""
        self._forked()
        for path in list(self._pins):
            self.release(path)
        if self._prefetcher is not None:
            self._prefetcher.shutdown()
            self._prefetcher = None
