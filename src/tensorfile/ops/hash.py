"""Identities of a model: the structural hash (weight-inspect's, exactly) and a content id.

The **structural hash** is SHA-256 (lower-case hex) of the compact JSON
``{"format":…,["gguf_version":…,]"metadata":{…},"tensors":{name:{"name","dtype","shape",
"byte_length"}}}``: maps sorted by key, dtypes lower-cased, and each metadata value
canonicalised as weight-inspect does (a string ``pt`` becomes the JSON string ``"\\"pt\\""``;
inside it only quotes, backslashes and the ASCII control characters are escaped: ``\\n``,
``\\r`` and ``\\t`` by name, the rest of U+0000-U+001F and U+007F as ``\\u00xx``, lower-case
hex, so ``\\b`` is ``\\u0008``; every other character, non-ASCII ones included, stays as it
is in the UTF-8 JSON; GGUF numbers keep their type: ``f32:<bits>`` for float32, the bit
pattern for float64). For safetensors and GGUF it equals weight-inspect's hash; unlike
weight-inspect, zero-size tensors are included (byte_length 0). zTensor files use the same
recipe with ``"format":"ztensor"`` and the decoded byte length, so recompressing a file keeps
its hash.

The **content id** covers names, dtypes (one vocabulary for every format), shapes and the
tensor bytes (dense, row-major, little-endian), so a model converted between safetensors and
zTensor keeps it. It streams the data.

Example:
    >>> from tensorfile.ops._structure import Structure, TensorEntry
    >>> s = Structure("safetensors", "m", None, 0, {},
    ...               (TensorEntry("test.weight.0", "F32", (64, 128), 32768, (0, 32768)),))
    >>> structural_hash(s)
    '625a71753a42bd1b8b43e866dc9c8c0b4535394b9f54707a6dc13593b842a873'
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import InvalidArgumentError, InvalidTypeError
from ..core.reader import Reader
from ..gguf import GGUFValue
from ._dense import (
    CHUNK_BYTES,
    MAX_DENSE_BYTES,
    check_densifiable,
    components,
    dense_chunks,
    is_extension,
)
from ._structure import Structure, TensorEntry, load, naming, open_readers

__all__ = ["canonical_json", "canonical_value", "content_hash", "structural_hash"]

# weight-inspect computes byte lengths only for these GGUF types (others count 0)
_GGUF_PLAIN_SIZES = {"f32": 4, "i32": 4, "f16": 2, "i16": 2, "bf16": 2, "i8": 1, "i64": 8}
_GGUF_PLAIN_SIZES["f64"] = 8


# weight-inspect's escape_string(): quotes, backslashes and the ASCII control characters
# (Rust's char::is_ascii_control: U+0000-U+001F and U+007F); every other character is kept
_ESCAPES: dict[int, str] = {cp: f"\\u{cp:04x}" for cp in (*range(0x20), 0x7F)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", 10: "\\n", 13: "\\r", 9: "\\t"})


def _escape(text: str) -> str:
    return text.translate(_ESCAPES)


def canonical_value(value: Any) -> str:
    r"""weight-inspect's canonical text of a metadata value (a ``str`` or a GGUFValue).

    Example:
        >>> print(canonical_value('café "x"\tend\x7f\b'))
        "café \"x\"\tend\u007f\u0008"
        >>> canonical_value("模型 🙂 \x85\u2028") == '"模型 🙂 \x85\u2028"'  # kept as they are
        True
    """
    if isinstance(value, str):
        return f'"{_escape(value)}"'
    if isinstance(value, GGUFValue):
        if value.type == "array":
            kind = value.element_type or ""
            bits = value.bits if value.bits is not None else [None] * len(value.value)
            items = [GGUFValue(kind, v, bits=b) for v, b in zip(value.value, bits, strict=True)]
            return "[" + ",".join(canonical_value(v) for v in items) + "]"
        if value.type == "float32" and value.bits is not None:
            return f"f32:{value.bits}"
        return _scalar(value.type, value.value)
    raise InvalidTypeError(f"cannot canonicalise {type(value).__name__}")


def _scalar(kind: str, value: Any) -> str:
    if kind == "string":
        return f'"{_escape(value)}"'
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float32":
        return "f32:" + str(struct.unpack("<I", struct.pack("<f", value))[0])
    if kind == "float64":
        return str(struct.unpack("<Q", struct.pack("<d", value))[0])
    if kind == "uint64":
        return str(value - (1 << 64) if value >= 1 << 63 else value)  # stored as i64
    return str(int(value))


def _byte_length(fmt: str, t: TensorEntry) -> int:
    if fmt == "gguf":
        size = _GGUF_PLAIN_SIZES.get(t.dtype)
        n = math.prod(t.shape)
        return 0 if size is None or n >= 1 << 64 else (n * size) % (1 << 64)
    if fmt == "ztensor":
        return t.data_bytes  # decoded size: recompressing keeps the hash
    return t.byte_length


def canonical_json(s: Structure) -> str:
    """The compact JSON whose SHA-256 is the structural hash."""
    doc: dict[str, Any] = {"format": s.format}
    if s.format == "gguf" and s.version is not None:
        doc["gguf_version"] = int(s.version)
    doc["metadata"] = {k: canonical_value(s.metadata[k]) for k in sorted(s.metadata)}
    doc["tensors"] = {
        t.name: {
            "name": t.name,
            "dtype": t.dtype.lower(),
            "shape": list(t.shape),
            "byte_length": _byte_length(s.format, t),
        }
        for t in sorted(s.tensors, key=lambda t: t.name)
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def structural_hash(structure: Structure | str) -> str:
    r"""The structural hash of a :class:`Structure` (or of the file at a path).

    Text the header holds that is not valid Unicode (a lone surrogate, possible only in a
    :class:`Structure` built by hand: every format's reader refuses one) is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> from tensorfile.ops._structure import Structure, TensorEntry
        >>> s = Structure("safetensors", "m", None, 0, {"lang": "日本語"},
        ...               (TensorEntry("w", "F32", (2,), 8, (0, 8)),))
        >>> print(canonical_json(s).partition(',"tensors"')[0])
        {"format":"safetensors","metadata":{"lang":"\"日本語\""}
        >>> structural_hash(s) == hashlib.sha256(canonical_json(s).encode()).hexdigest()
        True
    """
    s = load(structure) if isinstance(structure, str) else structure
    try:
        data = canonical_json(s).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise InvalidArgumentError(
            f"{s.path}: the header holds {bad!r}, which is not valid Unicode text"
        ) from None
    return hashlib.sha256(data).hexdigest()


_CHUNK = CHUNK_BYTES


def content_hash(
    path: str,
    progress: Callable[[int, int], None] | None = None,
    *,
    max_dense_bytes: int = MAX_DENSE_BYTES,
) -> str:
    """SHA-256 over every tensor's name, common dtype, shape and dense bytes, in name order.

    ``progress(done, total)`` is called as bytes are hashed (for a progress bar). Memory
    stays bounded: stored bytes are read a chunk at a time and sparse tensors are densified a
    chunk at a time; a sparse tensor whose dense form is over ``max_dense_bytes`` is refused
    with :class:`~tensorfile.errors.UnsupportedError` before any data is read.
    """
    s = load(path)
    files = [sh.path for sh in s.shards] if s.shards else [s.path]
    total = sum(t.parameters * _itemsize(t) for t in s.tensors)
    done = 0
    digest = hashlib.sha256(b"tensorfile-content-v1\n")
    by_file = open_readers(s)
    try:
        for t in s.tensors:  # every refusal before the first byte of data
            reader = by_file[t.shard or files[0]]
            check_densifiable(reader.info(t.name), reader.source.name, max_dense_bytes)
        for t in s.tensors:
            head = {"name": t.name, "dtype": t.common_dtype, "shape": list(t.shape)}
            digest.update(json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode())
            digest.update(b"\n")
            reader = by_file[t.shard or files[0]]
            with naming(reader.source.name):
                for chunk in _tensor_chunks(reader, t.name):
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
    finally:
        for r in by_file.values():
            r.close()
    return digest.hexdigest()


def _itemsize(t: TensorEntry) -> int:
    from ..core import dtypes

    try:
        return dtypes.from_name(t.dtype).itemsize
    except KeyError:
        return max(1, t.byte_length // max(1, t.parameters))


def _tensor_chunks(reader: Reader, name: str) -> Iterator[bytes | bytearray]:
    """The tensor's dense bytes, a chunk at a time (stored bytes are streamed; GGUF's
    quantized blocks as they are stored; sparse tensors densified piece by piece)."""
    info = reader.info(name)
    if info.layout in ("dense", "quantized") and all(
        c.encoding == "raw" for c in info.components.values()
    ):
        rng = info.byte_range
        for pos in range(0, rng.length, _CHUNK):
            buf = bytearray(min(_CHUNK, rng.length - pos))
            reader.source.readinto(rng.start + pos, [memoryview(buf)])
            yield buf
        return
    value = reader.get_tensor(name)
    if is_extension(value):  # an extension layout: its components, by role
        for role, part in components(value).items():
            yield role.encode() + b"\n" + part.tobytes()
        return
    for piece in dense_chunks(value, _CHUNK // max(1, info.dtype.itemsize)):
        yield piece.tobytes()
