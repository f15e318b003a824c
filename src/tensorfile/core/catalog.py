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

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .dtypes import DType

__all__ = ["ByteRange", "Catalog", "Component", "TensorInfo"]


class ByteRange(NamedTuple):
    """A half-open range ``[start, stop)`` of absolute byte offsets in a file."""

    start: int
    stop: int

    @property
    def length(self) -> int:
        """Number of bytes in the range."""
        return self.stop - self.start


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
        layout: ``"dense"``, ``"sparse_csr"``, ``"sparse_coo"``, ``"quantized"`` (GGUF's
            block types, stored as bytes) or a format extension.
        dtype_name: the element type as the file names it, when that is not ``dtype.name``
            (zTensor's ``float32``, GGUF's ``q4_k``).
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    components: Mapping[str, Component]
    layout: str = "dense"
    dtype_name: str | None = None

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
    """

    format: str
    metadata: Mapping[str, Any]
    tensors: Mapping[str, TensorInfo]
    header_size: int
    data_start: int
    version: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)
