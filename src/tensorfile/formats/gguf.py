"""Read the header of a GGUF file (llama.cpp's format): version, typed metadata, tensor infos.

Only the header is read, in chunks, and every count and length the file declares is checked
against the bytes that remain before anything is allocated, so a hostile header costs no more
than its own size. Tensor byte lengths come from ggml's block sizes; quantized types whose
layout tensorfile does not know have ``byte_length`` ``None``. Two tensors whose data share
bytes are refused (ggml's loader wants each where the one before it ended).

Example:
    >>> import struct
    >>> def s(t): return struct.pack("<Q", len(t)) + t
    >>> blob = (MAGIC + struct.pack("<IQQ", 3, 1, 1) + s(b"general.name") + struct.pack("<I", 8)
    ...         + s(b"tiny") + s(b"w") + struct.pack("<I", 2) + struct.pack("<QQ", 4, 2)
    ...         + struct.pack("<IQ", 0, 0))
    >>> from tensorfile.sources import MemorySource
    >>> h = read_header(MemorySource(blob + bytes(-len(blob) % 32 + 32)))
    >>> h.version, h.metadata["general.name"].value, h.tensors[0].shape, h.tensors[0].type_name
    (3, 'tiny', (4, 2), 'f32')
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo, first_overlap
from tensorfile.core.errors import GGUFError, SourceError
from tensorfile.core.reader import Reader, brief, names_list
from tensorfile.core.source import Source
from tensorfile.core.values import STRING_SEP, LazyStrings, TypedValue, plain
from tensorfile.formats import GGUF, ggml
from tensorfile.formats.ggml import GGML_TYPES, PLAIN_TYPES, block_type, dequantize

__all__ = [
    "GGML_TYPES",
    "LAZY_STRINGS",
    "MAX_ARRAY_DEPTH",
    "MAX_ARRAY_ITEMS",
    "MAX_HEADER_BYTES",
    "MAX_STRING_BYTES",
    "PLAIN_TYPES",
    "GGUFFileReader",
    "GGUFHeader",
    "GGUFTensor",
    "GGUFValue",
    "block_type",
    "catalog_of",
    "dequantize",
    "open_reader",
    "read_catalog",
    "read_header",
]

MAGIC = GGUF.magic
MAX_DIMS = 8
"""Most dimensions a tensor may have (ggml has 4)."""
MAX_STRING_BYTES = 64 << 20
"""Longest metadata string tensorfile reads (64 MiB): chat templates are kilobytes, a whole
tokenizer JSON a few megabytes."""
MAX_NAME_BYTES = 1 << 16
"""Longest metadata key or tensor name (64 KiB; the spec caps keys at 65,535 bytes and ggml
tensor names at 64)."""
MAX_ARRAY_ITEMS = 1 << 24
"""Most items of one metadata array, and of all of a header's arrays together (16,777,216;
the largest vocabularies have a few hundred thousand tokens and merges)."""
MAX_HEADER_BYTES = 256 << 20
"""Longest header tensorfile reads (256 MiB; a header with a large vocabulary is ~20 MB)."""
_CHUNK = 1 << 20
_MAX_I64 = (1 << 63) - 1

# metadata value type id: (name, struct format or None)
_VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<B"),
    8: ("string", None),
    9: ("array", None),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}


GGUFValue = TypedValue
"""A GGUF metadata value with its type (:class:`tensorfile.core.values.TypedValue`)."""


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One tensor info: shape in the file's order (ggml's, innermost dimension first)."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int

    @property
    def type_name(self) -> str:
        """ggml's name of the type (``f32``, ``q4_k``...), ``unknown_N`` when not known."""
        known = GGML_TYPES.get(self.type_id)
        return known[0] if known else f"unknown_{self.type_id}"

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def byte_length(self) -> int | None:
        """Stored bytes (from the type's block layout); None for an unknown type."""
        known = GGML_TYPES.get(self.type_id)
        if known is None:
            return None
        _, block, size = known
        return -(-self.numel // block) * size


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """Everything before a GGUF file's tensor data."""

    version: int
    metadata: dict[str, GGUFValue]
    tensors: tuple[GGUFTensor, ...]
    header_size: int
    alignment: int
    data_start: int


class _Cursor:
    """Sequential reads over a source, fetched in chunks, bounded by the file size and by
    :data:`MAX_HEADER_BYTES`. A read of a chunk or more is one exact read, never a copy of
    a copy: the memory a header costs is the bytes it really has."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.size = source.size
        self.limit = min(self.size, MAX_HEADER_BYTES)
        self.pos = 0
        self._buf = b""
        self._buf_start = 0

    def remaining(self) -> int:
        """Bytes the header may still take (to the end of the file or the header limit)."""
        return self.limit - self.pos

    def _fail_past(self, n: int, what: str) -> GGUFError:
        if self.pos + n > self.size:
            return GGUFError(
                f"{self.source.name}: {what} needs {n:,} bytes at offset {self.pos:,}, but the "
                f"file ends at {self.size:,}",
                offset=self.pos,
            )
        return GGUFError(
            f"{self.source.name}: {what} at offset {self.pos:,} runs the header past "
            f"tensorfile's limit of {MAX_HEADER_BYTES:,} bytes",
            offset=self.pos,
        )

    def _read(self, offset: int, n: int) -> bytes:
        try:
            return self.source.read(offset, n)
        except SourceError as exc:
            raise GGUFError(f"{self.source.name}: {exc}", offset=offset) from exc

    def take(self, n: int, what: str) -> bytes:
        """The next ``n`` bytes."""
        if n > self.limit - self.pos:
            raise self._fail_past(n, what)
        start = self.pos - self._buf_start
        if start + n <= len(self._buf):
            out = self._buf[start : start + n]
        elif n >= _CHUNK:
            out = self._read(self.pos, n)
            self._buf, self._buf_start = b"", self.pos + n
        else:
            keep = self._buf[start:]
            want = max(n - len(keep), min(_CHUNK, self.limit - self.pos - len(keep)))
            self._buf = keep + self._read(self.pos + len(keep), want)
            self._buf_start = self.pos
            out = self._buf[:n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def raw_string(self, what: str, limit: int = MAX_STRING_BYTES) -> bytes:
        """A GGUF string's bytes (u64 length, then them; at most ``limit``), not decoded."""
        n = self.unpack("<Q", what)
        if n > limit:
            raise GGUFError(
                f"{self.source.name}: {what} claims a {n:,}-byte string at offset "
                f"{self.pos - 8:,}; tensorfile reads strings of at most {limit:,} bytes",
                offset=self.pos - 8,
            )
        return self.take(n, what)

    def string(self, what: str, limit: int = MAX_STRING_BYTES) -> str:
        """A GGUF string (u64 length, UTF-8 bytes) of at most ``limit`` bytes."""
        raw = self.raw_string(what, limit)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.not_utf8(what, self.pos - len(raw) + exc.start) from None

    def not_utf8(self, what: str, offset: int) -> GGUFError:
        """The error for a string that is not UTF-8, its first bad byte at ``offset``."""
        return GGUFError(
            f"{self.source.name}: {what} is not UTF-8 (offset {offset:,})", offset=offset
        )

    def lazy_strings(self, count: int, what: str) -> LazyStrings:
        """``count`` strings in a row, checked (lengths, limits, strict UTF-8) as
        :meth:`strings` checks them, but kept as one text (:class:`LazyStrings`): a
        vocabulary's hundreds of thousands of tokens become a list only when asked for.
        Each length is overwritten, in a copy of the chunk in hand, with bytes no UTF-8 text
        holds, and the whole array is decoded at once."""
        begin = self.pos
        pieces: list[bytes | bytearray] = []  # the array's bytes, each length marked
        unpack_from = _U64.unpack_from
        done = 0
        while done < count:
            buf, start = self._buf, self.pos - self._buf_start
            first, end = start, len(buf)
            marked = bytearray(buf)
            while done < count and start + 8 <= end:
                stop = start + 8 + unpack_from(buf, start)[0]
                if stop > end:
                    break
                marked[start : start + 8] = _MARKER
                start = stop
                done += 1
            pieces.append(marked[first:start])
            self.pos = self._buf_start + start
            if done < count:  # the next string crosses the chunk: read it on its own
                pieces.append(_MARKER + self.raw_string(f"{what}[{done}]"))
                done += 1
        decoded = b"".join(pieces).decode("utf-8", "surrogateescape")
        text = decoded.replace(_ESCAPED_MARKER, STRING_SEP)
        if text.count(STRING_SEP) != count or _ESCAPED.search(text) is not None:
            raise self._first_bad(begin, count, what)  # bytes that are not UTF-8
        return LazyStrings(text[1:], count)

    def _first_bad(self, begin: int, count: int, what: str) -> GGUFError:
        """The error for the first string that is not UTF-8 of the ``count`` strings at
        ``begin`` (:meth:`lazy_strings` found one), read again: as :meth:`strings` says it."""
        data = self._read(begin, self.pos - begin)
        at = 0
        for i in range(count):
            n = _U64.unpack_from(data, at)[0]
            try:
                data[at + 8 : at + 8 + n].decode("utf-8")
            except UnicodeDecodeError as exc:
                return self.not_utf8(f"{what}[{i}]", begin + at + 8 + exc.start)
            at += 8 + n
        raise AssertionError("a string array that decodes failed to")  # pragma: no cover

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` strings in a row (a vocabulary: hundreds of thousands of them), parsed
        straight out of the chunk in hand."""
        out: list[str] = []
        append = out.append
        unpack_from = _U64.unpack_from
        done = 0
        while done < count:
            buf, start = self._buf, self.pos - self._buf_start
            end = len(buf)
            try:
                while done < count and start + 8 <= end:
                    stop = start + 8 + unpack_from(buf, start)[0]
                    if stop > end:
                        break
                    append(buf[start + 8 : stop].decode("utf-8"))
                    start = stop
                    done += 1
            except UnicodeDecodeError:
                pass  # string() reports it, with its offset
            self.pos = self._buf_start + start
            if done < count:  # the next string crosses the chunk, or is bad
                append(self.string(f"{what}[{done}]"))
                done += 1
        return out


_U64 = struct.Struct("<Q")
_MARKER = b"\xff" * 8  # never in UTF-8 text: replaces each length of a lazy string array
_ESCAPED_MARKER = _MARKER.decode("utf-8", "surrogateescape")
_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as surrogateescape says

LAZY_STRINGS = 4096
"""String arrays of this many items or more are kept as one text (:class:`LazyStrings`):
a vocabulary is a list only when asked for (``tensorfile summary`` never asks)."""


MAX_ARRAY_DEPTH = 16
"""Deepest nesting of arrays of arrays tensorfile reads (the spec sets none; files use 1)."""


def _value(cur: _Cursor, type_id: int, key: str, budget: list[int], depth: int = 0) -> GGUFValue:
    kind = _VALUE_TYPES.get(type_id)
    if kind is None:
        raise GGUFError(
            f"{cur.source.name}: metadata {key!r} has unknown value type {type_id}", offset=cur.pos
        )
    name, fmt = kind
    if name == "float32":
        bits = cur.unpack("<I", f"metadata {key!r}")
        return GGUFValue(name, struct.unpack("<f", struct.pack("<I", bits))[0], bits=bits)
    if fmt is not None:
        raw = cur.unpack(fmt, f"metadata {key!r}")
        return GGUFValue(name, bool(raw) if name == "bool" else raw)
    if name == "string":
        return GGUFValue(name, cur.string(f"metadata {key!r}"))
    elem_id = cur.unpack("<I", f"metadata {key!r}")
    count = cur.unpack("<Q", f"metadata {key!r}")
    elem = _VALUE_TYPES.get(elem_id)
    if elem is None:
        raise GGUFError(
            f"{cur.source.name}: metadata {key!r} is an array of unsupported type {elem_id}",
            offset=cur.pos,
        )
    elem_name, elem_fmt = elem
    if count > MAX_ARRAY_ITEMS or count > budget[0]:
        raise GGUFError(
            f"{cur.source.name}: metadata {key!r} declares {count:,} {elem_name} items; "
            f"tensorfile reads arrays of at most {MAX_ARRAY_ITEMS:,} items, and "
            f"{MAX_ARRAY_ITEMS:,} in all the arrays of a header",
            offset=cur.pos,
        )
    budget[0] -= count
    least = struct.calcsize(elem_fmt) if elem_fmt else 12 if elem_name == "array" else 8
    if count * least > cur.remaining():
        raise GGUFError(
            f"{cur.source.name}: metadata {key!r} declares {count:,} {elem_name} items, more "
            f"than the {cur.remaining():,} bytes left can hold",
            offset=cur.pos,
        )
    if elem_name == "array":  # an array of arrays: each item a whole array
        if depth + 1 >= MAX_ARRAY_DEPTH:
            raise GGUFError(
                f"{cur.source.name}: metadata {key!r} nests arrays more than "
                f"{MAX_ARRAY_DEPTH} deep; tensorfile reads no deeper",
                offset=cur.pos,
            )
        inner = tuple(_value(cur, elem_id, key, budget, depth + 1) for _ in range(count))
        return GGUFValue("array", [v.value for v in inner], "array", items=inner)
    bits = None
    if elem_fmt is not None:
        size = struct.calcsize(elem_fmt)
        raw = cur.take(count * size, f"metadata {key!r}")
        items = list(struct.unpack(f"<{count}{elem_fmt[1:]}", raw))
        if elem_name == "bool":
            items = [bool(v) for v in items]
        elif elem_name == "float32":
            bits = list(struct.unpack(f"<{count}I", raw))
    elif count >= LAZY_STRINGS:
        return cur.lazy_strings(count, f"metadata {key!r}")
    else:
        items = cur.strings(count, f"metadata {key!r}")
    return GGUFValue("array", items, elem_name, bits)


def _check_shape(t: GGUFTensor, name: str, at: int) -> None:
    """ggml's rules for a tensor's shape: its element count (zero dimensions aside) is a
    64-bit signed integer, and a row of a block type holds whole blocks (so a tensor of a
    block type has a dimension: with none, ggml's row is one element)."""
    count = 1
    for d in t.shape:
        if d:
            count *= d
    if count > _MAX_I64:
        raise GGUFError(
            f"{name}: tensor {t.name!r} of shape {list(t.shape)} has more elements than ggml's "
            "64-bit count holds" + (" (not counting its zero dimensions)" if 0 in t.shape else ""),
            offset=at,
            tensor=t.name,
        )
    known = GGML_TYPES.get(t.type_id)
    if known is not None and known[1] > 1 and not t.shape:  # (ggml: ne[0] = 1, not a block)
        raise GGUFError(
            f"{name}: tensor {t.name!r} is {known[0]}, whose rows are blocks of {known[1]} "
            "elements, but it has no dimensions",
            offset=at,
            tensor=t.name,
        )
    if known is not None and t.shape and t.shape[0] % known[1]:
        raise GGUFError(
            f"{name}: tensor {t.name!r} is {known[0]}, whose rows are blocks of {known[1]} "
            f"elements, but its rows have {t.shape[0]:,}",
            offset=at,
            tensor=t.name,
        )


def read_header(source: Source) -> GGUFHeader:
    """Read and check the header of the GGUF file in ``source``."""
    cur = _Cursor(source)
    name = source.name
    magic = cur.take(4, "the magic")
    if magic != MAGIC:
        raise GGUFError(f"{name}: not a GGUF file (magic {magic!r})", offset=0)
    version = cur.unpack("<I", "the version")
    if version not in (2, 3):
        raise GGUFError(f"{name}: GGUF version {version} is not supported (2 and 3 are)", offset=4)
    n_tensors = cur.unpack("<Q", "the tensor count")
    n_kv = cur.unpack("<Q", "the metadata count")
    # each key-value pair takes at least 13 bytes, each tensor info at least 24
    if n_kv * 13 + n_tensors * 24 > cur.remaining():
        raise GGUFError(
            f"{name}: the header declares {n_kv:,} metadata entries and {n_tensors:,} tensors, "
            f"more than the {cur.remaining():,} bytes of the file can hold",
            offset=8,
        )
    metadata: dict[str, GGUFValue] = {}
    budget = [MAX_ARRAY_ITEMS]  # array items left for the whole header
    for _ in range(n_kv):
        key = cur.string("a metadata key", MAX_NAME_BYTES)
        if key in metadata:
            raise GGUFError(f"{name}: metadata key {key!r} appears twice", offset=cur.pos)
        metadata[key] = _value(cur, cur.unpack("<I", f"metadata {key!r}"), key, budget)
    tensors: list[GGUFTensor] = []
    seen: set[str] = set()
    for _ in range(n_tensors):
        tname = cur.string("a tensor name", MAX_NAME_BYTES)
        if tname in seen:
            raise GGUFError(f"{name}: tensor {tname!r} appears twice", offset=cur.pos)
        seen.add(tname)
        n_dims = cur.unpack("<I", f"tensor {tname!r}")
        if n_dims > MAX_DIMS:
            raise GGUFError(
                f"{name}: tensor {tname!r} has {n_dims} dimensions (at most {MAX_DIMS})",
                offset=cur.pos,
            )
        at = cur.pos
        shape = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"tensor {tname!r}"))
        type_id = cur.unpack("<I", f"tensor {tname!r}")
        offset = cur.unpack("<Q", f"tensor {tname!r}")
        tensor = GGUFTensor(tname, tuple(shape), type_id, offset)
        _check_shape(tensor, name, at)
        tensors.append(tensor)
    align_value = metadata.get("general.alignment")
    alignment = 32
    if align_value is not None:
        if align_value.type != "uint32" or align_value.value <= 0 or align_value.value % 8:
            raise GGUFError(
                f"{name}: general.alignment {brief(align_value.value)} is not usable (a uint32, "
                "a positive multiple of 8)"
            )
        alignment = int(align_value.value)
    header_size = cur.pos
    data_start = -(-header_size // alignment) * alignment
    for t in tensors:
        nbytes = t.byte_length or 0
        if t.offset % alignment or data_start + t.offset + nbytes > source.size:
            raise GGUFError(
                f"{name}: tensor {t.name!r} at data offset {t.offset:,} ({nbytes:,} bytes) is "
                f"misaligned or runs past the end of the {source.size:,}-byte file",
                tensor=t.name,
            )
    _refuse_overlaps(tensors, name, data_start)
    return GGUFHeader(version, metadata, tuple(tensors), header_size, alignment, data_start)


def _refuse_overlaps(tensors: list[GGUFTensor], name: str, data_start: int) -> None:
    """Refuse two tensors that share data: ``k`` at one offset would be ``k`` times it."""
    found = first_overlap((t.offset, t.offset + (t.byte_length or 0), t) for t in tensors)
    if found is not None:
        (s0, e0, t0), (s1, _e1, t1) = found
        raise GGUFError(
            f"{name}: tensors {brief(t0.name)} (data offset {s0:,} to {e0:,}) and "
            f"{brief(t1.name)} (from data offset {s1:,}) overlap; each must have its own data",
            offset=data_start + s1,
            tensor=t1.name,
        )


def catalog_of(h: GGUFHeader) -> Catalog:
    """The format-neutral catalog of a GGUF header: shapes row-major (the reverse of ggml's
    order), plain types as their dtype, quantized blocks as bytes (layout ``quantized``)."""
    tensors: dict[str, TensorInfo] = {}
    for t in sorted(h.tensors, key=lambda t: t.offset):
        plain = PLAIN_TYPES.get(t.type_name)
        dt = dtypes.from_safetensors(plain or "U8")
        start = h.data_start + t.offset
        data = Component(ByteRange(start, start + (t.byte_length or 0)), dt)
        layout = "dense" if plain else "quantized"
        tensors[t.name] = TensorInfo(
            t.name, dt, t.shape[::-1], {"data": data}, layout, t.type_name,
            offset_base=h.data_start,
        )  # fmt: skip
    return Catalog(
        format="gguf",
        metadata=h.metadata,
        tensors=tensors,
        header_size=h.header_size,
        data_start=h.data_start,
        version=str(h.version),
    )


def read_catalog(source: Source) -> Catalog:
    """The catalog of the GGUF file in ``source`` (the registry's hook)."""
    return catalog_of(read_header(source))


class GGUFFileReader(Reader):
    """A read-only reader over a GGUF file (what ``tensorfile.open`` returns for one).

    :attr:`metadata` gives plain Python values, as ``gguf.GGUFReader``'s
    ``field.contents()`` does (text, int, float, bool, lists of them), except that a float32
    is the shortest float that reads back as the same float32 (``1e-12``, not
    ``9.999999960041972e-13``) and an array of arrays is a list of lists (``contents()``
    flattens it). :attr:`typed_metadata` gives each value with its stored type, a
    :class:`GGUFValue` (``.type``, ``.value``, ``.element_type``, float32 ``.bits``).

    Example:
        >>> import struct
        >>> from tensorfile.sources import MemorySource
        >>> def s(t): return struct.pack("<Q", len(t)) + t
        >>> head = (MAGIC + struct.pack("<IQQ", 3, 0, 1) + s(b"eps") + struct.pack("<I", 6)
        ...         + struct.pack("<f", 1e-12))
        >>> r = open_reader(MemorySource(head + bytes(-len(head) % 32)))
        >>> r.metadata, r.typed_metadata["eps"].type
        ({'eps': 1e-12}, 'float32')
    """

    _plain: dict[str, Any] | None = None

    def get_tensor(self, name: str, *, dequantize: bool = False) -> Any:
        """An owned numpy copy of ``name``. A quantized tensor (``info(name).quantization``:
        ``Q8_0``, ``Q4_K``...) is refused unless ``dequantize`` is true; it is then
        dequantized to float32 (see :func:`tensorfile.formats.ggml.dequantize`). Plain
        tensors are read as they are either way.

        Example:
            >>> import struct
            >>> import numpy as np
            >>> from tensorfile.sources import MemorySource
            >>> def s(t): return struct.pack("<Q", len(t)) + t
            >>> head = (MAGIC + struct.pack("<IQQ", 3, 1, 0) + s(b"q") + struct.pack("<I", 1)
            ...         + struct.pack("<Q", 32) + struct.pack("<IQ", 8, 0))   # q8_0
            >>> block = np.float16(0.5).tobytes() + bytes(range(32))
            >>> r = open_reader(MemorySource(head + bytes(-len(head) % 32) + block))
            >>> r.info("q").quantization, r.get_tensor("q", dequantize=True)[:3].tolist()
            ('Q8_0', [0.0, 0.5, 1.0])
        """
        info = self.info(name)
        if dequantize and info.layout == "quantized":
            rng = info.byte_range
            raw = np.frombuffer(self.source.read(rng.start, rng.length), np.uint8)
            return ggml.dequantize(raw, info.stored_dtype, info.shape, name)
        return super().get_tensor(name)

    def get_tensors(
        self, names: Iterable[str] | None = None, *, dequantize: bool = False
    ) -> dict[str, Any]:
        """Owned numpy copies of ``names`` (all tensors by default); quantized ones as
        :meth:`get_tensor` gives them (refused unless ``dequantize`` is true)."""
        names = self.keys() if names is None else names_list(names)
        plain = [n for n in names if not dequantize or self.info(n).layout != "quantized"]
        got = super().get_tensors(plain)
        return {n: got[n] if n in got else self.get_tensor(n, dequantize=True) for n in names}

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The metadata as plain Python values (see the class docstring)."""
        if self._plain is None:
            self._plain = {k: plain(v) for k, v in self.catalog.metadata.items()}
        return self._plain


def open_reader(source: Source, *, verify: bool | None = None) -> Reader:
    """A read-only reader over a GGUF file: plain tensors as arrays; quantized ones
    dequantized to float32 on request (``get_tensor(name, dequantize=True)``).

    Example:
        >>> import struct
        >>> from tensorfile.sources import MemorySource
        >>> def s(t): return struct.pack("<Q", len(t)) + t
        >>> head = (MAGIC + struct.pack("<IQQ", 3, 1, 0) + s(b"w") + struct.pack("<I", 2)
        ...         + struct.pack("<QQ", 3, 2) + struct.pack("<IQ", 0, 0))
        >>> pad = bytes(-len(head) % 32)
        >>> data = struct.pack("<6f", *range(6))
        >>> open_reader(MemorySource(head + pad + data)).get_tensor("w").tolist()
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    return GGUFFileReader(source, read_catalog(source))
