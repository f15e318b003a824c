"""The fast path of zTensor v1.0 manifest parsing: the common shape of a manifest, parsed and
validated for all tensors at once.

A 100,000-tensor manifest is ~10 MB of CBOR; decoding it into dicts and checking each entry in
Python costs seconds. Every zTensor writer (the reference and tensorfile) writes each tensor
entry in one fixed form: ``{"dtype", "shape", "format": "dense", "components": {"data":
{"offset", "length"[, "encoding"][, "digest"]}}}``. Here one regular expression splits the
tensors map into the variable fields of such entries (name, dtype, shape, offset, length,
encoding, digest) in C; numpy then decodes the integers and checks every rule of the precise
path (:func:`~._manifest.parse_manifest`) for all entries at once: lengths of
the CBOR text heads, component area, alignment, sizes against shape × dtype, zstd
plausibility, overlaps, duplicate names. ``TensorInfo`` records are built on first use.

The fast path never raises and never warns: anything it does not recognise, or any rule
broken, returns None and the precise path parses the manifest again and reports exactly what
is wrong (or warns), so errors and warnings are the same either way.

Example:
    >>> from tensorfile.formats.ztensor.v1._manifest import encode_manifest
    >>> blob = encode_manifest({"w": {"dtype": "float32", "shape": [2], "format": "dense",
    ...     "components": {"data": {"offset": 64, "length": 8}}}}, {}, "doc")
    >>> cat = fast_catalog(blob, manifest_start=72)
    >>> list(cat.tensors), cat.tensors["w"].data.range
    (['w'], ByteRange(start=64, stop=72))
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tensorfile.core import dtypes
from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
from tensorfile.core.dtypes import DType
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor._codecs import MAX_ZSTD_RATIO

__all__ = ["fast_catalog"]

_MAX_U64 = (1 << 64) - 1
_MAGIC_SIZE = 8
_ALIGNMENT = 64

_UINT = rb"(?:[\x00-\x17]|\x18.|\x19..|\x1a.{4}|\x1b.{8})"
# One tensor entry, in the form every writer produces. Groups: the name's text head, the
# name, the dtype text and shape array, the data component map; the last alternative takes
# the rest of the bytes, so the scan never searches (linear time). A name is first taken to
# be free of byte 0xa4 (fast); when that fails, the lazy form is tried.
_ENTRY_TEXT = (
    rb"([\x60-\x77]|\x78.)(NAME)"
    rb"\xa4edtype([\x61-\x77][a-z0-9_]{1,23}?eshape[\x80-\x97]" + _UINT + rb"{0,23})"
    rb"fformatedensejcomponents\xa1ddata"
    rb"([\xa2-\xa4]foffset" + _UINT + rb"flength" + _UINT + rb"(?:hencoding(?:dzstd|craw))?"
    rb"(?:fdigest(?:qcrc32c:0x[0-9A-Fa-f]{8}|xGsha256:[0-9a-fA-F]{64}))?)"
    rb"|(.+)"
)
_ENTRIES = (
    re.compile(_ENTRY_TEXT.replace(b"NAME", rb"[^\xa4]{0,255}"), re.S),
    re.compile(_ENTRY_TEXT.replace(b"NAME", rb".{0,255}?"), re.S),
)
_FIXED = len(b"\xa4edtype") + len(b"fformatedensejcomponents\xa1ddata")
_WIDTH = np.ones(256, np.int64)
_WIDTH[24:28] = (2, 3, 5, 9)
_DIGEST_PREFIX = len(b"fdigest")


class _Entries:
    """The columns of the tensor entries, in manifest order."""

    __slots__ = ("combos", "comps", "digest_at", "kinds", "lengths", "names", "offsets", "zstd")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.combos: list[tuple[DType, str, tuple[int, ...]]] = []
        self.kinds: np.ndarray[Any, Any] = np.empty(0, np.intp)
        self.offsets: np.ndarray[Any, Any] = np.empty(0, np.uint64)
        self.lengths: np.ndarray[Any, Any] = np.empty(0, np.uint64)
        self.zstd: np.ndarray[Any, Any] = np.empty(0, bool)
        self.digest_at: np.ndarray[Any, Any] = np.empty(0, np.int64)
        self.comps: tuple[bytes, ...] = ()


class _Tensors(Mapping[str, TensorInfo]):
    """The manifest's tensors as TensorInfo records, built on first access (file order)."""

    __slots__ = ("_cache", "_entries", "_index", "_order")

    def __init__(self, entries: _Entries, order: list[int] | None) -> None:
        """``order``: manifest positions in file order; None when that is manifest order."""
        self._entries = entries
        names = entries.names
        if order is None:
            self._order, self._index = names, dict(zip(names, range(len(names)), strict=True))
        else:
            self._order = [names[i] for i in order]
            self._index = dict(zip(self._order, order, strict=True))
        self._cache: dict[str, TensorInfo] = {}

    def _build(self, name: str, pos: int) -> TensorInfo:
        e = self._entries
        dt, dtype_name, shape = e.combos[int(e.kinds[pos])]
        start = int(e.offsets[pos])
        at = int(e.digest_at[pos])
        digest = None
        if at >= 0:  # "fdigest", then a text head of one byte (crc32c) or two (sha256)
            text = e.comps[pos][at + _DIGEST_PREFIX :]
            digest = text[2 if text[0] == 0x78 else 1 :].decode("ascii")
        comp = Component(
            ByteRange(start, start + int(e.lengths[pos])),
            dt,
            "zstd" if e.zstd[pos] else "raw",
            digest,
        )
        info = TensorInfo(name, dt, shape, {"data": comp}, "dense", dtype_name)
        self._cache[name] = info
        return info

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._cache.get(name)
        return info if info is not None else self._build(name, self._index[name])

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def _lengths(column: tuple[bytes, ...]) -> np.ndarray[Any, Any]:
    return np.fromiter(map(len, column), np.int64, len(column))


