"""Parse and validate safetensors headers (the reading side).

Layout: an 8-byte little-endian length N, then N bytes of UTF-8 JSON (an object that begins
with ``{`` and may be padded with spaces), then the data region.

Validation applies every rule of the reference implementation, each with its own error
class, plus the spec's MUSTs the reference skips (duplicate names, leading ``{``). It costs
time and memory in proportion to the header bytes actually present, never to sizes the
header merely claims.

Speed: a 100,000-tensor header is ~9 MB of JSON. Building a dict per tensor would cost more
than the reference's whole open, so the parser (1) splits the top-level object into raw
values (``msgspec.Raw``), (2) decodes all tensor entries at once into small typed structs
whose types msgspec checks in C, and (3) checks offsets with numpy. The cyclic garbage
collector is paused while the objects are built; it would otherwise rescan them repeatedly.

Headers are encoded by :mod:`tensorfile.formats.safetensors._encode`.

Example:
    >>> blob = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    >>> h = parse_header(blob, N_LEN + len(blob) + 8)
    >>> h.names, h.info(0)[1:], h.data_start
    (['w'], ((2,), 0, 8), 62)
"""

from __future__ import annotations

import gc
import json
import math
import re
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import msgspec
import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import (
    DuplicateTensorError,
    HeaderEncodingError,
    HeaderSyntaxError,
    HeaderTooLargeError,
    HeaderTooSmallError,
    IncompleteBufferError,
    InvalidHeaderLengthError,
    InvalidMetadataError,
    InvalidOffsetsError,
    InvalidTensorEntryError,
    MisalignedSubByteError,
    TensorSizeMismatchError,
    UnknownDtypeError,
    ValidationOverflowError,
)
from tensorfile.core.reader import brief
from tensorfile.core.slicing import shape_text
from tensorfile.formats.safetensors._numbers import (
    OutOfRange,
    exact_int,
    finite,
    json_int,
    json_type,
    no_number,
)

__all__ = [
    "MAX_HEADER_SIZE",
    "MAX_SIZE",
    "META_KEY",
    "N_LEN",
    "Header",
    "parse_header",
    "parse_header_length",
]

MAX_HEADER_SIZE = 100_000_000
"""Largest header the reference accepts (bytes)."""

MAX_SIZE = 2**48 - 1
"""Largest dimension or offset the JSON schema allows (``size_t``: 48 bits)."""

N_LEN = 8
"""Bytes of the little-endian header length that starts every file."""

META_KEY = "__metadata__"
"""The reserved top-level key of the file's string metadata."""

_U64_MAX = 2**64 - 1
_WHITESPACE = b" \t\n\r"

_Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_SIZE)]


class _Entry(msgspec.Struct, gc=False):
    """One tensor entry as the JSON has it (unknown fields are ignored, as the reference does)."""

    dtype: str
    shape: list[_Size]
    data_offsets: tuple[_Size, _Size]


_RAW_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENTRIES_DECODER = msgspec.json.Decoder(list[_Entry])
_BITS: dict[str, int] = {d.name: d.bits for d in dtypes.ALL}
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_AT_PATH = re.compile(r"^(.*) - at `\$\[(\d+)\](.*)`$", re.S)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while many small objects are built (they hold no cycles)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Header:
    """A validated safetensors header.

    Attributes:
        header_size: N, the declared header length (JSON plus padding).
        metadata: the ``__metadata__`` map, or ``None`` when the header has none.
        names: tensor names in the order the JSON lists them.
        order: positions into ``names``, sorted by data offset (file order).
        data_len: bytes of the data region.
    """

    __slots__ = ("_entries", "_index", "data_len", "header_size", "metadata", "names", "order")

    def __init__(
        self,
        header_size: int,
        metadata: dict[str, str] | None,
        names: list[str],
        entries: list[_Entry],
        order: Sequence[int],
        data_len: int,
    ) -> None:
        self.header_size = header_size
        self.metadata = metadata
        self.names = names
        self._entries = entries
        self.order = order
        self.data_len = data_len
        self._index: dict[str, int] | None = None

    @property
    def data_start(self) -> int:
        """Absolute offset of the data region."""
        return N_LEN + self.header_size

    def __len__(self) -> int:
        return len(self.names)

    def position(self, name: str) -> int:
        """Position of ``name`` in :attr:`names`; ``KeyError`` if absent."""
        if self._index is None:
            self._index = dict(zip(self.names, range(len(self.names)), strict=True))
        return self._index[name]

    def __contains__(self, name: object) -> bool:
        try:
            self.position(name)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True

    def info(self, pos: int) -> tuple[DType, tuple[int, ...], int, int]:
        """``(dtype, shape, start, end)`` of the tensor at ``pos``; offsets are data-relative."""
        e = self._entries[pos]
        return (
            dtypes.from_safetensors(e.dtype),
            tuple(e.shape),
            e.data_offsets[0],
            e.data_offsets[1],
        )

    def offset_names(self) -> list[str]:
        """Tensor names in file order."""
        names = self.names
        return [names[i] for i in self.order]


