"""What the operations read: a catalog by name, in one shape for every format.

:func:`load` takes a tensor file, a sharded checkpoint (its ``*.safetensors.index.json``, or a
folder holding one) or a glob of files, and returns one
:class:`~tensorfile.core.catalog.Catalog` from the headers alone, through the format registry
(:mod:`tensorfile.formats.catalogs`): ``path`` is what was opened, ``shards`` the files of a
checkpoint or glob (each tensor's ``file`` its file), ``stats`` what was read.
:func:`open_readers` opens a reader per file of such a catalog.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros((2, 3), np.float32)}, path, metadata={"format": "np"})
    >>> c = load(path)
    >>> c.format, dict(c.metadata)
    ('safetensors', {'format': 'np'})
    >>> [(t.name, t.stored_dtype, t.shape, t.nbytes) for t in c.by_name()]
    [('w', 'F32', (2, 3), 24)]
"""

from __future__ import annotations

import glob as _glob
import os

from ..core.catalog import Catalog, TensorInfo, merged
from ..core.digests import verified
from ..core.errors import InvalidArgumentError, SourceError
from ..core.reader import Reader
from ..formats import detect, open_reader
from ..formats.catalogs import (
    MAX_INDEX_BYTES,
    checkpoint_catalog,
    file_catalog,
    file_catalogs,
    index_path,
    is_index,
    local_target,
    naming,
    open_file_source,
)
from ..sources import is_url

__all__ = [
    "MAX_INDEX_BYTES",
    "file_dtype",
    "files_of",
    "load",
    "naming",
    "open_readers",
]


def file_dtype(fmt: str, t: TensorInfo) -> str:
    """The tensor's dtype as the file of format ``fmt`` names it (``F32``, ``float32``),
    GGUF's upper-cased (``F32``, ``Q4_K``: the names safetensors and the ``gguf`` package
    use)."""
    name = t.stored_dtype
    return name.upper() if fmt == "gguf" else name


def files_of(cat: Catalog) -> list[str]:
    """The files of ``cat``: its shards, or the one file it was read from."""
    if cat.shards:
        return [s.path for s in cat.shards]
    return [cat.path or ""]


def open_readers(
    cat: Catalog, *, allow_full_download: bool | None = None, verify: bool | None = None
) -> dict[str, Reader]:
    """A reader per file of ``cat`` (its shards, or the file itself), by path: local files
    are opened as local files only, never dispatched as URLs (``allow_full_download``: see
    :func:`tensorfile.sources.open_path`; ``verify``: whether reads check the digests the
    files store, None for each format's default). Close them when done.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> save_file({"w": np.arange(3, dtype=np.int8)}, path)
        >>> readers = open_readers(load(path))
        >>> readers[path].get_tensor("w").tolist()
        [0, 1, 2]
        >>> for r in readers.values():
        ...     r.close()
    """
    local = not is_url(cat.path or "")
    out: dict[str, Reader] = {}
    try:
        for f in files_of(cat):
            where = cat.opened_from.get(f, f)
            if local:
                source = open_file_source(f, local=True)
                try:
                    with naming(f):
                        reader = detect(source).impl().open_reader(source, verify=verify)
                except BaseException:
                    source.close()
                    raise
                out[f] = verified(reader, f) if verify else reader  # as open_reader does
            else:
                with naming(f):
                    allow = allow_full_download
                    out[f] = open_reader(where, allow_full_download=allow, verify=verify)
    except BaseException:
        for reader in out.values():
            reader.close()
        raise
    return out


def load(
    path: str | os.PathLike[str],
    *,
    allow_full_download: bool | None = None,
    key: str | None = None,
) -> Catalog:
    """The catalog of a file, a sharded checkpoint (index or folder) or a glob of files.
    ``key`` reads one dictionary of a PyTorch pickle (see
    :mod:`tensorfile.formats.torch_pickle`); only one file takes it.

    A sharded checkpoint's index names its shards by plain relative names: local shards are
    opened as local files, and only inside the index's folder; a remote index's shards are
    fetched from next to it. An index over :data:`MAX_INDEX_BYTES` is refused unread.
    ``allow_full_download``: see :func:`tensorfile.sources.open_path`.
    """
    target = os.fspath(path)
    if not isinstance(target, str):
        raise InvalidArgumentError(f"expected a path or URL as text, got {target!r}")
    if not target:
        raise InvalidArgumentError("the path is empty")
    if "\0" in target:
        raise InvalidArgumentError(f"the path {target!r} holds a NUL character")
    target = local_target(target)  # a file:// URL keeps the local rules
    if key is not None:
        if not is_url(target) and not os.path.lexists(target):
            raise SourceError(f"{target}: no such file (key= reads one PyTorch pickle)")
        return file_catalog(target, local=not is_url(target), key=key)
    if is_url(target):
        allow = allow_full_download
        if is_index(target):
            return checkpoint_catalog(target, allow_full_download=allow)
        return file_catalog(target, allow_full_download=allow)
    if index_path(target) is not None:
        return checkpoint_catalog(target)
    if os.path.lexists(target):
        return file_catalog(target, local=True)
    matches = sorted(_glob.glob(target))
    if not matches:
        raise SourceError(f"{target}: no such file, and no file matches it as a glob")
    if len(matches) == 1:
        return file_catalog(matches[0], local=True)
    return merged(target, file_catalogs(matches, local=True), matches)