def _uints(buf: np.ndarray[Any, Any], at: np.ndarray[Any, Any]) -> tuple[Any, Any]:
    """(values, widths) of the CBOR unsigned integers whose heads are at ``at`` in ``buf``."""
    widths = _WIDTH[buf[at]]
    out = np.where(widths == 1, buf[at], 0).astype(np.uint64)
    for k in range(1, int(widths.max(initial=1))):
        sel = widths > k
        out[sel] = (out[sel] << np.uint64(8)) | buf[at[sel] + k].astype(np.uint64)
    return out, widths


def _components(e: _Entries, comps: tuple[bytes, ...]) -> bool:
    """Decode the data component maps (offset, length, encoding, where the digest is)."""
    lens = _lengths(comps)
    buf = np.frombuffer(b"".join(comps) + bytes(16), np.uint8)  # (reads past the end are 0)
    starts = np.cumsum(lens) - lens
    e.offsets, w1 = _uints(buf, starts + 8)
    at = starts + 8 + w1 + 7
    e.lengths, w2 = _uints(buf, at)
    at += w2
    stops = starts + lens
    has_enc = (at < stops) & (buf[at] == ord("h"))
    e.zstd = has_enc & (buf[at + 9] == ord("d"))
    at += np.where(has_enc, np.where(e.zstd, 14, 13), 0)
    has_digest = at < stops
    e.digest_at = np.where(has_digest, at - starts, -1)
    present = has_enc.astype(np.int64) + has_digest
    return bool(np.array_equal(buf[starts], present + 0xA2))


def _combo(text: bytes) -> tuple[DType, str, tuple[int, ...], int] | None:
    """(dtype, its name, shape, bytes) of one dtype text + shape array, or None if invalid."""
    split = text.find(b"eshape")
    dtype_text, shape_raw = text[:split], text[split + 6 :]
    if split < 2 or dtype_text[0] - 0x60 != len(dtype_text) - 1:
        return None
    dtype_name = dtype_text[1:].decode("ascii")
    try:
        dt = dtypes.from_ztensor(dtype_name)
        shape_list = _cbor.decode(shape_raw)
    except (KeyError, _cbor.CBORDecodeError):
        return None
    shape = tuple(shape_list)
    if not all(type(d) is int and 0 <= d <= _MAX_U64 for d in shape):
        return None
    numel = 1
    for d in shape:
        if d:
            numel *= d
            if numel > _MAX_U64 // dt.itemsize:
                return None
    return dt, dtype_name, shape, 0 if 0 in shape else numel * dt.itemsize