def parse_header_length(prefix: bytes, file_size: int) -> int:
    """Check the 8-byte length prefix against the file size and return N.

    Example:
        >>> parse_header_length((8).to_bytes(8, "little"), 16)
        8
    """
    if file_size < N_LEN or len(prefix) < N_LEN:
        raise HeaderTooSmallError(
            f"file is {file_size} bytes long, shorter than the 8-byte header length prefix",
            offset=0,
        )
    (n,) = struct.unpack("<Q", prefix[:N_LEN])
    if n > MAX_HEADER_SIZE:
        raise HeaderTooLargeError(
            f"header length {n} (bytes 0-7) is over the {MAX_HEADER_SIZE}-byte limit", offset=0
        )
    if N_LEN + n > file_size:
        raise InvalidHeaderLengthError(
            f"header length {n} (bytes 0-7) runs past the end of the {file_size}-byte file",
            offset=0,
        )
    return int(n)


def parse_header(data: bytes, file_size: int) -> Header:
    """Parse and validate the N header bytes of a ``file_size``-byte safetensors file.

    Raises a subclass of :class:`~tensorfile.errors.SafetensorError` naming the rule,
    the tensor and the byte offset.
    """
    if data[:1] != b"{":
        shown = data[:1].hex() or "nothing"
        raise HeaderSyntaxError(
            f"header must begin with '{{' (byte 8), found 0x{shown}"
            if data
            else "header is empty: it must be a JSON object beginning with '{' (byte 8)",
            offset=N_LEN,
        )
    _check_utf8(data)
    with _gc_paused():
        top = _decode_top(data)
        names_all = list(top)
        raws_all = list(top.values())
        _check_unique(data, names_all, raws_all)
        meta_raw = top.pop(META_KEY, None)
        metadata = None if meta_raw is None else _decode_metadata(data, bytes(meta_raw))
        names = names_all if meta_raw is None else list(top)
        raws = raws_all if meta_raw is None else list(top.values())
        entries = _decode_entries(data, names, raws)
        order, data_len = _check_entries(data, names, entries)
    if N_LEN + len(data) + data_len != file_size:
        room = file_size - N_LEN - len(data)  # bytes the file has for tensor data
        exc = IncompleteBufferError(
            f"tensor data ends at byte {N_LEN + len(data) + data_len} of the file, but the file "
            f"is {file_size} bytes long: the last tensor must end exactly at the end of file",
            offset=N_LEN + len(data) + data_len,
        )
        past = [(e.data_offsets, n) for n, e in zip(names, entries, strict=True)
                if e.data_offsets[1] > room]  # fmt: skip
        exc.past_end = tuple(n for _, n in sorted(past))  # in file order: the cut first
        raise exc
    return Header(len(data), metadata, names, entries, order, data_len)


def _check_utf8(data: bytes) -> None:
    """Reject invalid UTF-8 anywhere in the header, with the file offset of the first bad byte."""
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderEncodingError(
            f"header is not valid UTF-8 at byte {N_LEN + exc.start}: {exc.reason}",
            offset=N_LEN + exc.start,
        ) from exc


def _decode_top(data: bytes) -> dict[str, msgspec.Raw]:
    try:
        return _RAW_DECODER.decode(data)
    except RecursionError as exc:
        raise HeaderSyntaxError("header JSON is nested too deeply") from exc
    except msgspec.ValidationError as exc:
        raise HeaderSyntaxError(f"header is not a JSON object: {_tidy(str(exc))}") from exc
    except msgspec.DecodeError as exc:
        msg, offset = _json_position(str(exc))
        raise HeaderSyntaxError(f"header is not valid JSON: {msg}", offset=offset) from exc


