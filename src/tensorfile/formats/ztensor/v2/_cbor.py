"""Deterministic CBOR (RFC 8949 §4.2.1) for zTensor v2 manifests: a strict decoder and the
encoder that produces the one encoding it accepts.

zTensor v2 (§3.1) rejects every manifest that is not in the core deterministic encoding:
a head longer than its argument needs, an indefinite length, map keys that are not in
strictly ascending bytewise order of their encodings (which also rules out duplicates), a
tag anywhere, a float wider than its value needs or a NaN other than ``f9 7e00``, nesting
deeper than 32 levels below the root, and bytes after the top-level item. Every declared
length is checked against the bytes that remain before anything is allocated.

Manifests are decoded by the ``cbor2`` C extension first and kept only when re-encoding
the result canonically gives back exactly the input and every map key is text (then
cbor2's length-first key order and RFC 8949's bytewise order agree); anything else goes
through the strict decoder here, which is the authority and says what is wrong.

Example:
    >>> encode({"b": 1, "a": [1.5, None]}).hex()
    'a2616182f93e00f6616201'
    >>> decode(bytes.fromhex("a2616182f93e00f6616201"))
    {'a': [1.5, None], 'b': 1}
    >>> decode(bytes.fromhex("a2616200616100"))
    Traceback (most recent call last):
    ...
    tensorfile.formats.ztensor.v2._cbor.DeterministicCBORError: map keys are not in ascending \
bytewise order (CBOR byte 4)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "DeterministicCBORError", "decode", "encode"]

MAX_DEPTH = 32
"""The deepest level an item may sit at, counted from the manifest root (level 0)."""


class DeterministicCBORError(ValueError):
    """The bytes are not one item in the deterministic encoding, within the limits.

    Attributes:
        offset: the byte of the manifest where the problem is.
        rule: ``"syntax"``, ``"determinism"``, ``"duplicate"`` or ``"depth"``.
    """

    def __init__(self, message: str, offset: int, rule: str = "syntax") -> None:
        super().__init__(f"{message} (CBOR byte {offset})")
        self.offset = offset
        self.rule = rule


def _half(bits: int) -> float:
    value: float = struct.unpack(">e", bits.to_bytes(2, "big"))[0]
    return value


def _shortest_float(value: float) -> bytes:
    """The deterministic encoding of ``value``: the narrowest of half, single and double
    precision that holds it exactly; NaN as ``f9 7e00``."""
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


class _Decoder:
    __slots__ = ("data", "n")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.n = len(data)

    def _arg(self, info: int, pos: int, start: int) -> tuple[int, int]:
        """The argument of a head whose additional info is ``info``, shortest form enforced."""
        if info < 24:
            return info, pos
        if info > 27:
            what = "an indefinite length" if info == 31 else f"reserved additional info {info}"
            raise DeterministicCBORError(f"{what} is not allowed", start)
        width = 1 << (info - 24)
        end = pos + width
        if end > self.n:
            raise DeterministicCBORError("the manifest ends in the middle of an item", start)
        arg = int.from_bytes(self.data[pos:end], "big")
        floor = 24 if width == 1 else 1 << (4 * width)  # 1: 24, 2: 256, 4: 65536, 8: 2**32
        if arg < floor:
            raise DeterministicCBORError(
                f"the argument {arg} is not in its shortest form", start, "determinism"
            )
        return arg, end

    def _need(self, count: int, pos: int, start: int) -> None:
        if count > self.n - pos:
            raise DeterministicCBORError(
                f"an item declares {count:,} bytes or entries but only {self.n - pos:,} bytes "
                "remain",
                start,
            )

    def item(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise DeterministicCBORError(
                f"items are nested deeper than {MAX_DEPTH} levels", pos, "depth"
            )
        if pos >= self.n:
            raise DeterministicCBORError("the manifest ends in the middle of an item", pos)
        ib = self.data[pos]
        major, info = ib >> 5, ib & 31
        if major == 7:
            return self._simple(info, pos)
        if major == 6:
            raise DeterministicCBORError("CBOR tags are not allowed in a zTensor manifest", pos)
        arg, nxt = self._arg(info, pos + 1, pos)
        if major == 0:
            return arg, nxt
        if major == 1:
            return -1 - arg, nxt
        if major in (2, 3):
            self._need(arg, nxt, pos)
            raw = self.data[nxt : nxt + arg]
            if major == 2:
                return raw, nxt + arg
            try:
                return raw.decode("utf-8"), nxt + arg
            except UnicodeDecodeError:
                raise DeterministicCBORError("a text string is not valid UTF-8", pos) from None
        if major == 4:
            self._need(arg, nxt, pos)
            out: list[Any] = []
            for _ in range(arg):
                value, nxt = self.item(nxt, depth + 1)
                out.append(value)
            return out, nxt
        return self._map(arg, pos, nxt, depth)

    def _map(self, count: int, start: int, pos: int, depth: int) -> tuple[Any, int]:
        self._need(2 * count, pos, start)
        out: dict[Any, Any] = {}
        previous = b""
        for index in range(count):
            key_at = pos
            key, pos = self.item(pos, depth + 1)
            encoded = self.data[key_at:pos]
            if index and encoded <= previous:
                if encoded == previous:
                    raise DeterministicCBORError(
                        f"duplicate map key {_brief(key)}", key_at, "duplicate"
                    )
                raise DeterministicCBORError(
                    "map keys are not in ascending bytewise order", key_at, "determinism"
                )
            previous = encoded
            value, pos = self.item(pos, depth + 1)
            hashable = _hashable(key)
            if hashable in out:  # distinct encodings Python cannot tell apart (1 and 1.0)
                raise DeterministicCBORError(
                    f"map keys {_brief(key)} and another key of the same value cannot both be "
                    "held (Python compares them equal)",
                    key_at,
                )
            out[hashable] = value
        return out, pos

    def _simple(self, info: int, pos: int) -> tuple[Any, int]:
        if info == 20:
            return False, pos + 1
        if info == 21:
            return True, pos + 1
        if info == 22:
            return None, pos + 1
        if info in (25, 26, 27):
            width = 1 << (info - 24)
            end = pos + 1 + width
            if end > self.n:
                raise DeterministicCBORError("the manifest ends in the middle of a float", pos)
            raw = self.data[pos:end]
            fmt = {2: ">e", 4: ">f", 8: ">d"}[width]
            value: float = struct.unpack(fmt, raw[1:])[0]
            if _shortest_float(value) != raw:
                what = (
                    "a NaN other than f9 7e00"
                    if math.isnan(value)
                    else "a float wider than its value needs"
                )
                raise DeterministicCBORError(
                    f"{what} is not deterministic CBOR", pos, "determinism"
                )
            return value, end
        if info == 31:
            raise DeterministicCBORError("a break outside an indefinite-length item", pos)
        raise DeterministicCBORError(
            f"simple value {info if info < 24 else 'with info ' + str(info)} is not allowed", pos
        )


def _hashable(key: Any) -> Any:
    """A dict key for a decoded map key (arrays become tuples, maps tuples of pairs)."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple((k, _hashable(v)) for k, v in key.items())
    return key


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


