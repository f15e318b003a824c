"""Catalogs read by name: one file, or a sharded checkpoint's shards as one catalog.

:func:`file_catalog` reads one file's header through the registry (a local path is opened as
a local regular file only, never dispatched as a URL); :func:`checkpoint_catalog` reads a
sharded checkpoint's index and every shard's header (concurrently) into one
:class:`~tensorfile.core.catalog.Catalog` whose tensors say which shard holds them, checking
that every shard holds what the index places in it. A checkpoint's metadata, through every
door, is :func:`checkpoint_metadata`'s: the index's ``metadata`` (text as it is, other
values as JSON text) but ``total_size`` (the index's bookkeeping, which no conversion keeps
true: it is :attr:`CheckpointIndex.total_size`), then every key that all the shards' own
metadata give the same value (the index wins where both have a key).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_sharded
    >>> d = tempfile.mkdtemp()
    >>> _ = save_sharded({"a": np.zeros(300, np.float32), "b": np.ones(300, np.float32)}, d,
    ...                  max_shard_size="1KB", metadata={"format": "np"})
    >>> cat = checkpoint_catalog(d)
    >>> sorted(cat.tensors), [os.path.basename(s.path) for s in cat.shards]
    (['a', 'b'], ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'])
    >>> dict(cat.metadata)
    {'format': 'np'}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any

from ..core.catalog import Catalog, agreed, merged
from ..core.errors import InvalidArgumentError, naming
from ..core.reader import Reader
from ..core.source import Source
from ..sources import LocalSource, is_url, local_path_of, open_path
from . import _index, detect, guess

__all__ = [
    "INDEX_SUFFIX",
    "MAX_INDEX_BYTES",
    "CheckpointIndex",
    "checkpoint_catalog",
    "checkpoint_metadata",
    "file_catalog",
    "file_catalogs",
    "index_path",
    "is_index",
    "local_target",
    "locate_checkpoint",
    "naming",
    "open_file_source",
    "reader_catalog",
    "regular_file",
]

INDEX_SUFFIX = _index.INDEX_SUFFIX
MAX_INDEX_BYTES = _index.MAX_INDEX_BYTES
is_index = _index.is_index
regular_file = _index.regular_file
index_path = _index.index_path


def local_target(target: str) -> str:
    """``target`` with a ``file://`` URL turned into its local path, so that the local rules
    (regular files only; a checkpoint's shards inside its folder once links are resolved)
    hold for it exactly as for the plain path; anything else as it is.

    Example:
        >>> local_target("file:///data/ck/model.safetensors.index.json"), local_target("s3://b/m")
        ('/data/ck/model.safetensors.index.json', 's3://b/m')
    """
    if not is_url(target):
        return target
    return local_path_of(target) or target


def open_file_source(path: str, *, local: bool, allow_full_download: bool | None = None) -> Source:
    """The source of one file: ``local=True`` opens ``path`` as a local regular file only
    (a FIFO would block, a device never end: refused before opening), else a path or URL
    with the first request its name suggests (``allow_full_download``: see
    :func:`tensorfile.sources.open_path`)."""
    if local:
        regular_file(path)
        return LocalSource(path)
    hint = guess(path)
    first = hint.first_request() if hint else None
    return open_path(path, first=first, allow_full_download=allow_full_download)


def file_catalog(
    path: str,
    *,
    local: bool = False,
    allow_full_download: bool | None = None,
    key: str | None = None,
) -> Catalog:
    """The catalog of one file, from its header (``path``, ``stats`` and, for a URL shown
    without its credentials, ``opened_from`` filled in); ``key``: a dictionary of a PyTorch
    pickle (:func:`tensorfile.formats.open_reader`).

    Example:
        >>> import numpy as np
        >>> from tensorfile.safetensors.numpy import save
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> _ = open(p, "wb").write(save({"w": np.zeros(3, np.int8)}))
        >>> cat = file_catalog(p, local=True)
        >>> cat.path == p, cat.tensors["w"].data_offsets, cat.bytes_read > 0
        (True, (0, 3), True)
    """
    source = open_file_source(path, local=local, allow_full_download=allow_full_download)
    with closing(source), naming(source.name):
        cat = detect(source).read_catalog(source, key=key)
    return _as_read(cat, source, path)


def _as_read(cat: Catalog, source: Source, path: str) -> Catalog:
    """``cat`` with where it was read from: ``path`` (as given) and its source's counters."""
    opened = {source.name: path} if source.name != path else {}
    return replace(cat, path=source.name, stats=(source.stats,), opened_from=opened)


def reader_catalog(reader: Reader, path: str) -> Catalog:
    """The catalog of an open reader of the file ``path``, as :func:`file_catalog` gives
    it (``path``, ``stats``, ``opened_from``), without reading its header again."""
    return _as_read(reader.catalog, reader.source, path)


def file_catalogs(
    files: list[str], *, local: bool, allow_full_download: bool | None = None
) -> list[Catalog]:
    """:func:`file_catalog` of each of ``files``, read concurrently."""

    def one(f: str) -> Catalog:
        return file_catalog(f, local=local, allow_full_download=allow_full_download)

    if len(files) <= 1:
        return [one(f) for f in files]
    with ThreadPoolExecutor(min(8, len(files)), thread_name_prefix="tensorfile-hdr") as pool:
        return list(pool.map(one, files))


@dataclass(frozen=True)
class CheckpointIndex:
    """A sharded checkpoint's index, read and checked.

    Attributes:
        index: the index's path or URL (as opened).
        shown: its name in messages (a URL without credentials).
        weight_map: tensor name -> shard name.
        where: shard name -> its path or URL (inside the checkpoint's folder).
        metadata: the index's ``metadata`` object (empty when it has none).
        local: the index is a local file.
        allow_full_download: what the shards' sources are opened with (see
            :func:`tensorfile.sources.open_path`).
    """

    index: str
    shown: str
    weight_map: dict[str, str]
    where: dict[str, str]
    metadata: Mapping[str, Any]
    local: bool
    allow_full_download: bool | None = None

    @property
    def shards(self) -> list[str]:
        """The shard names, each once, in order of first mention."""
        return list(dict.fromkeys(self.weight_map.values()))

    @property
    def total_size(self) -> int | None:
        """The index's ``metadata.total_size`` when it is a whole number."""
        value = self.metadata.get("total_size")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def locate_checkpoint(target: str, *, allow_full_download: bool | None = None) -> CheckpointIndex:
    """Read the index of the checkpoint ``target`` (an index path or URL, or a local folder
    holding one) and locate its shards (see :mod:`tensorfile.formats._index` for the rules)."""
    target = local_target(target)
    local = not is_url(target)
    index = index_path(target) if local else target
    if index is None:
        raise InvalidArgumentError(f"{target} is not a sharded checkpoint index")
    weight_map, shown, doc = _index.read_index_doc(
        index, local=local, allow_full_download=allow_full_download
    )
    shards = list(dict.fromkeys(weight_map.values()))
    where = (
        _index.local_shards(index, shards) if local else _index.remote_shards(index, shown, shards)
    )
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return CheckpointIndex(index, shown, weight_map, where, meta, local, allow_full_download)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def checkpoint_metadata(
    index_metadata: Mapping[str, Any], shard_metadata: list[Mapping[str, Any]]
) -> dict[str, str]:
    """A checkpoint's metadata: the index's but ``total_size`` (text as it is, other values
    as JSON text), then each key that every shard's metadata holds with one value (the index
    wins where both have a key).

    Example:
        >>> checkpoint_metadata({"total_size": 8, "by": "me"}, [{"format": "pt", "a": "1"},
        ...                     {"format": "pt"}])
        {'by': 'me', 'format': 'pt'}
    """
    out = {str(k): _text(v) for k, v in index_metadata.items() if k != "total_size"}
    for key, value in agreed(list(shard_metadata)).items():
        out.setdefault(str(key), _text(value))
    return out


def checkpoint_catalog(
    target: str | CheckpointIndex,
    *,
    allow_full_download: bool | None = None,
    read: Callable[[list[str]], list[Catalog]] | None = None,
) -> Catalog:
    """The catalog of a sharded checkpoint (see the module docstring): its metadata is
    :func:`checkpoint_metadata`'s, for every door (``tensorfile.open``, ``inspect``,
    ``meta``, the ids). ``read``: how the shard files' catalogs are read (default:
    :func:`file_catalogs`; a :class:`~tensorfile.formats.checkpoint.ShardedReader` takes them
    from its shards' readers)."""
    ck = (
        locate_checkpoint(target, allow_full_download=allow_full_download)
        if isinstance(target, str)
        else target
    )
    shown = target if isinstance(target, str) and ck.local else ck.shown
    files = sorted(set(ck.where.values()))
    if read is None:
        parts = file_catalogs(files, local=ck.local, allow_full_download=ck.allow_full_download)
    else:
        parts = read(files)
    cat = merged(shown, parts, files)
    holder = {name: t.file for name, t in cat.tensors.items()}
    by_file = dict(
        zip(files, (p.path or f for p, f in zip(parts, files, strict=True)), strict=True)
    )
    for name, shard in ck.weight_map.items():
        if holder.get(name) != by_file[ck.where[shard]]:
            raise InvalidArgumentError(
                f"{ck.shown}: the index puts tensor {name!r} in {shard}, but that shard does not "
                "hold it"
            )
    return replace(cat, metadata=checkpoint_metadata(ck.metadata, [p.metadata for p in parts]))
