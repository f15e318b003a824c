"""A small, strict CBOR (RFC 8949) codec for zTensor manifests.

The decoder takes untrusted bytes and is built so that nothing it is given costs more than
the bytes themselves: nesting is capped, every declared length is checked against the bytes
that remain *before* anything is allocated (an array that claims 2**60 items in a 10-byte
manifest fails at once), maps reject duplicate and unhashable keys, and trailing bytes after
the top-level item are an error. Every problem is a :class:`CBORDecodeError` with the byte
offset where it was found.

Manifests in the deterministic form (every zTensor writer's output) are decoded by the
``cbor2`` C extension and checked by re-encoding; everything else goes through the strict
decoder here, which explains what is wrong.

The encoder writes the deterministic form: shortest integer heads, definite lengths, maps in
the order given (the caller chooses the key order).

Example:
    >>> decode(encode({"a": [1, -2, "x", None, True, 1.5]}))
    {'a': [1, -2, 'x', None, True, 1.5]}
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "CBORDecodeError", "CBOREncodeError", "decode", "encode"]

MAX_DEPTH = 64
"""Deepest nesting of arrays, maps and tags the decoder accepts."""

_BREAK = object()


class CBORDecodeError(ValueError):
    """The bytes are not one well-formed CBOR item within the decoder's limits."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} (CBOR byte {offset})")
        self.offset = offset


class CBOREncodeError(ValueError):
    """A value cannot be encoded as CBOR (an unsupported type, text that is not Unicode)."""


def _brief(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}..."


