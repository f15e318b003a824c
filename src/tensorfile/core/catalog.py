"""The format-neutral description of a tensor file: what a format reader hands to consumers.

A :class:`Catalog` lists the file's tensors as :class:`TensorInfo` records and its metadata.
Each tensor is stored as one or more :class:`Component` byte ranges (a dense tensor has one,
``"data"``; sparse zTensor layouts have several). Byte ranges are absolute file offsets.
The per-tensor records are named tuples: immutable, and about three times cheaper to build
than frozen dataclasses, which a header of 100,000 tensors notices.

Example:
    >>> from tensorfile.core.catalog import ByteRange
    >>> ByteRange(8, 24).length
    16
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from . import dtypes
from .dtypes import DType
from .source import ReadStats

__all__ = [
    "ENCODING_NAMES",
    "EXTENSION_MARK",
    "LAYOUT_NAMES",
    "ByteRange",
    "Catalog",
    "Component",
    "ShardInfo",
    "TensorInfo",
    "agreed",
    "extension_name",
    "file_name",
    "first_overlap",
    "merged",
]

LAYOUT_NAMES: frozenset[str] = frozenset({"dense", "sparse_csr", "sparse_coo", "quantized"})
"""tensorfile's own layout names: what :attr:`TensorInfo.layout` says when tensorfile knows
how the bytes are laid out (a format gives one only where its specification defines that
layout; any other layout a file names is an extension, see :func:`extension_name`)."""

ENCODING_NAMES: frozenset[str] = frozenset({"raw", "zstd"})
"""tensorfile's own encoding names (:attr:`Component.encoding`): a format gives one only
where its specification defines that encoding."""

EXTENSION_MARK = "ext:"
"""What :func:`extension_name` puts before a file's name that could pass for one of
tensorfile's own."""

_COMMON_NAME = re.compile(r"[A-Z0-9_]+")


def extension_name(text: str, reserved: Container[str]) -> str:
    """A name a file chose for something tensorfile does not define (an extension layout,
    an encoding or a logical type tensorfile does not know), in a form that never equals a
    ``reserved`` name tensorfile decides by: ``text`` as it is, or, when it is one of them
    (or starts with :data:`EXTENSION_MARK`), after the mark. One text gives one name, two
    texts two names; :func:`file_name` gives the text back.

    Example:
        >>> [extension_name(t, LAYOUT_NAMES) for t in ("quantized_4bit", "quantized")]
        ['quantized_4bit', 'ext:quantized']
        >>> extension_name("ext:x", LAYOUT_NAMES), file_name("ext:quantized")
        ('ext:ext:x', 'quantized')
    """
    if text in reserved or text.startswith(EXTENSION_MARK):
        return EXTENSION_MARK + text
    return text


def file_name(name: str) -> str:
    """The text a file gave for ``name`` (a layout or encoding of a catalog, which
    :func:`extension_name` may have marked).

    Example:
        >>> file_name("ext:sparse_csr"), file_name("sparse_csr"), file_name("x.custom/1")
        ('sparse_csr', 'sparse_csr', 'x.custom/1')
    """
    return name[len(EXTENSION_MARK) :] if name.startswith(EXTENSION_MARK) else name


class _CommonNames(Container[str]):
    """The names a type tensorfile does not know must not take as its
    :attr:`TensorInfo.common_dtype`: every text of this vocabulary's form in any case,
    ``[A-Za-z0-9_]+`` (``F32``, ``Q4_K``, a type added later, and their lower-case forms,
    which the structural hash uses), and every name of a type tensorfile knows in any
    vocabulary (``float32``, ``u8``: what :func:`~tensorfile.core.dtypes.from_name`
    finds)."""

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return _COMMON_NAME.fullmatch(name.upper()) is not None or _known(name)


_COMMON_NAMES: Container[str] = _CommonNames()


class ByteRange(NamedTuple):
    """A half-open range ``[start, stop)`` of absolute byte offsets in a file."""

    start: int
    stop: int

    @property
    def length(self) -> int:
        """Number of bytes in the range."""
        return self.stop - self.start


_T = TypeVar("_T")