class _AnyTag(Mapping[int, Any]):
    """cbor2 ``semantic_decoders`` that stop at every tag (the strict decoder reports it)."""

    def __getitem__(self, tag: int) -> Any:
        return _refuse

    def __contains__(self, tag: object) -> bool:
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


class _Refused(Exception):
    pass


def _refuse(*_args: Any) -> Any:
    raise _Refused


_ANY_TAG = _AnyTag()
_MISS = object()


def _plain(value: Any) -> int:
    """0 unless ``value`` holds only what a manifest may (and the fast path can vouch for):
    maps whose keys are text in ascending order of their encodings, arrays, text, bytes,
    integers, floats, booleans and null, at most :data:`MAX_DEPTH` levels deep; then 2 when
    it holds a float, else 1."""
    stack = [(value, 0)]
    scalars = (str, int, bytes, bool)
    floats = False
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= MAX_DEPTH and item:
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


def _fast(raw: bytes) -> Any:
    try:
        import cbor2
    except ImportError:  # pragma: no cover - cbor2 is a core dependency
        return _MISS
    try:
        value = cbor2.loads(
            raw,
            semantic_decoders=_ANY_TAG,
            tag_hook=_refuse,
            max_depth=MAX_DEPTH + 1,
            allow_indefinite=False,
            allow_duplicate_keys=False,
        )
        plain = _plain(value)
        # without floats, cbor2's plain encoding is the deterministic one for the order the
        # file has (which _plain checked); floats need its canonical mode (shortest widths)
        if plain and cbor2.dumps(value, canonical=plain == 2) == raw:
            return value
    except MemoryError:
        raise DeterministicCBORError(
            f"the {len(raw):,}-byte manifest decodes to more than memory can hold", 0
        ) from None
    except Exception:  # the strict decoder says what is wrong
        return _MISS
    return _MISS


