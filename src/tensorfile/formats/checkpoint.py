"""Sharded checkpoints as one reader, and the ``tensorfile.open`` that knows them.

:func:`open` (``tensorfile.open``) reads what :func:`tensorfile.formats.open_reader` reads,
and also a sharded safetensors checkpoint: its ``*.safetensors.index.json`` (a path, an
``http(s)://`` URL or an fsspec URL) or a local folder holding one (a folder holding no index
but exactly one ``*.safetensors`` file opens that file). The :class:`ShardedReader` has the
reader surface (``keys()``, ``metadata``, ``info``, ``view``, ``get_tensor``,
``read_slice``, ``get_tensors``), opens each shard on first use and only once, and checks
that a shard holds the tensors the index places in it.

The index is held to the operations' rules: at most 64 MiB, a ``weight_map`` of text to
text, shards named by plain relative names in the index's folder (no ``..``, no absolute
paths or URLs); a remote index's shards are fetched from next to it.

Example:
    >>> import numpy as np, os, tempfile, tensorfile
    >>> from tensorfile.safetensors.numpy import save_sharded
    >>> d = tempfile.mkdtemp()
    >>> _ = save_sharded({"a": np.zeros(300, np.float32), "b": np.ones(300, np.float32)}, d,
    ...                  max_shard_size="1KB")
    >>> with tensorfile.open(d) as ck:
    ...     ck.keys(), ck.get_tensor("b").sum(), ck.opened
    (['a', 'b'], np.float32(300.0), ['model-00002-of-00002.safetensors'])
"""

from __future__ import annotations

import glob
import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from tensorfile.core.catalog import TensorInfo
from tensorfile.core.errors import (
    FormatError,
    InvalidArgumentError,
    SafetensorError,
    SourceError,
    TensorFileError,
    TensorNotFoundError,
)
from tensorfile.core.reader import Reader
from tensorfile.formats import open_reader
from tensorfile.sources import PathOrData, is_url

__all__ = ["ShardedReader", "open"]

INDEX_SUFFIX = ".index.json"  # the operations' rule (tensorfile.formats._index), loaded lazily