class _Decoder:
    __slots__ = ("data", "n")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.n = len(data)

    def _head(self, pos: int) -> tuple[int, int, int, int]:
        """(major type, additional info, argument, next position); argument -1 = indefinite."""
        data = self.data
        if pos >= self.n:
            raise CBORDecodeError("the manifest ends in the middle of an item", pos)
        ib = data[pos]
        major, info = ib >> 5, ib & 31
        if info < 24:
            return major, info, info, pos + 1
        if info < 28:
            width = 1 << (info - 24)
            end = pos + 1 + width
            if end > self.n:
                raise CBORDecodeError("the manifest ends in the middle of an item", pos)
            return major, info, int.from_bytes(data[pos + 1 : end], "big"), end
        if info == 31 and major in (2, 3, 4, 5, 7):
            return major, info, -1, pos + 1
        raise CBORDecodeError(f"invalid CBOR initial byte 0x{ib:02x}", pos)

    def _need(self, count: int, pos: int, what: str, start: int) -> None:
        if count > self.n - pos:
            raise CBORDecodeError(
                f"{what} declares {count:,} bytes or items but only {self.n - pos:,} bytes remain",
                start,
            )

    def item(self, pos: int, depth: int) -> tuple[Any, int]:
        data = self.data
        if pos < self.n:
            ib = data[pos]
            # fast paths: small unsigned ints and short text strings (most of a manifest)
            if ib < 24:
                return ib, pos + 1
            if 0x60 <= ib < 0x78:
                end = pos + 1 + (ib - 0x60)
                if end <= self.n:
                    try:
                        return data[pos + 1 : end].decode("utf-8"), end
                    except UnicodeDecodeError:
                        raise CBORDecodeError("a text string is not valid UTF-8", pos) from None
        major, info, arg, nxt = self._head(pos)
        if major == 0:
            return arg, nxt
        if major == 1:
            return -1 - arg, nxt
        if major in (2, 3):
            if arg < 0:
                return self._chunked(major, pos, nxt)
            if arg > self.n - nxt:
                self._need(arg, nxt, "a string", pos)
            raw = data[nxt : nxt + arg]
            if major == 2:
                return raw, nxt + arg
            try:
                return raw.decode("utf-8"), nxt + arg
            except UnicodeDecodeError:
                raise CBORDecodeError("a text string is not valid UTF-8", pos) from None
        if depth >= MAX_DEPTH:
            raise CBORDecodeError(f"items are nested deeper than {MAX_DEPTH} levels", pos)
        if major == 4:
            return self._array(arg, pos, nxt, depth + 1)
        if major == 5:
            return self._map(arg, pos, nxt, depth + 1)
        if major == 6:
            value, end = self.item(nxt, depth + 1)
            if arg in (2, 3) and isinstance(value, bytes):  # a bignum (RFC 8949 3.4.3)
                n = int.from_bytes(value, "big")
                return (n if arg == 2 else -1 - n), end
            return value, end  # other tags carry no meaning in a manifest
        return self._simple(info, arg, pos, nxt)

    def _chunked(self, major: int, start: int, pos: int) -> tuple[Any, int]:
        parts: list[bytes] = []
        while True:
            if pos < self.n and self.data[pos] == 0xFF:
                break
            m, _info, arg, nxt = self._head(pos)
            if m != major or arg < 0:
                raise CBORDecodeError("an indefinite-length string has a bad chunk", pos)
            self._need(arg, nxt, "a string chunk", pos)
            parts.append(self.data[nxt : nxt + arg])
            pos = nxt + arg
        raw = b"".join(parts)
        if major == 2:
            return raw, pos + 1
        try:
            return raw.decode("utf-8"), pos + 1
        except UnicodeDecodeError:
            raise CBORDecodeError("a text string is not valid UTF-8", start) from None

    def _array(self, count: int, start: int, pos: int, depth: int) -> tuple[Any, int]:
        out: list[Any] = []
        if count >= 0:
            self._need(count, pos, "an array", start)
            for _ in range(count):
                value, pos = self.item(pos, depth)
                if value is _BREAK:
                    raise CBORDecodeError("unexpected break inside an array", pos - 1)
                out.append(value)
            return out, pos
        while True:
            value, pos = self.item(pos, depth)
            if value is _BREAK:
                return out, pos
            out.append(value)

    def _map(self, count: int, start: int, pos: int, depth: int) -> tuple[Any, int]:
        out: dict[Any, Any] = {}
        if count >= 0:
            self._need(2 * count, pos, "a map", start)
        item = self.item
        remaining = count
        while remaining != 0:
            key_pos = pos
            key, pos = item(pos, depth)
            if key is _BREAK:
                if count < 0:
                    return out, pos
                raise CBORDecodeError("unexpected break inside a map", key_pos)
            value, pos = item(pos, depth)
            if value is _BREAK:
                raise CBORDecodeError("a map key has no value", key_pos)
            try:
                if key in out:
                    raise CBORDecodeError(f"duplicate map key {key!r}", key_pos)
            except TypeError:
                raise CBORDecodeError("a map key is an array or a map", key_pos) from None
            out[key] = value
            remaining -= 1
        return out, pos

    def _simple(self, info: int, arg: int, start: int, pos: int) -> tuple[Any, int]:
        if arg < 0:
            return _BREAK, pos
        if info < 24:
            simple: dict[int, Any] = {20: False, 21: True, 22: None, 23: None}
            if arg in simple:
                return simple[arg], pos
            raise CBORDecodeError(f"unassigned simple value {arg}", start)
        width = 1 << (info - 24)
        raw = self.data[start + 1 : pos]
        if width == 2:
            return struct.unpack(">e", raw)[0], pos
        if width == 4:
            return struct.unpack(">f", raw)[0], pos
        if width == 8:
            return struct.unpack(">d", raw)[0], pos
        raise CBORDecodeError(f"unassigned simple value {arg}", start)


class _AnyTag(Mapping[int, Any]):
    """cbor2's ``semantic_decoders`` for every tag: each stops the fast path, so tagged items
    (dates, decimals, sets, ...) never become objects the encoder cannot write back."""

    def __getitem__(self, tag: int) -> Any:
        return _refuse_tag

    def __contains__(self, tag: object) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _TagFound(Exception):
    pass


def _refuse_tag(*_args: Any) -> Any:
    raise _TagFound


_ANY_TAG = _AnyTag()


def _fast_decode(raw: bytes) -> Any:
    """Decode with the ``cbor2`` C extension, and keep the result only when encoding it again
    gives back exactly ``raw``: then the input was in the deterministic form (what zTensor
    writers produce) and had no duplicate keys, which ``cbor2`` would silently merge. Anything
    else, an error or a tag included, returns ``_BREAK`` and the strict decoder takes over and
    reports precisely. ``cbor2`` never pre-allocates for a claimed length; nesting is capped
    at :data:`MAX_DEPTH` here too."""
    try:
        import cbor2
    except ImportError:  # pragma: no cover - cbor2 is a core dependency
        return _BREAK
    try:
        value = cbor2.loads(
            raw, semantic_decoders=_ANY_TAG, tag_hook=_refuse_tag, max_depth=MAX_DEPTH
        )
        if cbor2.dumps(value) == raw:
            return value
    except MemoryError:
        raise _too_big(len(raw)) from None  # (the strict decoder would only fail slower)
    except Exception:  # the strict decoder explains what is wrong
        return _BREAK
    return _BREAK