def decode(data: bytes | bytearray | memoryview) -> Any:
    """Decode the one deterministic-CBOR item that is all of ``data``.

    Raises:
        DeterministicCBORError: malformed, not deterministic, tagged, too deep, duplicate
            keys, or followed by more bytes.
    """
    raw = bytes(data)
    value = _fast(raw)
    if value is not _MISS:
        return value
    try:
        value, pos = _Decoder(raw).item(0, 0)
    except (MemoryError, RecursionError):
        raise DeterministicCBORError(
            f"the {len(raw):,}-byte manifest decodes to more than memory can hold", 0
        ) from None
    if pos != len(raw):
        raise DeterministicCBORError(
            f"{len(raw) - pos:,} bytes follow the manifest's top-level item", pos
        )
    return value


def _head(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes([major << 5 | arg])
    for info, width in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if arg < 1 << (8 * width):
            return bytes([major << 5 | info]) + arg.to_bytes(width, "big")
    raise ValueError(f"the integer {arg} does not fit in 64 bits")


def _encode(obj: Any, out: list[bytes], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"values are nested deeper than {MAX_DEPTH} levels")
    if obj is None:
        out.append(b"\xf6")
    elif obj is True:
        out.append(b"\xf5")
    elif obj is False:
        out.append(b"\xf4")
    elif isinstance(obj, int):
        if not -(1 << 64) <= obj < 1 << 64:
            raise ValueError(f"the integer {obj} does not fit in CBOR's 64-bit integers")
        out.append(_head(0, obj) if obj >= 0 else _head(1, -1 - obj))
    elif isinstance(obj, str):
        raw = obj.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, a ValueError
        out += [_head(3, len(raw)), raw]
    elif isinstance(obj, bytes | bytearray | memoryview):
        raw = bytes(obj)
        out += [_head(2, len(raw)), raw]
    elif isinstance(obj, float):
        out.append(_shortest_float(obj))
    elif isinstance(obj, list | tuple):
        out.append(_head(4, len(obj)))
        for item in obj:
            _encode(item, out, depth + 1)
    elif isinstance(obj, dict):
        entries = []
        for key, value in obj.items():
            k: list[bytes] = []
            _encode(key, k, depth + 1)
            v: list[bytes] = []
            _encode(value, v, depth + 1)
            entries.append((b"".join(k), b"".join(v)))
        entries.sort(key=lambda e: e[0])
        out.append(_head(5, len(entries)))
        for key_bytes, value_bytes in entries:
            out += [key_bytes, value_bytes]
    else:
        raise TypeError(f"{type(obj).__name__} values cannot be written to a zTensor manifest")


def encode(obj: Any) -> bytes:
    """The deterministic encoding of ``obj`` (None, bool, int, float, str, bytes, list,
    tuple, dict): shortest heads and floats, map keys sorted by their encoded bytes.

    Raises:
        TypeError: a value of another type.
        ValueError: an integer past 64 bits, text that is not Unicode, nesting past 32.

    Example:
        >>> encode([1, -1, 1.1]).hex()
        '830120fb3ff199999999999a'
    """
    out: list[bytes] = []
    _encode(obj, out, 0)
    return b"".join(out)