def _json_position(message: str) -> tuple[str, int | None]:
    """Rewrite msgspec's ``(byte k)`` of the header as an offset in the file."""
    m = _BYTE_POS.search(message)
    if not m:
        return _tidy(message), None
    pos = int(m.group(1))
    if "trailing characters" in message:
        pos -= 1  # msgspec reports the byte after the first trailing character
    offset = N_LEN + pos
    return _tidy(_BYTE_POS.sub(f"(at byte {offset} of the file)", message)), offset


def _tidy(message: str) -> str:
    return message.replace("`", "")


def _check_unique(data: bytes, names: list[str], raws: list[msgspec.Raw]) -> None:
    """Reject duplicate top-level keys (JSON decoders silently keep the last one).

    Fast path: when the header is compact JSON, its length equals the re-encoded keys plus
    the raw values plus separators exactly; a dropped duplicate would leave bytes missing.
    Headers with whitespace or escapes take the exact (slower) path.
    """
    try:
        encoded_keys = msgspec.json.encode(names)
    except UnicodeEncodeError as exc:  # a lone surrogate escape, \ud800
        raise HeaderEncodingError(
            "header has a name that is not valid Unicode (a lone surrogate escape)"
        ) from exc
    if names:
        accounted = len(encoded_keys) + len(b",".join(raws)) + 1
    else:
        accounted = 2
    if accounted == len(data.rstrip(_WHITESPACE)):
        return
    dup = _first_duplicate_key(data)
    if dup is not None:
        raise DuplicateTensorError(
            f"tensor name {dup!r} appears more than once in the header; names must be unique",
            tensor=dup,
            offset=_key_offset(data, dup),
        )


