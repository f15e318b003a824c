"""Where a dataset lives: a :class:`~tensorfile.sources.Store` (a local folder, or a folder of
any fsspec filesystem), and what the dataset layer adds to it.

Every file operation of :mod:`tensorfile.dataset` (and of the Spark data source) goes
through the store made once from what the user passed (:func:`storage_for`, which is
:func:`tensorfile.sources.store_for`): a :class:`~tensorfile.sources.LocalStore` for a path
or a ``file://`` URL (no FIFO waited on, no symlink followed out of the folder, deletes
through a descriptor of the folder, atomic renames), an
:class:`~tensorfile.sources.FsspecStore` for every other URL (``s3://``, ``memory://``,
...). On an object store the manifest, written in one put, is the commit point, and readers
trust only the manifest. Shards are staged under ``_staging/`` and copied into place at
commit (a server-side copy on S3), so a failed, retried or speculative task, or a failed
job, never leaves a shard beside the dataset's.

What is the dataset's, not the store's: how a shard is read (:func:`open_located`, with
:data:`SHARD_FIRST_READ` as the first request of a remote shard) and which files of the
previous dataset a commit deletes (:func:`delete_previous`).

Example:
    >>> s = storage_for("memory://ds-doc/one")
    >>> s.write_atomic("a.json", b"{}")
    >>> s.read_bounded("a.json", "the manifest", 10), s.file_size("a.json"), s.list_files()
    (b'{}', 2, ['a.json'])
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ...core.errors import SourceError
from ...core.reader import Reader
from ...core.source import ByteRequest, Source
from ...sources import Store, StoreLocation, store_for
from . import files

__all__ = [
    "SHARD_FIRST_READ",
    "Location",
    "Store",
    "delete_previous",
    "locate_shard",
    "open_located",
    "open_shard",
    "shard_first_request",
    "storage_for",
]


SHARD_FIRST_READ = 16 << 10
"""Bytes of the first request for a remote shard (its header, and a little data)."""

Location = StoreLocation
"""Where a dataset is: a local path, a URL, or a :class:`~tensorfile.sources.Store`."""


def storage_for(location: Location, storage_options: Mapping[str, Any] | None = None) -> Store:
    """The store of a dataset location (:func:`tensorfile.sources.store_for`).

    Example:
        >>> storage_for("s3://bucket/ds", {"anon": True}).url("x.json")
        's3://bucket/ds/x.json'
    """
    return store_for(location, storage_options)


def shard_first_request() -> ByteRequest:
    """The first request for a remote shard: a shard's header is a few KiB, so the first
    request reads that much, and a read of some columns fetches little more than their bytes
    (a longer header costs one more request)."""
    from ...formats import SAFETENSORS

    return SAFETENSORS.first_request(SHARD_FIRST_READ)


def open_located(where: str | Source) -> Reader:
    """A safetensors reader of a local path or a source (what :func:`open_shard` and
    :func:`locate_shard` give)."""
    from ...formats import SAFETENSORS, open_reader

    if isinstance(where, str):
        return open_reader(where, format="safetensors")
    return SAFETENSORS.impl().open_reader(where)


def open_shard(store: Store, shard_path: str, size: int) -> str | Source:
    """What a reader opens for the listed shard ``shard_path`` of ``size`` bytes, after the
    store's checks (inside the folder, a regular file, the listed size)."""
    first = None if store.is_local else shard_first_request()
    return store.shard(shard_path, size, first=first)


def locate_shard(store: Store, name: str) -> str | Source:
    """What a reader opens for the (staged) shard ``name``, unchecked: the writer's own."""
    first = None if store.is_local else shard_first_request()
    return store.locate(name, first=first)


def delete_previous(store: Store, listed: Iterable[object], keep: Collection[str]) -> list[str]:
    """Delete, of the names the previous manifest ``listed``, those a commit may delete
    (:func:`~tensorfile.dataset.layout.files.deletable`'s rules) and return them."""
    root = store.local_path()
    if root is not None:
        return files.delete_previous(root, listed, keep)
    present = set(store.list_files())
    removed = []
    for name in files.deletable_names(listed, keep):
        if name in present:
            try:
                store.remove(name)
            except SourceError:
                continue  # the new dataset is committed; an unlisted shard is ignored
            removed.append(name)
    return removed