def first_overlap(
    spans: Iterable[tuple[int, int, _T]],
) -> tuple[tuple[int, int, _T], tuple[int, int, _T]] | None:
    """The first two of ``spans`` (``(start, stop, what)``: half-open byte ranges, empty
    ones aside) that share a byte, in the order of their starts; None when none do.

    Example:
        >>> first_overlap([(0, 4, "a"), (8, 9, "c"), (2, 6, "b"), (3, 3, "empty")])
        ((0, 4, 'a'), (2, 6, 'b'))
        >>> first_overlap([(4, 8, "b"), (0, 4, "a")]) is None
        True
    """
    ordered = sorted((s for s in spans if s[1] > s[0]), key=lambda s: (s[0], s[1]))
    for before, after in itertools.pairwise(ordered):
        if after[0] < before[1]:
            return before, after
    return None


class Component(NamedTuple):
    """One stored piece of a tensor.

    Attributes:
        range: where the stored bytes are.
        dtype: element type of the decoded bytes.
        encoding: ``"raw"`` or a codec name such as ``"zstd"`` (zTensor v2: an encoding
            profile id such as ``"zt.zstd-seekable/1"``).
        digest: ``"algorithm:hex"``, when the file carries one, over the bytes
            ``digest_over`` names.
        digest_over: ``"stored"`` (zTensor v1.0: the bytes in the file, after compression)
            or ``"decoded"`` (zTensor v2: the bytes the component denotes, after decoding).
        decoded_length: the decoded size in bytes, when the file states it (zTensor v2's
            ``decoded_length`` of an encoded part; None where it follows from the shape).
        shard: the file the bytes are in, by the name the manifest's shard table gives it
            (zTensor v2); None for this file. ``range`` is then a range of that file.
        logical: the logical type the file declares (zTensor v2's ``type``), when it
            declares one; for a type tensorfile does not know, ``dtype`` is the storage type
            and the component can only be read as stored bytes.
    """

    range: ByteRange
    dtype: DType
    encoding: str = "raw"
    digest: str | None = None
    digest_over: str = "stored"
    decoded_length: int | None = None
    shard: str | None = None
    logical: str | None = None