def _first_duplicate_key(data: bytes) -> str | None:
    """The first repeated key of the top-level object (exact, slower path)."""
    calls: list[str | None] = []

    def hook(pairs: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        dup = None
        for key, _ in pairs:
            if key in seen and dup is None:
                dup = key
            seen.add(key)
        calls.append(dup)

    try:
        # already known to be valid JSON; numbers are not needed (and one of over 4,300
        # digits would make int() raise)
        json.loads(data, object_pairs_hook=hook, parse_int=no_number, parse_float=no_number)
    except RecursionError as exc:
        raise HeaderSyntaxError("header JSON is nested too deeply") from exc
    return calls[-1] if calls else None


def _key_offset(data: bytes, name: str) -> int | None:
    """File offset of ``name``'s entry (a metadata key of the same name maps to a string)."""
    key = msgspec.json.encode(name)
    pos = data.find(key + b":{")
    if pos < 0:
        pos = data.find(key + b":")
    return None if pos < 0 else N_LEN + pos


def _decode_metadata(data: bytes, raw: bytes) -> dict[str, str] | None:
    offset = _key_offset(data, META_KEY)
    pairs_dup: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    pairs_dup.append(key)
                seen.add(key)
        return result

    try:
        value = json.loads(raw, object_pairs_hook=hook, parse_int=json_int)
    except RecursionError as exc:
        raise InvalidMetadataError("__metadata__ is nested too deeply", offset=offset) from exc
    if value is None:  # the reference reads "__metadata__": null as no metadata
        return None
    if not isinstance(value, dict):
        raise InvalidMetadataError(
            f"__metadata__ must be a map of strings to strings, found {json_type(value)}",
            offset=offset,
        )
    if pairs_dup:
        raise InvalidMetadataError(
            f"__metadata__ has the key {brief(pairs_dup[0])} more than once", offset=offset
        )
    for key, val in value.items():
        if not isinstance(val, str):
            raise InvalidMetadataError(
                f"__metadata__[{brief(key)}] must be a string, found {json_type(val)}: "
                f"metadata is a map of strings to strings",
                offset=offset,
            )
    return value


def _decode_entries(data: bytes, names: list[str], raws: list[msgspec.Raw]) -> list[_Entry]:
    if not names:
        return []
    blob = b"[" + b",".join(raws) + b"]"
    try:
        entries = _ENTRIES_DECODER.decode(blob)
        if msgspec.json.encode(entries) != blob:
            # Not the canonical form (extra fields, whitespace, escapes, a repeated field, -0):
            # check each entry exactly. Canonical headers, those every writer makes, skip this.
            _check_entries_exactly(data, names, raws)
        return entries
    except RecursionError as exc:
        raise HeaderSyntaxError("header JSON is nested too deeply") from exc
    except msgspec.ValidationError as exc:
        m = _AT_PATH.match(str(exc))
        if not m:
            raise InvalidTensorEntryError(f"invalid tensor entry: {_tidy(str(exc))}") from exc
        what, pos, path = _tidy(m.group(1)), int(m.group(2)), m.group(3).lstrip(".")
        name = names[pos]
        where = f"tensor {name!r}"
        if not path:
            if what.startswith("Object missing required field"):
                field = what.rsplit(" ", 1)[-1]
                detail = f"has no {field!r}: every tensor needs dtype, shape and data_offsets"
            else:
                detail = f"must be an object with dtype, shape and data_offsets ({what})"
        else:
            detail = f"{path}: {what}"
            if path.startswith("shape") or path.startswith("data_offsets"):
                if "<=" in what:
                    detail += f" (sizes and offsets are limited to {MAX_SIZE}, 48 bits)"
        raise InvalidTensorEntryError(
            f"{where} {detail}", tensor=name, offset=_key_offset(data, name)
        ) from exc


def _check_entries_exactly(data: bytes, names: list[str], raws: list[msgspec.Raw]) -> None:
    """Reject repeated fields and ``-0`` sizes, which typed decoding cannot see."""
    for name, raw in zip(names, raws, strict=True):
        repeated: list[str] = []

        def hook(pairs: list[tuple[str, Any]], repeated: list[str] = repeated) -> dict[str, Any]:
            result = dict(pairs)
            if len(result) != len(pairs) and not repeated:
                seen: set[str] = set()
                for key, _ in pairs:
                    if key in seen:
                        repeated.append(key)
                        break
                    seen.add(key)
            return result

        try:
            entry = json.loads(
                bytes(raw), object_pairs_hook=hook, parse_int=exact_int, parse_float=finite
            )
        except OutOfRange as exc:
            number = str(exc)
            shown = (
                number if len(number) <= 24 else f"{number[:12]}... ({len(number):,} characters)"
            )
            raise HeaderSyntaxError(
                f"tensor {name!r} has the number {shown}, out of the range of a JSON number "
                "(a double)",
                tensor=name,
                offset=_key_offset(data, name),
            ) from None
        if repeated:
            raise InvalidTensorEntryError(
                f"tensor {name!r} has the field {repeated[0]!r} more than once",
                tensor=name,
                offset=_key_offset(data, name),
            )
        for field in ("shape", "data_offsets"):
            if any(isinstance(v, float) for v in entry[field]):
                raise InvalidTensorEntryError(
                    f"tensor {name!r} {field}: -0 is not a size (a negative zero is a float)",
                    tensor=name,
                    offset=_key_offset(data, name),
                )


def _check_entries(
    data: bytes, names: list[str], entries: list[_Entry]
) -> tuple[Sequence[int], int]:
    """Check dtypes, sizes and offsets; return the file order and the data length."""
    n = len(entries)
    if n == 0:
        return [], 0
    bits_of = _BITS
    prod = math.prod
    bits = [bits_of.get(e.dtype, 0) for e in entries]
    if 0 in bits:
        i = bits.index(0)
        raise UnknownDtypeError(
            f"tensor {names[i]!r} has the unknown dtype {entries[i].dtype!r}; known dtypes: "
            + ", ".join(d.name for d in dtypes.ALL),
            tensor=names[i],
            offset=_key_offset(data, names[i]),
        )
    nbits = [
        (prod(e.shape) if len(e.shape) <= 8 else _long_prod(e.shape)) * b
        for e, b in zip(entries, bits, strict=True)
    ]
    starts = np.fromiter((e.data_offsets[0] for e in entries), dtype=np.int64, count=n)
    ends = np.fromiter((e.data_offsets[1] for e in entries), dtype=np.int64, count=n)
    order = np.lexsort((ends, starts))
    _check_offsets(data, names, order, starts, ends)
    if max(nbits) > _U64_MAX:
        i = next(k for k, v in enumerate(nbits) if v > _U64_MAX)
        raise ValidationOverflowError(
            f"tensor {names[i]!r}: shape {shape_text(entries[i].shape)} x {bits[i]} bits per "
            "element does not fit in 64 bits",
            tensor=names[i],
            offset=_key_offset(data, names[i]),
        )
    nbits_arr = np.array(nbits, dtype=np.uint64)
    for i in np.flatnonzero(nbits_arr == 0).tolist():
        # an empty tensor: its other dimensions must still multiply within 64 bits, so that
        # no later product over a shape (of a million huge dimensions) is a huge number
        if _long_prod([d for d in entries[i].shape if d]) * bits[i] > _U64_MAX:
            raise ValidationOverflowError(
                f"tensor {names[i]!r}: a {entries[i].dtype} shape of {len(entries[i].shape):,} "
                "dimensions whose non-zero dimensions x bits per element do not fit in 64 bits "
                "(tensorfile's rule: the tensor is empty, but its shape is not usable)",
                tensor=names[i],
                offset=_key_offset(data, names[i]),
            )
    odd = np.flatnonzero(nbits_arr % 8)
    if odd.size:
        i = int(odd[0])
        raise MisalignedSubByteError(
            f"tensor {names[i]!r}: {entries[i].dtype} shape {shape_text(entries[i].shape)} has "
            f"{nbits[i]} bits, not a whole number of bytes",
            tensor=names[i],
            offset=_key_offset(data, names[i]),
        )
    wrong = np.flatnonzero((nbits_arr // 8).astype(np.int64) != ends - starts)
    if wrong.size:
        i = int(wrong[0])
        raise TensorSizeMismatchError(
            f"tensor {names[i]!r}: {entries[i].dtype} shape {shape_text(entries[i].shape)} needs "
            f"{nbits[i] // 8} bytes but data_offsets {list(entries[i].data_offsets)} span "
            f"{int(ends[i] - starts[i])}",
            tensor=names[i],
            offset=_key_offset(data, names[i]),
        )
    return order.tolist(), int(ends[order[-1]])


def _long_prod(shape: list[int]) -> int:
    """Element count of a many-dimensional shape, stopping early once it cannot fit 64 bits.

    A header can list a million dimensions; multiplying them all out as big integers would
    take quadratic time, so the product stops at the first overflow (unless a dimension is
    zero, which makes the tensor empty).
    """
    if 0 in shape:
        return 0
    p = 1
    for d in shape:
        p *= d
        if p > _U64_MAX:
            return _U64_MAX + 1
    return p


def _check_offsets(
    data: bytes,
    names: list[str],
    order: np.ndarray[Any, np.dtype[np.intp]],
    starts: np.ndarray[Any, np.dtype[np.int64]],
    ends: np.ndarray[Any, np.dtype[np.int64]],
) -> None:
    s = starts[order]
    e = ends[order]
    backwards = np.flatnonzero(e < s)
    if backwards.size:
        i = int(order[backwards[0]])
        _offset_error(data, names[i], f"data_offsets [{starts[i]}, {ends[i]}] run backwards")
    if s[0] != 0:
        i = int(order[0])
        _offset_error(
            data,
            names[i],
            f"the first tensor starts at {s[0]}, not 0: the data region has a "
            f"{s[0]}-byte hole at its start",
        )
    bad = np.flatnonzero(s[1:] != e[:-1])
    if bad.size:
        k = int(bad[0])
        prev, cur = int(order[k]), int(order[k + 1])
        gap = int(s[k + 1] - e[k])
        kind = f"leaves a {gap}-byte hole after" if gap > 0 else f"overlaps by {-gap} bytes"
        _offset_error(
            data,
            names[cur],
            f"data_offsets [{starts[cur]}, {ends[cur]}] {kind} tensor {names[prev]!r} "
            f"[{starts[prev]}, {ends[prev]}]",
        )


def _offset_error(data: bytes, name: str, detail: str) -> None:
    raise InvalidOffsetsError(
        f"tensor {name!r}: {detail}", tensor=name, offset=_key_offset(data, name)
    )