def _too_big(size: int) -> CBORDecodeError:
    return CBORDecodeError(
        f"the {size:,}-byte manifest decodes to more items than memory can hold", 0
    )


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode exactly one CBOR item from ``data``.

    Raises:
        CBORDecodeError: malformed, truncated, too deep, duplicate map keys, trailing bytes.
    """
    raw = bytes(data)
    fast = _fast_decode(raw)
    if fast is not _BREAK:
        return fast
    dec = _Decoder(raw)
    try:
        value, pos = dec.item(0, 0)
    except MemoryError:
        raise _too_big(len(raw)) from None
    if value is _BREAK:
        raise CBORDecodeError("unexpected break", 0)
    if pos != len(raw):
        raise CBORDecodeError(f"{len(raw) - pos} bytes follow the manifest's top-level item", pos)
    return value


def _head(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes([major << 5 | arg])
    if arg < 1 << 8:
        return bytes([major << 5 | 24, arg])
    if arg < 1 << 16:
        return bytes([major << 5 | 25]) + arg.to_bytes(2, "big")
    if arg < 1 << 32:
        return bytes([major << 5 | 26]) + arg.to_bytes(4, "big")
    return bytes([major << 5 | 27]) + arg.to_bytes(8, "big")


def _float(value: float) -> bytes:
    """The shortest of half, single and double precision that holds ``value`` exactly."""
    if math.isnan(value):
        return b"\xf9\x7e\x00"
    for head, fmt in ((b"\xf9", ">e"), (b"\xfa", ">f")):
        try:
            packed = struct.pack(fmt, value)
        except OverflowError:
            continue
        if struct.unpack(fmt, packed)[0] == value:
            return head + packed
    return b"\xfb" + struct.pack(">d", value)


def _encode(obj: Any, out: list[bytes]) -> None:
    if obj is None:
        out.append(b"\xf6")
    elif obj is True:
        out.append(b"\xf5")
    elif obj is False:
        out.append(b"\xf4")
    elif isinstance(obj, int):
        major, arg = (0, obj) if obj >= 0 else (1, -1 - obj)
        if arg < 1 << 64:
            out.append(_head(major, arg))
        else:  # a bignum: tag 2 (or 3) and its big-endian bytes
            raw = arg.to_bytes((arg.bit_length() + 7) // 8, "big")
            out += [_head(6, 2 + major), _head(2, len(raw)), raw]
    elif isinstance(obj, str):
        try:
            raw = obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CBOREncodeError(
                f"text {_brief(obj)} is not valid Unicode: {exc.reason}"
            ) from None
        out.append(_head(3, len(raw)))
        out.append(raw)
    elif isinstance(obj, bytes | bytearray | memoryview):
        raw = bytes(obj)
        out.append(_head(2, len(raw)))
        out.append(raw)
    elif isinstance(obj, float):
        out.append(_float(obj))
    elif isinstance(obj, list | tuple):
        out.append(_head(4, len(obj)))
        for item in obj:
            _encode(item, out)
    elif isinstance(obj, dict):
        out.append(_head(5, len(obj)))
        for key, value in obj.items():
            _encode(key, out)
            _encode(value, out)
    else:
        raise CBOREncodeError(f"cannot encode {type(obj).__name__} as CBOR")


def encode(obj: Any) -> bytes:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list, tuple, dict) as CBOR: what
    :func:`decode` returns always encodes (integers past 64 bits as bignums); anything else
    (an object, a lone surrogate in a string) is a :class:`CBOREncodeError`.

    Example:
        >>> encode({"n": 500}).hex()
        'a1616e1901f4'
        >>> decode(encode([2**70, -(2**70)])) == [2**70, -(2**70)]
        True
    """
    out: list[bytes] = []
    _encode(obj, out)
    return b"".join(out)
