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
import json
import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core import dtypes
from ..core.catalog import Catalog, Component, TensorInfo
from ..core.errors import InvalidArgumentError, SourceError
from ..core.source import ReadStats
from ..formats import FORMATS, Format, detect, guess
from ..gguf import PLAIN_TYPES
from ..sources import is_url, open_path

__all__ = ["ShardInfo", "Structure", "TensorEntry", "from_catalog", "load", "load_file"]

INDEX_SUFFIX = ".index.json"


class TensorEntry(NamedTuple):
    """One tensor as a header describes it.

    Attributes:
        name: the tensor's name.
        dtype: the dtype as the file names it (``F32``, ``float32``, ``q4_k``).
        shape: the shape as the file stores it (GGUF: innermost dimension first).
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
            key-values as :class:`~tensorfile.gguf.GGUFValue`).
        tensors: tensors sorted by name.
        shards: the files of a sharded checkpoint, else None.
        stats: what was read, per source.
    """

    format: str
    path: str
    version: str | None
    header_size: int
    metadata: Mapping[str, Any]
    tensors: tuple[TensorEntry, ...]
    shards: tuple[ShardInfo, ...] | None = None
    stats: tuple[ReadStats, ...] = field(default=(), compare=False)

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
    """A catalog entry as the file's header describes it."""
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
    return TensorEntry(
        info.name,
        info.dtype_name or info.dtype.name,
        info.shape[::-1] if fmt.reversed_shapes else info.shape,
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


def load_file(path: str) -> Structure:
    """The structure of one file."""
    hint = guess(path)
    source = open_path(path, first=hint.first_request() if hint else None)
    with closing(source):
        cat = detect(source).impl().read_catalog(source)
    return from_catalog(cat, source.name, (source.stats,))


def _index_path(path: str) -> str | None:
    if path.endswith(INDEX_SUFFIX):
        return path
    if os.path.isdir(path):
        found = sorted(_glob.glob(os.path.join(_glob.escape(path), "*.safetensors" + INDEX_SUFFIX)))
        if not found:
            found = sorted(_glob.glob(os.path.join(_glob.escape(path), "*" + INDEX_SUFFIX)))
        if len(found) == 1:
            return found[0]
        if not found:
            raise InvalidArgumentError(
                f"{path} is a folder without a *.safetensors.index.json; pass a file or a glob"
            )
        raise InvalidArgumentError(f"{path} holds several index files: {found}")
    return None


def _read_index(index: str) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint's index (a local path or a URL)."""
    with closing(open_path(index)) as src:
        raw = src.read(0, src.size)
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidArgumentError(f"{index} is not valid JSON: {exc}") from exc
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise InvalidArgumentError(f"{index} has no 'weight_map' of tensor names to shard files")
    return weight_map


def _merge(path: str, parts: list[Structure], weight_map: dict[str, str] | None) -> Structure:
    tensors: dict[str, TensorEntry] = {}
    metadata: dict[str, Any] = {}
    shards = []
    formats = {p.format for p in parts}
    if len(formats) > 1:
        raise InvalidArgumentError(f"{path}: the files mix formats ({', '.join(sorted(formats))})")
    for part in parts:
        shard = part.path
        for t in part.tensors:
            if t.name in tensors:
                raise InvalidArgumentError(
                    f"{path}: tensor {t.name!r} is in both {tensors[t.name].shard} and {shard}"
                )
            tensors[t.name] = TensorEntry(
                t.name, t.dtype, t.shape, t.byte_length, t.data_offsets, shard, t.layout, t.encoding
            )
        for k, v in part.metadata.items():
            metadata.setdefault(k, v)
        shards.append(ShardInfo(shard, len(part.tensors), sum(t.byte_length for t in part.tensors)))
    if weight_map is not None:
        for name, shard_file in weight_map.items():
            got = tensors.get(name)
            if got is None or os.path.basename(got.shard or "") != os.path.basename(shard_file):
                raise InvalidArgumentError(
                    f"{path}: the index puts tensor {name!r} in {shard_file}, but that shard "
                    "does not hold it"
                )
    return Structure(
        parts[0].format if parts else "safetensors",
        path,
        parts[0].version if parts else None,
        sum(p.header_size for p in parts),
        metadata,
        tuple(sorted(tensors.values(), key=lambda t: t.name)),
        tuple(shards),
        tuple(s for p in parts for s in p.stats),
    )


def _load_many(files: list[str]) -> list[Structure]:
    if len(files) <= 1:
        return [load_file(f) for f in files]
    with ThreadPoolExecutor(min(8, len(files)), thread_name_prefix="tensorfile-hdr") as pool:
        return list(pool.map(load_file, files))


def load(path: str | os.PathLike[str]) -> Structure:
    """The structure of a file, a sharded checkpoint (index or folder) or a glob of files."""
    target = os.fspath(path)
    if is_url(target):
        return _load_url(target)
    index = _index_path(target)
    if index is not None:
        weight_map = _read_index(index)
        folder = os.path.dirname(index)
        files = sorted(set(weight_map.values()))
        for f in files:
            if os.path.isabs(f) or ".." in f.replace("\\", "/").split("/"):
                raise InvalidArgumentError(f"{index}: shard path {f!r} leaves the folder")
        return _merge(target, _load_many([os.path.join(folder, f) for f in files]), weight_map)
    if os.path.exists(target):
        return load_file(target)
    matches = sorted(_glob.glob(target))
    if not matches:
        raise SourceError(f"{target}: no such file")
    if len(matches) == 1:
        return load_file(matches[0])
    return _merge(target, _load_many(matches), None)


def _load_url(url: str) -> Structure:
    """A remote file, or a remote sharded checkpoint (its index, then the shards' headers,
    read concurrently)."""
    if not url.endswith(INDEX_SUFFIX):
        return load_file(url)
    import urllib.parse

    weight_map = _read_index(url)
    files = sorted(set(weight_map.values()))
    urls = [urllib.parse.urljoin(url, f) for f in files]
    return _merge(url, _load_many(urls), weight_map)