def _entries(data: bytes, pos: int, count: int, limit: int) -> tuple[_Entries, int] | None:
    """Parse and check ``count`` tensor entries from ``pos``: (columns, end) or None."""
    for pattern in _ENTRIES:
        rows = pattern.findall(data, pos)
        if len(rows) >= count:
            if len(rows) > count:
                del rows[count:]
            heads, names, kinds_raw, comps, rest = zip(*rows, strict=True)
            if not any(rest):
                break
    else:
        return None
    del rows
    head_lens = _lengths(heads)
    head_buf = np.frombuffer(b"".join(heads), np.uint8)
    last = head_buf[np.cumsum(head_lens) - 1].astype(np.int64)
    declared = np.where(head_lens == 1, last - 0x60, last)
    name_lens = _lengths(names)
    if not np.array_equal(declared, name_lens):
        return None
    out = _Entries()
    if not _components(out, comps):
        return None
    out.comps = comps
    end = pos + _FIXED * count + int(head_lens.sum() + name_lens.sum())
    end += sum(map(len, kinds_raw)) + sum(map(len, comps))
    try:
        out.names = list(map(bytes.decode, names))
    except UnicodeDecodeError:
        return None
    kinds: dict[bytes, int] = {}
    sizes: list[int] = []
    for text in dict.fromkeys(kinds_raw):
        combo = _combo(text)
        if combo is None:
            return None
        kinds[text] = len(out.combos)
        out.combos.append(combo[:3])
        sizes.append(combo[3])
    out.kinds = np.fromiter(map(kinds.__getitem__, kinds_raw), np.intp, count)
    if not _valid(out, np.array(sizes, np.uint64)[out.kinds], limit):
        return None
    return out, end


def _valid(e: _Entries, expected: np.ndarray[Any, Any], limit: int) -> bool:
    """Every rule of the precise path, for all entries at once (True: all hold)."""
    off, ln = e.offsets, e.lengths
    lim = np.uint64(limit)
    if np.any((off > lim) | (ln > lim - np.minimum(off, lim))):
        return False  # outside the component area
    used = ln != 0
    if np.any(used & ((off < _MAGIC_SIZE) | (off % np.uint64(_ALIGNMENT) != 0))):
        return False  # inside the magic, or misaligned (which warns)
    raw = ~e.zstd
    if np.any(raw & (ln != expected)):
        return False
    if np.any(e.zstd):
        packed = zip(expected[e.zstd].tolist(), ln[e.zstd].tolist(), strict=True)
        if any(x > MAX_ZSTD_RATIO * n + (1 << 20) for x, n in packed):
            return False
    starts = off[used]
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    stops = starts + ln[used][order]
    return not np.any(starts[1:] < stops[:-1])


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _tensors_head(data: bytes, pos: int) -> tuple[int, int] | None:
    """(entry count, position of the first entry) of a definite-length map at ``pos``."""
    if pos >= len(data) or not 0xA0 <= data[pos] <= 0xBB:
        return None
    info = data[pos] - 0xA0
    if info < 24:
        return info, pos + 1
    width = 1 << (info - 24)
    end = pos + 1 + width
    return (int.from_bytes(data[pos + 1 : end], "big"), end) if end <= len(data) else None


def _parse(data: bytes, manifest_start: int) -> Catalog | None:
    if not data or not 0xA0 <= data[0] <= 0xB7:
        return None
    dec = _cbor._Decoder(data)
    root: dict[str, Any] = {}
    entries: tuple[_Entries, int] | None = None
    pos = 1
    for _ in range(data[0] - 0xA0):
        key, pos = dec.item(pos, 1)
        if not isinstance(key, str) or key in root:
            return None
        if key == "tensors":
            head = _tensors_head(data, pos)
            if head is None or head[0] == 0 or head[0] > len(data):
                return None
            entries = _entries(data, head[1], head[0], manifest_start)
            if entries is None:
                return None
            root[key], pos = None, entries[1]
        else:
            root[key], pos = dec.item(pos, 1)
    if pos != len(data) or entries is None:
        return None
    if root.get("version") != "1.0" or not isinstance(root.get("generator"), str):
        return None
    if "attributes" not in root or not _text_map(root["attributes"]):
        return None
    columns = entries[0]
    offsets = columns.offsets
    in_order = bool(np.all(offsets[1:] >= offsets[:-1]))  # (as writers write them)
    tensors = _Tensors(columns, None if in_order else np.argsort(offsets, kind="stable").tolist())
    if len(tensors._index) != len(columns.names):
        return None  # duplicate names
    return Catalog(
        format="ztensor",
        metadata=root["attributes"],
        tensors=tensors,
        header_size=len(data),
        data_start=_MAGIC_SIZE,
        version="1.0",
        extra={"generator": root["generator"], "manifest_start": manifest_start},
    )


def fast_catalog(data: bytes, *, manifest_start: int) -> Catalog | None:
    """The catalog of a manifest in the common form that breaks no rule, or None (then
    the precise path decides)."""
    enabled = gc.isenabled()
    gc.disable()  # (many small acyclic objects: the collector would rescan them repeatedly)
    try:
        return _parse(bytes(data), manifest_start)
    except (_cbor.CBORDecodeError, ValueError, TypeError, IndexError, OverflowError):
        return None
    finally:
        if enabled:
            gc.enable()
