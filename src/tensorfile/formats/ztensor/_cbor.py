"""One strict CBOR (RFC 8949) codec for zTensor manifests, with a deterministic mode.

The decoder takes untrusted bytes and is built so that nothing it is given costs more than
the bytes themselves: nesting is capped, every declared length is checked against the bytes
that remain *before* anything is allocated (an array that claims 2**60 items in a 10-byte
manifest fails at once), maps reject duplicate keys, and trailing bytes after the top-level
item are an error. Every problem is a :class:`CBORDecodeError` with the byte offset where it
was found. Two modes:

* the default (zTensor v1.0 manifests) reads what other writers may produce: indefinite
  lengths, tags (bignums become integers, other tags their content), any key order, any
  head width, nesting up to 64 levels; the encoder keeps the map order it is given and
  writes integers past 64 bits as bignums;
* ``deterministic=True`` (zTensor v2, §3.1) accepts only the core deterministic encoding
  (RFC 8949 §4.2.1): shortest heads and floats (NaN as ``f9 7e00``), definite lengths, map
  keys in strictly ascending bytewise order of their encodings, no tags, items at most 32
  levels below the root; its errors are :class:`DeterministicCBORError`, whose ``rule``
  says which kind of rule broke; the encoder sorts map keys and writes nothing else.

Manifests are decoded by the ``cbor2`` C extension first and kept only when encoding the
result again gives back exactly the input (so the input was in the writers' form, with no
duplicate keys cbor2 would merge); anything else goes through the strict decoder here,
which is the authority and says what is wrong.

Example:
    >>> decode(encode({"a": [1, -2, "x", None, True, 1.5]}))
    {'a': [1, -2, 'x', None, True, 1.5]}
    >>> encode({"b": 1, "a": [1.5, None]}, deterministic=True).hex()
    'a2616182f93e00f6616201'
    >>> decode(bytes.fromhex("a2616200616100"), deterministic=True)
    Traceback (most recent call last):
    ...
    tensorfile.formats.ztensor._cbor.DeterministicCBORError: map keys are not in ascending \
bytewise order (CBOR byte 4)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_DEPTH_DETERMINISTIC",
    "CBORDecodeError",
    "CBOREncodeError",
    "DeterministicCBORError",
    "decode",
    "encode",
]

MAX_DEPTH = 64
"""Deepest nesting of arrays, maps and tags the default decoder accepts."""
MAX_DEPTH_DETERMINISTIC = 32
"""The deepest level an item may sit at in deterministic mode, from the root (level 0)."""

_BREAK = object()


class CBORDecodeError(ValueError):
    """The bytes are not one well-formed CBOR item within the decoder's limits.

    Attributes:
        offset: the byte of the manifest where the problem is.
        rule: ``"syntax"``, ``"determinism"``, ``"duplicate"`` or ``"depth"``.
    """

    def __init__(self, message: str, offset: int, rule: str = "syntax") -> None:
        super().__init__(f"{message} (CBOR byte {offset})")
        self.offset = offset
        self.rule = rule


class DeterministicCBORError(CBORDecodeError):
    """The bytes are not one item in the deterministic encoding, within the limits."""


class CBOREncodeError(TypeError, ValueError):
    """A value cannot be encoded as CBOR (an unsupported type, text that is not Unicode, an
    integer or a nesting deterministic mode cannot hold)."""


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _shortest_float(value: float) -> bytes:
    """The narrowest of half, single and double precision that holds ``value`` exactly;
    NaN as ``f9 7e00``."""
    if math.isnan(value):
        return b"\xf9\x7e\x00"
    for head, fmt in ((b"\xf9", ">e"), (b"\xfa", ">f")):
        try:
            packed = struct.pack(fmt, value)
        except (OverflowError, struct.error):
            continue
        if struct.unpack(fmt, packed)[0] == value:
            return head + packed
    return b"\xfb" + struct.pack(">d", value)


def _hashable(key: Any) -> Any:
    """A dict key for a decoded map key (arrays become tuples, maps tuples of pairs)."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple((k, _hashable(v)) for k, v in key.items())
    return key


