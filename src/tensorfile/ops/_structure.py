"""The structure of a model file, read from its header alone, in one shape for every format.

:func:`load` takes a safetensors, zTensor or GGUF file, a sharded checkpoint (its
``*.safetensors.index.json``, or a folder holding one) or a glob, and returns a
:class:`Structure`: format, version, header size, metadata and one :class:`TensorEntry` per
tensor. Only headers are read; each source's :class:`~tensorfile.sources.base.ReadStats` is
kept so callers (and tests) can see how little was touched.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros((2, 3), np.float32)}, path, metadata={"format": "np"})
    >>> s = load(path)
    >>> s.format, s.metadata, [(t.name, t.dtype, t.shape, t.byte_length) for t in s.tensors]
    ('safetensors', {'format': 'np'}, [('w', 'F32', (2, 3), 24)])
"""

from __future__ import annotations

import glob as _glob
import math
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from tensorfile.formats._index import (
    MAX_INDEX_BYTES,
    index_path,
    is_index,
    local_shards,
    read_index,
    regular_file,
    remote_shards,
    shard_name,
)
from tensorfile.formats.gguf import PLAIN_TYPES

from ..core import dtypes
from ..core.catalog import Catalog, Component, TensorInfo
from ..core.errors import InvalidArgumentError, SourceError, TensorFileError
from ..core.reader import Reader
from ..core.source import ReadStats, Source
from ..formats import FORMATS, Format, detect, guess, open_reader
from ..sources import LocalSource, is_url, open_path

__all__ = [
    "MAX_INDEX_BYTES",
    "ShardInfo",
    "Structure",
    "TensorEntry",
    "from_catalog",
    "load",
    "load_file",
    "naming",
    "open_readers",
    "shard_name",
]