class TensorInfo(NamedTuple):
    """One tensor of a file.

    Attributes:
        name: the tensor's name.
        dtype: element type.
        shape: logical shape.
        components: the stored pieces, by role (``"data"`` for dense tensors).
        layout: ``"dense"``, ``"sparse_csr"``, ``"sparse_coo"``, ``"quantized"`` (ggml's
            block types, stored as bytes: GGUF's, and zTensor v2's ``gguf.<type>/1``
            objects; :attr:`quantization` names the type) or a format extension.
        dtype_name: the element type as the file names it, when that is not ``dtype.name``
            (zTensor's ``float32``, GGUF's ``q4_k``).
        file: the file holding the tensor, in a catalog of several files (a sharded
            checkpoint, a glob); None in a catalog of one file.
        offset_base: the offset the file's header counts data offsets from (the start of the
            data region for safetensors and GGUF, 0 for zTensor), which
            :attr:`data_offsets` subtracts; 0 (absolute offsets) unless the catalog's
            builder sets it.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    components: Mapping[str, Component]
    layout: str = "dense"
    dtype_name: str | None = None
    file: str | None = None
    offset_base: int = 0

    @property
    def stored_dtype(self) -> str:
        """The element type as the file names it."""
        return self.dtype_name or self.dtype.name

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def data(self) -> Component:
        """The single component of a dense tensor."""
        return self.components["data"]

    @property
    def byte_range(self) -> ByteRange:
        """Absolute byte range of a dense tensor's data."""
        return self.components["data"].range

    @property
    def nbytes(self) -> int:
        """Stored bytes of all components."""
        return sum(c.range.length for c in self.components.values())

    @property
    def first(self) -> Component | None:
        """The component that locates the tensor: ``data`` (dense), else ``values``
        (sparse), else the one stored first; None when it has none."""
        comps = self.components
        return (
            comps.get("data")
            or comps.get("values")
            or min(comps.values(), key=lambda c: c.range.start, default=None)
        )

    @property
    def data_offsets(self) -> tuple[int, int]:
        """``[start, end)`` of :attr:`first` as the file's header counts it (see
        ``offset_base``): relative to the data region for safetensors and GGUF, absolute
        for zTensor; ``(0, 0)`` for a tensor with no component."""
        c = self.first
        if c is None:
            return (0, 0)
        return (c.range.start - self.offset_base, c.range.stop - self.offset_base)

    @property
    def encoding(self) -> str:
        """``raw`` or the codec of :attr:`first`."""
        c = self.first
        return c.encoding if c is not None else "raw"

    @property
    def common_dtype(self) -> str:
        """The dtype in one vocabulary for every format: tensorfile's names (``F32``,
        ``BF16``...); for ggml's quantized blocks (GGUF's, zTensor v2's ``gguf.<type>/1``)
        the type's name upper-cased (``Q4_K``); for a type tensorfile does not know (a
        zTensor v2 logical type it has not registered) the file's text as it is, case
        kept, with ``ext:`` before it when it has the form of a name of this vocabulary
        in any case (``[A-Za-z0-9_]+``) or is a known type's name in any vocabulary
        (``float32``; see :func:`extension_name`): two type ids the file tells apart are
        two names here, and no file's text passes for a type tensorfile knows.

        Example:
            >>> TensorInfo("w", dtypes.from_name("U8"), (32,), {}, "quantized", "q8_0").common_dtype
            'Q8_0'
            >>> u8 = Component(ByteRange(0, 4), dtypes.from_name("U8"), logical="F32")
            >>> TensorInfo("w", u8.dtype, (4,), {"data": u8}, dtype_name="F32").common_dtype
            'ext:F32'
        """
        name = self.stored_dtype
        if self.layout == "quantized":  # ggml's blocks: a name from GGUF's table of types
            return name.upper()
        if not self.type_known:
            return extension_name(name, _COMMON_NAMES)
        try:
            return dtypes.from_name(name).name
        except KeyError:  # complex128: a zTensor v2 type safetensors lacks
            return name.upper()

    @property
    def type_known(self) -> bool:
        """Whether tensorfile knows the type the file names (:attr:`stored_dtype`): it is
        :attr:`dtype`. False for a type tensorfile does not know, whose bytes it holds as
        its storage type (a zTensor v2 logical type it has not registered, ``float32`` or
        ``u8`` included: in v2 those are not logical types), and for ggml's blocks
        (``q8_0``, held as ``U8``).

        Example:
            >>> u8 = Component(ByteRange(0, 4), dtypes.from_name("U8"), logical="x.custom/1")
            >>> TensorInfo("w", u8.dtype, (4,), {"data": u8}, dtype_name="x.custom/1").type_known
            False
        """
        name = self.dtype_name
        if name is None:
            return True
        if self.layout == "quantized" or name not in dtypes.names(self.dtype):
            return False
        return all(  # a logical type of that name is one zTensor v2 registered for it
            c.logical != name or dtypes.is_ztensor_v2_type(c.dtype, c.logical)
            for c in self.components.values()
        )

    @property
    def quantization(self) -> str | None:
        """The block type of a quantized tensor in :attr:`common_dtype`'s vocabulary (GGUF's
        ``Q8_0``, ``Q4_K``...; its :attr:`dtype` is ``U8``, the bytes of the blocks); None
        for any other tensor.

        Example:
            >>> TensorInfo("w", dtypes.from_name("U8"), (32,), {}, "quantized", "q8_0").quantization
            'Q8_0'
        """
        return self.common_dtype if self.layout == "quantized" else None

    @property
    def decoded_nbytes(self) -> int:
        """Bytes of the tensor's dense, decoded data, never of its stored encoding: from the
        dtype and shape, or, for a type whose element size tensorfile cannot vouch for (a
        zTensor v2 logical type it does not know, ``complex128``), the decoded lengths the
        file states for its components (their stored bytes where they are raw); GGUF's
        quantized blocks count as stored, their decoded size being unknown.

        Example:
            >>> f64 = dtypes.from_name("F64")
            >>> zstd = Component(ByteRange(64, 80), f64, "zstd", decoded_length=48)
            >>> TensorInfo("c", f64, (3,), {"data": zstd}, dtype_name="x.custom/1").decoded_nbytes
            48
        """
        if self.layout == "quantized":
            return self.nbytes
        if self.dtype_name is not None and not (self.type_known and _known(self.dtype_name)):
            return sum(
                c.range.length if c.decoded_length is None else c.decoded_length
                for c in self.components.values()
            )
        return self.dtype.nbytes(self.numel)