class _Decoder:
    __slots__ = ("data", "n", "strict")

    def __init__(self, data: bytes, *, deterministic: bool = False) -> None:
        self.data = data
        self.n = len(data)
        self.strict = deterministic

    def _fail(self, message: str, offset: int, rule: str = "syntax") -> CBORDecodeError:
        kind = DeterministicCBORError if self.strict else CBORDecodeError
        return kind(message, offset, rule)

    def _head(self, pos: int) -> tuple[int, int, int, int]:
        """(major type, additional info, argument, next position); argument -1 = indefinite
        (refused in deterministic mode, as is a head longer than its argument needs)."""
        if pos >= self.n:
            raise self._fail("the manifest ends in the middle of an item", pos)
        ib = self.data[pos]
        major, info = ib >> 5, ib & 31
        if info < 24:
            return major, info, info, pos + 1
        if info < 28:
            width = 1 << (info - 24)
            end = pos + 1 + width
            if end > self.n:
                raise self._fail("the manifest ends in the middle of an item", pos)
            arg = int.from_bytes(self.data[pos + 1 : end], "big")
            if self.strict and arg < (24 if width == 1 else 1 << (4 * width)):
                raise self._fail(
                    f"the argument {arg} is not in its shortest form", pos, "determinism"
                )
            return major, info, arg, end
        if self.strict:
            what = "an indefinite length" if info == 31 else f"reserved additional info {info}"
            raise self._fail(f"{what} is not allowed", pos)
        if info == 31 and major in (2, 3, 4, 5, 7):
            return major, info, -1, pos + 1
        raise self._fail(f"invalid CBOR initial byte 0x{ib:02x}", pos)

    def _need(self, count: int, pos: int, what: str, start: int) -> None:
        if count > self.n - pos:
            what, unit = ("an item", "entries") if self.strict else (what, "items")
            raise self._fail(
                f"{what} declares {count:,} bytes or {unit} but only {self.n - pos:,} bytes remain",
                start,
            )

    def _text(self, raw: bytes, at: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("a text string is not valid UTF-8", at) from None

    def item(self, pos: int, depth: int) -> tuple[Any, int]:
        if self.strict and depth > MAX_DEPTH_DETERMINISTIC:
            raise self._fail(
                f"items are nested deeper than {MAX_DEPTH_DETERMINISTIC} levels", pos, "depth"
            )
        data = self.data
        if pos < self.n:
            ib = data[pos]
            # fast paths: small unsigned ints and short text strings (most of a manifest)
            if ib < 24:
                return ib, pos + 1
            if 0x60 <= ib < 0x78:
                end = pos + 1 + (ib - 0x60)
                if end <= self.n:
                    return self._text(data[pos + 1 : end], pos), end
            if ib >> 5 == 7 and (self.strict or depth < MAX_DEPTH):
                return self._simple(ib & 31, pos)
            if self.strict and ib >> 5 == 6:
                raise self._fail("CBOR tags are not allowed in a zTensor manifest", pos)
        major, _info, arg, nxt = self._head(pos)
        if major == 0:
            return arg, nxt
        if major == 1:
            return -1 - arg, nxt
        if major in (2, 3):
            if arg < 0:
                return self._chunked(major, pos, nxt)
            self._need(arg, nxt, "a string", pos)
            raw = data[nxt : nxt + arg]
            return (raw if major == 2 else self._text(raw, pos)), nxt + arg
        if not self.strict and depth >= MAX_DEPTH:
            raise self._fail(f"items are nested deeper than {MAX_DEPTH} levels", pos)
        if major == 4:
            return self._array(arg, pos, nxt, depth + 1)
        if major == 5:
            return self._map(arg, pos, nxt, depth + 1)
        value, end = self.item(nxt, depth + 1)
        if arg in (2, 3) and isinstance(value, bytes):  # a bignum (RFC 8949 3.4.3)
            n = int.from_bytes(value, "big")
            return (n if arg == 2 else -1 - n), end
        return value, end  # other tags carry no meaning in a manifest

    def _chunked(self, major: int, start: int, pos: int) -> tuple[Any, int]:
        parts: list[bytes] = []
        while True:
            if pos < self.n and self.data[pos] == 0xFF:
                break
            m, _info, arg, nxt = self._head(pos)
            if m != major or arg < 0:
                raise self._fail("an indefinite-length string has a bad chunk", pos)
            self._need(arg, nxt, "a string chunk", pos)
            parts.append(self.data[nxt : nxt + arg])
            pos = nxt + arg
        raw = b"".join(parts)
        return (raw if major == 2 else self._text(raw, start)), pos + 1

    def _array(self, count: int, start: int, pos: int, depth: int) -> tuple[Any, int]:
        out: list[Any] = []
        if count >= 0:
            self._need(count, pos, "an array", start)
            for _ in range(count):
                value, pos = self.item(pos, depth)
                if value is _BREAK:
                    raise self._fail("unexpected break inside an array", pos - 1)
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
        previous = b""
        remaining = count
        while remaining != 0:
            key_at = pos
            key, pos = self.item(pos, depth)
            if key is _BREAK:
                if count < 0:
                    return out, pos
                raise self._fail("unexpected break inside a map", key_at)
            if self.strict:
                encoded = self.data[key_at:pos]
                if remaining != count and encoded <= previous:
                    if encoded == previous:
                        raise self._fail(f"duplicate map key {_brief(key)}", key_at, "duplicate")
                    raise self._fail(
                        "map keys are not in ascending bytewise order", key_at, "determinism"
                    )
                previous = encoded
                key = _hashable(key)
            value, pos = self.item(pos, depth)
            if value is _BREAK:
                raise self._fail("a map key has no value", key_at)
            try:
                if key in out:
                    if self.strict:  # distinct encodings Python cannot tell apart (1 and 1.0)
                        raise self._fail(
                            f"map keys {_brief(key)} and another key of the same value cannot "
                            "both be held (Python compares them equal)",
                            key_at,
                        )
                    raise self._fail(f"duplicate map key {key!r}", key_at)
            except TypeError:
                raise self._fail("a map key is an array or a map", key_at) from None
            out[key] = value
            remaining -= 1
        return out, pos

    def _simple(self, info: int, pos: int) -> tuple[Any, int]:
        """Major type 7 at ``pos``: false, true, null (and, by default, undefined as null,
        and the break); floats; deterministic mode wants the shortest float."""
        if info in (20, 21, 22) or (info == 23 and not self.strict):
            return (False, True, None, None)[info - 20], pos + 1
        if self.strict and info not in (25, 26, 27):
            what = (
                "a break outside an indefinite-length item"
                if info == 31
                else (
                    f"simple value {info if info < 24 else 'with info ' + str(info)} is not allowed"
                )
            )
            raise self._fail(what, pos)
        if 24 <= info <= 27:
            width = 1 << (info - 24)
            end = pos + 1 + width
            if end > self.n:
                what = "a float" if self.strict else "an item"
                raise self._fail(f"the manifest ends in the middle of {what}", pos)
            raw = self.data[pos:end]
            if info == 24:
                raise self._fail(f"unassigned simple value {raw[1]}", pos)
            value: float = struct.unpack({2: ">e", 4: ">f", 8: ">d"}[width], raw[1:])[0]
            if self.strict and _shortest_float(value) != raw:
                what = "a NaN other than f9 7e00" if math.isnan(value) else "a float wider than"
                what += "" if math.isnan(value) else " its value needs"
                raise self._fail(f"{what} is not deterministic CBOR", pos, "determinism")
            return value, end
        if info == 31:
            return _BREAK, pos + 1
        if info < 24:
            raise self._fail(f"unassigned simple value {info}", pos)
        raise self._fail(f"invalid CBOR initial byte 0x{0xE0 | info:02x}", pos)


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


def _plain(value: Any) -> int:
    """0 unless ``value`` holds only what a deterministic manifest may (and the fast path can
    vouch for): maps whose keys are text in ascending order of their encodings, arrays,
    text, bytes, integers, floats, booleans and null, at most 32 levels deep; then 2 when
    it holds a float, else 1."""
    stack = [(value, 0)]
    scalars = (str, int, bytes, bool)
    floats = False
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= MAX_DEPTH_DETERMINISTIC and item:
                return 0
            values = item.values() if kind is dict else item
            if kind is dict:
                previous = (-1, b"")
                for key in item:
                    if type(key) is not str:
                        return 0
                    encoded = key.encode("utf-8")
                    current = (len(encoded), encoded)  # text heads grow with the length
                    if current <= previous:
                        return 0
                    previous = current
            for inner in values:
                inner_kind = type(inner)
                if inner_kind is dict or inner_kind is list:
                    stack.append((inner, depth + 1))
                elif inner_kind is float:
                    floats = True
                elif inner_kind not in scalars and inner is not None:
                    return 0
        elif kind is float:
            floats = True
        elif kind not in scalars and item is not None:
            return 0
    return 2 if floats else 1


def _fast(raw: bytes, deterministic: bool) -> Any:
    """Decode with the ``cbor2`` C extension, and keep the result only when encoding it again
    gives back exactly ``raw`` (in deterministic mode: when it is also plain, and with
    cbor2's canonical floats when it holds floats). Anything else, an error or a tag
    included, returns ``_BREAK`` and the strict decoder takes over and reports precisely.
    ``cbor2`` never pre-allocates for a claimed length; nesting is capped here too."""
    try:
        import cbor2
    except ImportError:  # pragma: no cover - cbor2 is a core dependency
        return _BREAK
    strict: dict[str, Any] = {"allow_indefinite": False, "allow_duplicate_keys": False}
    try:
        value = cbor2.loads(
            raw,
            semantic_decoders=_ANY_TAG,
            tag_hook=_refuse_tag,
            max_depth=MAX_DEPTH_DETERMINISTIC + 1 if deterministic else MAX_DEPTH,
            **(strict if deterministic else {}),
        )
        plain = _plain(value) if deterministic else 1
        if plain and cbor2.dumps(value, canonical=plain == 2) == raw:
            return value
    except MemoryError:
        raise _too_big(len(raw), deterministic) from None
    except Exception:  # the strict decoder explains what is wrong
        return _BREAK
    return _BREAK


def _too_big(size: int, deterministic: bool) -> CBORDecodeError:
    kind = DeterministicCBORError if deterministic else CBORDecodeError
    return kind(f"the {size:,}-byte manifest decodes to more than memory can hold", 0)


def decode(data: bytes | bytearray | memoryview, *, deterministic: bool = False) -> Any:
    """Decode exactly one CBOR item from ``data`` (the deterministic encoding only, with
    ``deterministic=True``).

    Raises:
        CBORDecodeError: malformed, truncated, too deep, duplicate map keys, trailing bytes
            (a :class:`DeterministicCBORError` in deterministic mode, also for any encoding
            other than the deterministic one).
    """
    raw = bytes(data)
    fast = _fast(raw, deterministic)
    if fast is not _BREAK:
        return fast
    dec = _Decoder(raw, deterministic=deterministic)
    try:
        value, pos = dec.item(0, 0)
    except (MemoryError, RecursionError):
        raise _too_big(len(raw), deterministic) from None
    if value is _BREAK:
        raise dec._fail("unexpected break", 0)
    if pos != len(raw):
        raise dec._fail(f"{len(raw) - pos:,} bytes follow the manifest's top-level item", pos)
    return value


def head(major: int, arg: int) -> bytes:
    """The shortest head of major type ``major`` with argument ``arg`` (below 2**64).

    Example:
        >>> head(5, 2).hex(), head(0, 500).hex()
        ('a2', '1901f4')
    """
    if arg < 24:
        return bytes([major << 5 | arg])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if arg < 1 << (8 * width):
            return bytes([major << 5 | info]) + arg.to_bytes(width, "big")
    raise CBOREncodeError(f"the integer {arg} does not fit in CBOR's 64-bit integers")


def _encode(obj: Any, out: list[bytes], depth: int, deterministic: bool) -> None:
    if deterministic and depth > MAX_DEPTH_DETERMINISTIC:
        raise CBOREncodeError(f"values are nested deeper than {MAX_DEPTH_DETERMINISTIC} levels")
    if obj is None:
        out.append(b"\xf6")
    elif obj is True:
        out.append(b"\xf5")
    elif obj is False:
        out.append(b"\xf4")
    elif isinstance(obj, int):
        major, arg = (0, obj) if obj >= 0 else (1, -1 - obj)
        if arg < 1 << 64:
            out.append(head(major, arg))
        elif deterministic:
            raise CBOREncodeError(f"the integer {obj} does not fit in CBOR's 64-bit integers")
        else:  # a bignum: tag 2 (or 3) and its big-endian bytes
            raw = arg.to_bytes((arg.bit_length() + 7) // 8, "big")
            out += [head(6, 2 + major), head(2, len(raw)), raw]
    elif isinstance(obj, str):
        try:
            raw = obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CBOREncodeError(
                f"text {_brief(obj)} is not valid Unicode: {exc.reason}"
            ) from None
        out += [head(3, len(raw)), raw]
    elif isinstance(obj, bytes | bytearray | memoryview):
        raw = bytes(obj)
        out += [head(2, len(raw)), raw]
    elif isinstance(obj, float):
        out.append(_shortest_float(obj))
    elif isinstance(obj, list | tuple):
        out.append(head(4, len(obj)))
        for item in obj:
            _encode(item, out, depth + 1, deterministic)
    elif isinstance(obj, dict):
        out.append(head(5, len(obj)))
        if not deterministic:
            for key, value in obj.items():
                _encode(key, out, depth + 1, deterministic)
                _encode(value, out, depth + 1, deterministic)
            return
        entries = []
        for key, value in obj.items():
            k: list[bytes] = []
            _encode(key, k, depth + 1, deterministic)
            v: list[bytes] = []
            _encode(value, v, depth + 1, deterministic)
            entries.append((b"".join(k), b"".join(v)))
        entries.sort(key=lambda e: e[0])
        for key_bytes, value_bytes in entries:
            out += [key_bytes, value_bytes]
    else:
        raise CBOREncodeError(f"cannot encode {type(obj).__name__} as CBOR")


def encode(obj: Any, *, deterministic: bool = False) -> bytes:
    """Encode ``obj`` (None, bool, int, float, str, bytes, list, tuple, dict) as CBOR with
    shortest heads and floats: maps in the order given (integers past 64 bits as bignums),
    or with ``deterministic=True`` the deterministic encoding (map keys sorted by their
    encoded bytes; 64-bit integers and 32 levels at most). What :func:`decode` returns
    always encodes; anything else (an object, a lone surrogate in a string) is a
    :class:`CBOREncodeError`.

    Example:
        >>> encode({"n": 500}).hex()
        'a1616e1901f4'
        >>> decode(encode([2**70, -(2**70)])) == [2**70, -(2**70)]
        True
        >>> encode([1, -1, 1.1], deterministic=True).hex()
        '830120fb3ff199999999999a'
    """
    out: list[bytes] = []
    _encode(obj, out, 0, deterministic)
    return b"".join(out)