class TensorEntry(NamedTuple):
    """One tensor as a header describes it.

    Attributes:
        name: the tensor's name.
        dtype: the dtype as the file names it (``F32``, ``float32``), GGUF's upper-cased
            (``F32``, ``Q4_K``: the names safetensors and the ``gguf`` package use).
        shape: the shape in row-major order, outermost dimension first, for every format
            (GGUF's header lists dimensions innermost first: they are reversed, so a tensor
            of shape ``(8, 30)`` has that shape in safetensors and GGUF alike; the
            structural hash writes them back in the file's order).
        byte_length: stored bytes (zTensor: all components; GGUF: from ggml's block sizes,
            0 for a type tensorfile does not know).
        data_offsets: ``[start, end)`` as the header gives it (safetensors: relative to the
            data region; zTensor: absolute, of the first component; GGUF: relative to the
            data region).
        shard: the file holding the tensor, for sharded checkpoints.
        layout: zTensor's ``format`` (``dense``, ``sparse_csr``...), else ``dense``.
        encoding: ``raw`` or the codec of the (first) component.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    byte_length: int
    data_offsets: tuple[int, int]
    shard: str | None = None
    layout: str = "dense"
    encoding: str = "raw"

    @property
    def parameters(self) -> int:
        """Number of elements (of the logical shape)."""
        return math.prod(self.shape)

    @property
    def data_bytes(self) -> int:
        """Bytes of the tensor's dense, uncompressed data (the stored length where the dtype
        is not one tensorfile knows, e.g. GGUF's quantized types)."""
        try:
            dt = dtypes.from_name(self.dtype)
        except KeyError:
            return self.byte_length
        return dt.nbytes(self.parameters)

    @property
    def common_dtype(self) -> str:
        """The dtype in one vocabulary for every format (tensorfile's names: ``F32``,
        ``BF16``...; GGUF's quantized types upper-cased: ``Q4_K``)."""
        try:
            return dtypes.from_name(self.dtype).name
        except KeyError:
            return PLAIN_TYPES.get(self.dtype, self.dtype.upper())


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One file of a sharded checkpoint."""

    path: str
    tensor_count: int
    total_bytes: int


@dataclass(frozen=True)
class Structure:
    """A model file's (or checkpoint's) header, in a format-neutral shape.

    Attributes:
        format: ``safetensors``, ``ztensor`` or ``gguf``.
        path: what was opened.
        version: the format's version (``"1.0"`` for zTensor, ``"3"`` for GGUF), else None.
        header_size: bytes of header (safetensors JSON, zTensor manifest, GGUF header); the
            sum over the shards of a sharded checkpoint.
        metadata: text metadata (safetensors ``__metadata__``, zTensor attributes, GGUF
            key-values as :class:`~tensorfile.formats.gguf.GGUFValue`).
        tensors: tensors sorted by name.
        shards: the files of a sharded checkpoint, else None.
        stats: what was read, per source.
        opened_from: where a file named in ``path`` or ``shards`` is opened again, when its
            name is not that (a URL's name hides its credentials and query string).
    """

    format: str
    path: str
    version: str | None
    header_size: int
    metadata: Mapping[str, Any]
    tensors: tuple[TensorEntry, ...]
    shards: tuple[ShardInfo, ...] | None = None
    stats: tuple[ReadStats, ...] = field(default=(), compare=False)
    opened_from: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def tensor(self, name: str) -> TensorEntry | None:
        """The entry named ``name``, or None."""
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    @property
    def bytes_read(self) -> int:
        """Bytes read from all sources to learn this structure."""
        return sum(s.bytes_read for s in self.stats)


def _entry(info: TensorInfo, fmt: Format, base: int) -> TensorEntry:
    """A catalog entry as the file's header describes it (shapes row-major, as the catalog
    has them)."""
    comps = info.components
    first: Component | None
    if len(comps) == 1:  # the common case: one stored piece
        (first,) = comps.values()
        nbytes = first.range.stop - first.range.start
    else:
        first = (
            comps.get("data")
            or comps.get("values")
            or min(comps.values(), key=lambda c: c.range.start, default=None)
        )
        nbytes = info.nbytes
    start, stop = (first.range.start - base, first.range.stop - base) if first else (0, 0)
    dtype = info.dtype_name or info.dtype.name
    return TensorEntry(
        info.name,
        dtype.upper() if fmt.name == "gguf" else dtype,
        info.shape,
        nbytes,
        (start, stop),
        None,
        "dense" if info.layout == "quantized" else info.layout,
        first.encoding if first else "raw",
    )


def _by_name(t: TensorEntry) -> str:
    return t.name


def from_catalog(cat: Catalog, path: str, stats: tuple[ReadStats, ...] = ()) -> Structure:
    """The structure of one file, from its catalog."""
    fmt = FORMATS[cat.format]
    base = cat.data_start if fmt.relative_offsets else 0
    return Structure(
        cat.format,
        path,
        cat.version,
        cat.header_size,
        dict(cat.metadata),
        tuple(sorted([_entry(i, fmt, base) for i in cat.tensors.values()], key=_by_name)),
        stats=stats,
    )


def load_file(path: str, *, local: bool = False) -> Structure:
    """The structure of one file; ``local=True`` opens ``path`` as a local file only (never
    as a URL) and refuses anything but a regular file (a FIFO would block, a device never
    end) before opening it."""
    if local:
        regular_file(path)
        source: Source = LocalSource(path)
    else:
        hint = guess(path)
        source = open_path(path, first=hint.first_request() if hint else None)
    with closing(source), naming(source.name):
        cat = detect(source).impl().read_catalog(source)
    found = from_catalog(cat, source.name, (source.stats,))
    if source.name != path:  # a URL shown without its credentials: keep where it is
        found = replace(found, opened_from={source.name: path})
    return found


@contextmanager
def naming(name: str) -> Iterator[None]:
    """Make sure an error of tensorfile's raised in the block names the file ``name`` (one
    of a glob's thousand files, say), prefixing its message when it does not.

    Example:
        >>> try:
        ...     with naming("m.safetensors"):
        ...         raise InvalidArgumentError("header too short")
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        m.safetensors: header too short
    """
    try:
        yield
    except TensorFileError as exc:
        if exc.args and isinstance(exc.args[0], str) and name not in exc.args[0]:
            exc.args = (f"{name}: {exc.args[0]}", *exc.args[1:])
        raise


def open_readers(s: Structure) -> dict[str, Reader]:
    """A reader per file of ``s`` (its shards, or the file itself), by path: local files are
    opened as local files only, never dispatched as URLs. Close them when done.

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
    files = [sh.path for sh in s.shards] if s.shards else [s.path]
    local = not is_url(s.path)
    out: dict[str, Reader] = {}
    try:
        for f in files:
            where = s.opened_from.get(f, f)
            if local:
                regular_file(f)
                source = LocalSource(f)
                try:
                    with naming(f):
                        out[f] = detect(source).impl().open_reader(source)
                except BaseException:
                    source.close()
                    raise
            else:
                with naming(f):
                    out[f] = open_reader(where)
    except BaseException:
        for reader in out.values():
            reader.close()
        raise
    return out