def _known(name: str) -> bool:
    try:
        dtypes.from_name(name)
    except KeyError:
        return False
    return True


class ShardInfo(NamedTuple):
    """One file of a catalog of several files (a sharded checkpoint, a glob)."""

    path: str
    tensor_count: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class Catalog:
    """Everything a format reader learned from a header or manifest.

    Attributes:
        format: the format's name (``"safetensors"``, ``"ztensor"``, ``"gguf"``).
        metadata: the file-level metadata (empty when there is none): text for safetensors
            and zTensor, typed :class:`~tensorfile.formats.gguf.GGUFValue` values for GGUF.
        tensors: the tensors by name, in file order (by offset).
        header_size: bytes of the header or manifest, without length prefixes.
        data_start: absolute offset where the data region starts.
        version: the format version, when the format has one.
        extra: what a format keeps beside (zTensor's manifest offsets, say).
        path: what was read, when the catalog was read by name (a file, an index, a glob).
        shards: the files of a catalog of several files (a sharded checkpoint, a glob), in
            order; None for one file. Each tensor's ``file`` then says which holds it.
        stats: what reading the header(s) cost, per source.
        opened_from: where a file named in ``path`` or ``shards`` is opened again, when its
            name is not that (a URL's shown name hides its credentials and query string).
    """

    format: str
    metadata: Mapping[str, Any]
    tensors: Mapping[str, TensorInfo]
    header_size: int
    data_start: int
    version: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    path: str | None = None
    shards: tuple[ShardInfo, ...] | None = None
    stats: tuple[ReadStats, ...] = field(default=(), compare=False)
    opened_from: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def bytes_read(self) -> int:
        """Bytes read from every source to learn this catalog."""
        return sum(s.bytes_read for s in self.stats)

    def by_name(self) -> list[TensorInfo]:
        """The tensors sorted by name."""
        return sorted(self.tensors.values(), key=_name_of)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def _name_of(t: TensorInfo) -> str:
    return t.name


def merged(path: str, parts: list[Catalog], files: list[str]) -> Catalog:
    """One catalog of the catalogs ``parts``, read from ``files`` (a sharded checkpoint, a
    glob): each tensor's ``file`` says where it is; ``metadata`` is what every file agrees
    on (:func:`agreed`); a tensor in two files, or files of two formats, is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> one = Catalog("safetensors", {"a": "1"}, {}, 10, 18)
        >>> m = merged("*.safetensors", [one, one], ["x.safetensors", "y.safetensors"])
        >>> m.header_size, m.metadata, [s.path for s in m.shards]
        (20, {'a': '1'}, ['x.safetensors', 'y.safetensors'])
    """
    from .errors import InvalidArgumentError

    tensors: dict[str, TensorInfo] = {}
    shards = []
    formats = {p.format for p in parts}
    if len(formats) > 1:
        raise InvalidArgumentError(f"{path}: the files mix formats ({', '.join(sorted(formats))})")
    for part, file in zip(parts, files, strict=True):
        shard = part.path or file
        for t in part.tensors.values():
            if t.name in tensors:
                raise InvalidArgumentError(
                    f"{path}: tensor {t.name!r} is in both {tensors[t.name].file} and {shard}"
                )
            tensors[t.name] = t._replace(file=shard)
        total = sum(t.nbytes for t in part.tensors.values())
        shards.append(ShardInfo(shard, len(part.tensors), total))
    first = parts[0] if parts else None
    return Catalog(
        first.format if first else "safetensors",
        agreed([p.metadata for p in parts]),
        tensors,
        sum(p.header_size for p in parts),
        first.data_start if first else 0,
        first.version if first else None,
        path=path,
        shards=tuple(shards),
        stats=tuple(s for p in parts for s in p.stats),
        opened_from={k: v for p in parts for k, v in p.opened_from.items()},
    )


def agreed(metadata: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The metadata several files share: every key that all of them hold with one value
    (the metadata of a sharded checkpoint's shards, or of a glob's files).

    Example:
        >>> agreed([{"format": "pt", "step": "1"}, {"format": "pt", "step": "2"}])
        {'format': 'pt'}
    """
    if not metadata:
        return {}
    first, rest = metadata[0], metadata[1:]
    missing = object()
    return {k: v for k, v in first.items() if all(m.get(k, missing) == v for m in rest)}