class ShardedReader:
    """A sharded checkpoint read as one file (see the module docstring)."""

    format = "safetensors"

    def __init__(
        self, index: str, weight_map: dict[str, str], where: dict[str, str], doc: dict[str, Any]
    ) -> None:
        self.index = index
        self._map = weight_map
        self._where = where
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        total = meta.get("total_size")
        self.total_size: int | None = total if isinstance(total, int) else None
        self.metadata: dict[str, str] = {
            str(k): v if isinstance(v, str) else json.dumps(v)
            for k, v in meta.items()
            if k != "total_size"
        }
        self._readers: dict[str, Reader] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- the shards ------------------------------------------------------------------------

    @property
    def shards(self) -> list[str]:
        """The shard files the index names, each once, in order of first mention."""
        return list(dict.fromkeys(self._map.values()))

    @property
    def opened(self) -> list[str]:
        """The shards opened so far."""
        return list(self._readers)

    def _reader(self, name: str) -> Reader:
        if self._closed:
            raise InvalidArgumentError(f"{self.index}: the checkpoint is closed")
        shard = self._map.get(name)
        if shard is None:
            raise TensorNotFoundError(f"{self.index}: no tensor named {name!r}")
        with self._lock:
            reader = self._readers.get(shard)
            if reader is None:
                try:
                    reader = open_reader(self._where[shard], format="safetensors")
                except TensorFileError as exc:
                    raise type(exc)(f"{self.index}: shard {shard}: {exc}") from exc
                except OSError as exc:
                    raise SafetensorError(f"{self.index}: shard {shard}: {exc}") from exc
                self._readers[shard] = reader
        if name not in reader.catalog.tensors:
            raise FormatError(
                f"{self.index}: the index places tensor {name!r} in {shard}, which does not hold it"
            )
        return reader

    # -- the reader surface ----------------------------------------------------------------

    def keys(self) -> list[str]:
        """The tensor names of the index, sorted (as a safetensors file lists them)."""
        return sorted(self._map)

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def info(self, name: str) -> TensorInfo:
        """The tensor's :class:`TensorInfo` (its byte ranges are in its shard)."""
        return self._reader(name).info(name)

    def shard_of(self, name: str) -> str:
        """The shard file the index places ``name`` in."""
        if name not in self._map:
            raise TensorNotFoundError(f"{self.index}: no tensor named {name!r}")
        return self._map[name]

    def view(self, name: str) -> Any:
        """A zero-copy, read-only view of the tensor (see ``Reader.view``)."""
        return self._reader(name).view(name)

    def get_tensor(self, name: str) -> Any:
        """An owned copy of the tensor."""
        return self._reader(name).get_tensor(name)

    def read_slice(self, name: str, key: Any) -> Any:
        """Part of the tensor, reading only the bytes it needs."""
        return self._reader(name).read_slice(name, key)

    def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Owned copies of ``names`` (default: every tensor), shard by shard."""
        wanted = self.keys() if names is None else list(names)
        return {n: self.get_tensor(n) for n in wanted}

    def close(self) -> None:
        """Close every opened shard."""
        with self._lock:
            readers, self._readers = list(self._readers.values()), {}
            self._closed = True
        for reader in readers:
            reader.close()

    def __enter__(self) -> ShardedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShardedReader({self.index!r}, {len(self._map)} tensors, {len(self.shards)} shards)"


def open_checkpoint(target: str) -> ShardedReader:
    """A :class:`ShardedReader` over the checkpoint ``target`` (an index path or URL, or a
    local folder holding one)."""
    from tensorfile.formats._index import index_path, local_shards, read_index_doc, remote_shards

    local = not is_url(target)
    index = index_path(target) if local else target
    if index is None:
        raise InvalidArgumentError(f"{target} is not a sharded checkpoint index")
    weight_map, shown, doc = read_index_doc(index, local=local)  # read once
    shards = list(dict.fromkeys(weight_map.values()))
    where = local_shards(index, shards) if local else remote_shards(index, shown, shards)
    return ShardedReader(shown, weight_map, where, doc)


def _lone_file(folder: str) -> str | None:
    """The folder's one ``*.safetensors`` file; None when it has none; a
    :class:`SourceError` naming them when it has several (which one is meant is unknown)."""
    found = sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    if len(found) > 1:
        names = ", ".join(os.path.basename(f) for f in found[:5])
        more = f" and {len(found) - 5:,} more" if len(found) > 5 else ""
        raise SourceError(
            f"{folder} is a directory with no *.safetensors.index.json and {len(found):,} "
            f".safetensors files ({names}{more}): pass one of them"
        )
    return found[0] if found else None


def open(
    path_or_data: PathOrData, *, format: str | None = None, allow_full_download: bool | None = None
) -> Reader | ShardedReader:
    """Open a tensor file, or a sharded checkpoint (see the module docstring); everything
    else is :func:`tensorfile.formats.open_reader`'s.

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> with tensorfile.open(save({"w": np.ones((2, 2), np.float32)})) as f:
        ...     f.format, f.info("w").shape
        ('safetensors', (2, 2))
    """
    if format is None and isinstance(path_or_data, str | os.PathLike):
        target = os.fspath(path_or_data)
        if isinstance(target, str) and target:
            if is_url(target):
                if target.split("#", 1)[0].split("?", 1)[0].endswith(INDEX_SUFFIX):
                    return open_checkpoint(target)
            elif target.endswith(INDEX_SUFFIX):
                return open_checkpoint(target)
            elif os.path.isdir(target):
                if glob.glob(os.path.join(glob.escape(target), "*" + INDEX_SUFFIX)):
                    return open_checkpoint(target)  # (several indexes: an error naming them)
                path_or_data = _lone_file(target) or target  # else "is a directory"
    return open_reader(path_or_data, format=format, allow_full_download=allow_full_download)