def _merge(
    path: str,
    parts: list[Structure],
    files: list[str],
    expected: dict[str, tuple[str, str]] | None = None,
) -> Structure:
    """One structure of ``parts`` (loaded from ``files``); ``expected`` (tensor -> one of
    ``files`` and the shard name the index gave) is checked against where each tensor
    really is."""
    tensors: dict[str, TensorEntry] = {}
    holder: dict[str, str] = {}
    metadata: dict[str, Any] = {}
    shards = []
    formats = {p.format for p in parts}
    if len(formats) > 1:
        raise InvalidArgumentError(f"{path}: the files mix formats ({', '.join(sorted(formats))})")
    for part, file in zip(parts, files, strict=True):
        shard = part.path
        for t in part.tensors:
            if t.name in tensors:
                raise InvalidArgumentError(
                    f"{path}: tensor {t.name!r} is in both {tensors[t.name].shard} and {shard}"
                )
            tensors[t.name] = TensorEntry(
                t.name, t.dtype, t.shape, t.byte_length, t.data_offsets, shard, t.layout, t.encoding
            )
            holder[t.name] = file
        for k, v in part.metadata.items():
            metadata.setdefault(k, v)
        shards.append(ShardInfo(shard, len(part.tensors), sum(t.byte_length for t in part.tensors)))
    for name, (shard_file, shard) in (expected or {}).items():
        if holder.get(name) != shard_file:
            raise InvalidArgumentError(
                f"{path}: the index puts tensor {name!r} in {shard}, but that shard does not "
                "hold it"
            )
    return Structure(
        parts[0].format if parts else "safetensors",
        path,
        parts[0].version if parts else None,
        sum(p.header_size for p in parts),
        metadata,
        tuple(sorted(tensors.values(), key=_by_name)),
        tuple(shards),
        tuple(s for p in parts for s in p.stats),
        {k: v for p in parts for k, v in p.opened_from.items()},
    )


def _load_many(files: list[str], *, local: bool) -> list[Structure]:
    def one(f: str) -> Structure:
        return load_file(f, local=local)

    if len(files) <= 1:
        return [one(f) for f in files]
    with ThreadPoolExecutor(min(8, len(files)), thread_name_prefix="tensorfile-hdr") as pool:
        return list(pool.map(one, files))


def load(path: str | os.PathLike[str]) -> Structure:
    """The structure of a file, a sharded checkpoint (index or folder) or a glob of files.

    A sharded checkpoint's index names its shards by plain relative names (see
    :func:`shard_name`): local shards are opened as local files, and only inside the
    index's folder; a remote index's shards are fetched from next to it. An index over
    :data:`MAX_INDEX_BYTES` is refused unread.
    """
    target = os.fspath(path)
    if not isinstance(target, str):
        raise InvalidArgumentError(f"expected a path or URL as text, got {target!r}")
    if not target:
        raise InvalidArgumentError("the path is empty")
    if "\0" in target:
        raise InvalidArgumentError(f"the path {target!r} holds a NUL character")
    if is_url(target):
        return _load_url(target)
    index = index_path(target)
    if index is not None:
        weight_map, _ = read_index(index, local=True)
        where = local_shards(index, sorted(set(weight_map.values())))
        return _checkpoint(target, weight_map, where, local=True)
    if os.path.lexists(target):
        return load_file(target, local=True)
    matches = sorted(_glob.glob(target))
    if not matches:
        raise SourceError(f"{target}: no such file, and no file matches it as a glob")
    if len(matches) == 1:
        return load_file(matches[0], local=True)
    return _merge(target, _load_many(matches, local=True), matches)


def _checkpoint(
    target: str, weight_map: dict[str, str], where: dict[str, str], *, local: bool
) -> Structure:
    files = sorted(set(where.values()))
    expected = {tensor: (where[shard], shard) for tensor, shard in weight_map.items()}
    return _merge(target, _load_many(files, local=local), files, expected)


def _load_url(url: str) -> Structure:
    """A remote file, or a remote sharded checkpoint (its index, then the shards' headers,
    read concurrently)."""
    if not is_index(url):
        return load_file(url)
    weight_map, shown = read_index(url, local=False)
    where = remote_shards(url, shown, sorted(set(weight_map.values())))
    return _checkpoint(shown, weight_map, where, local=False)
