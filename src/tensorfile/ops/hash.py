"""Identities of a model: the structural hash (weight-inspect's, exactly) and a content id.

The **structural hash** is SHA-256 (lower-case hex) of the compact JSON
``{"format":…,["gguf_version":…,]"metadata":{…},"tensors":{name:{"name","dtype","shape",
"byte_length"}}}``: maps sorted by key, dtypes lower-cased (a type tensorfile does not
know, a zTensor v2 logical type it has not registered, as its common dtype: case kept,
never a known type's name, then ``@`` and the storage dtype: ``x.foo/1@u16``), and each
metadata value
canonicalised as weight-inspect does (a string ``pt`` becomes the JSON string ``"\\"pt\\""``;
inside it only quotes, backslashes and the ASCII control characters are escaped: ``\\n``,
``\\r`` and ``\\t`` by name, the rest of U+0000-U+001F and U+007F as ``\\u00xx``, lower-case
hex, so ``\\b`` is ``\\u0008``; every other character, non-ASCII ones included, stays as it
is in the UTF-8 JSON; GGUF numbers keep their type: ``f32:<bits>`` for float32, the bit
pattern for float64). For safetensors and GGUF it equals weight-inspect's hash; unlike
weight-inspect, zero-size tensors are included (byte_length 0). zTensor files (and the other
formats) use the same recipe with their own ``"format"`` and the logical byte length (the
decoded size: :attr:`~tensorfile.core.catalog.TensorInfo.decoded_nbytes`), never the stored
one, so compressing or recompressing a file keeps its hash.

The **content id** covers names, dtypes (one vocabulary for every format), shapes and the
tensor bytes, so a model converted between safetensors, zTensor, npz or GGUF keeps it: it
depends on the content and on the digest algorithm only, never on the container. It is
SHA-256 (lower-case hex) of ``tensorfile-content-v2\\n`` followed, for each tensor in name
order, by the compact JSON ``{"name":…,"dtype":…,"shape":[…]}`` (the common dtype, as
:attr:`~tensorfile.core.catalog.TensorInfo.common_dtype` names it, and for a type
tensorfile does not know ``@`` and the storage dtype its bytes are held as,
``x.foo/1@u16``; the row-major shape),
``\\n``, the digest text ``algorithm:hex`` of the tensor's data bytes and ``\\n``. The data
bytes are the dense elements, row-major and little-endian (a sparse tensor's dense form; a
sub-byte type packed as a raw file stores it; GGUF's quantized blocks as stored). A tensor
of an extension layout (a zTensor one tensorfile does not know) is framed so that nothing
is ambiguous: its JSON adds ``"layout":…`` after the shape (and, for a zTensor v2 object
with attributes, ``"attributes":`` the hex of their canonical CBOR), which a plain tensor's
never has, and its data bytes are its components in role order, each after the compact JSON
``[role,dtype,logical type or null,byte length]`` and ``\\n``. JSON escapes every control
character, so each head ends at its first ``\\n``, each part at its length, each digest
text has its algorithm's length: two different tensor sets never give the same stream. The
``algorithm`` is ``sha256`` unless asked (``xxh3`` or ``crc32c``), written as
:class:`~tensorfile.core.digests.Digest` writes it (``xxh3:`` + 16 hex digits,
``crc32c:`` + 8, ``sha256:`` + 64, lower-case).

Only a ``sha256`` id resists a forger. ``crc32c`` and ``xxh3`` are checksums, not
cryptographic hashes: they catch accidents (a flipped bit, a truncated download), but
anyone can change a weight and flip a few low bits elsewhere so that the tensor keeps its
checksum, and so the file its id (CRC-32C is linear; xxh3 is 64 bits and was never meant
to resist collisions). So an id built from them names its algorithm: ``xxh3:`` or
``crc32c:`` before the 64 hex digits, never the bare hex of a ``sha256`` id, and it can
never be taken for one. Use them to spot accidental changes in files you hold, never to
identify or dedupe files from elsewhere.

The id is a statement about the bytes: by default every tensor's bytes are read and
hashed, whatever digests the file claims. A file that already stores the digest of a
tensor's data bytes (safetensors saved with ``checksum=``, zTensor v1.0 components stored
raw with crc32c/sha256, zTensor v2 parts with xxh3/sha256) can give the id without its data
being read, but only when asked: ``trust_stored_digests=True`` takes those digests as they
are, so the id is then what the file *claims* (a file whose bytes changed after it was
written keeps the old id). Use it for files you trust (your own, or ones checked before);
``verify=True`` reads every tensor and checks every stored digest against the bytes
instead. On an intact file the two ways give the same id. These are version 2 ids;
tensorfile's earlier content ids (``tensorfile-content-v1``, one SHA-256 over the bytes
themselves) differ from them.

Example:
    >>> from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
    >>> from tensorfile.core.dtypes import from_name
    >>> f32 = from_name("F32")
    >>> data = {"data": Component(ByteRange(0, 32768), f32)}
    >>> t = TensorInfo("test.weight.0", f32, (64, 128), data)
    >>> s = Catalog("safetensors", {}, {t.name: t}, 0, 0, path="m")
    >>> structural_hash(s)
    '625a71753a42bd1b8b43e866dc9c8c0b4535394b9f54707a6dc13593b842a873'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from tensorfile.core.values import STRING_SEP, LazyStrings, TypedValue

from ..core.catalog import Catalog, TensorInfo, file_name
from ..core.digests import ALGORITHMS, Digest
from ..core.errors import ChecksumError, InvalidArgumentError, InvalidTypeError
from ..core.reader import Reader, holds_blocks
from ..formats import FORMATS
from ._catalogs import file_dtype, files_of, load, naming, open_readers
from ._dense import (
    CHUNK_BYTES,
    MAX_DENSE_BYTES,
    check_densifiable,
    components,
    dense_chunks,
    is_extension,
)

__all__ = ["canonical_json", "canonical_value", "content_hash", "structural_hash"]

# weight-inspect computes byte lengths only for these GGUF types (others count 0)
_GGUF_PLAIN_SIZES = {"f32": 4, "i32": 4, "f16": 2, "i16": 2, "bf16": 2, "i8": 1, "i64": 8}
_GGUF_PLAIN_SIZES["f64"] = 8


# weight-inspect's escape_string(): quotes, backslashes and the ASCII control characters
# (Rust's char::is_ascii_control: U+0000-U+001F and U+007F); every other character is kept
_ESCAPES: dict[str, str] = {chr(cp): f"\\u{cp:04x}" for cp in (*range(0x20), 0x7F)}
_ESCAPES.update({'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\x7f]')
# joins the items of a string array so that they are escaped in one pass (a lone surrogate,
# which no text read from a file holds: a LazyStrings keeps its items so joined)
_SEP = STRING_SEP


def _escape_match(m: re.Match[str]) -> str:
    return _ESCAPES[m.group()]


def _escape(text: str) -> str:
    """``text`` escaped as weight-inspect does; text with nothing to escape (nearly all of
    it) is returned after one scan in C."""
    if _NEEDS_ESCAPE.search(text) is None:
        return text
    return _NEEDS_ESCAPE.sub(_escape_match, text)


def canonical_value(value: Any) -> str:
    r"""weight-inspect's canonical text of a metadata value (a ``str`` or a TypedValue).

    Example:
        >>> print(canonical_value('café "x"\tend\x7f\b'))
        "café \"x\"\tend\u007f\u0008"
        >>> canonical_value("模型 🙂 \x85\u2028") == '"模型 🙂 \x85\u2028"'  # kept as they are
        True
        >>> print(canonical_value(TypedValue("array", ["a", 'b"', "\n"], "string")))
        ["a","b\"","\n"]
    """
    if isinstance(value, str):
        return f'"{_escape(value)}"'
    if isinstance(value, TypedValue):
        if value.type == "array":
            return _array(value)
        if value.type == "float32" and value.bits is not None:
            return f"f32:{value.bits}"
        return _scalar(value.type, value.value)
    raise InvalidTypeError(f"cannot canonicalise {type(value).__name__}")


def _array(value: TypedValue) -> str:
    """An array's canonical text: a whole array at a time for the types a file can hold
    (a vocabulary of 150,000 tokens in tens of milliseconds), item by item otherwise."""
    kind = value.element_type or ""
    if kind == "array" and value.items is not None:  # an array of arrays: each in turn
        return "[" + ",".join(canonical_value(v) for v in value.items) + "]"
    if isinstance(value, LazyStrings) and value.count:  # a vocabulary: never made a list
        return '["' + _escape(value.joined).replace(_SEP, '","') + '"]'
    items, bits = value.value, value.bits
    if not items and not bits:
        return "[]"
    fast = _ARRAYS.get(kind)
    if fast is not None and (bits is None or len(bits) == len(items)):
        try:
            text = fast(items, bits)
        except (TypeError, ValueError, OverflowError, struct.error):
            text = None  # not what a file holds: item by item, as before
        if text is not None:
            return "[" + text + "]"
    per_item = bits if bits is not None else [None] * len(items)
    parts = [TypedValue(kind, v, bits=b) for v, b in zip(items, per_item, strict=True)]
    return "[" + ",".join(canonical_value(v) for v in parts) + "]"


def _strings(items: list[Any], bits: Any) -> str | None:
    joined = _SEP.join(items)
    if joined.count(_SEP) != len(items) - 1:  # an item holds the separator
        return None
    return '"' + _escape(joined).replace(_SEP, '","') + '"'


def _bools(items: list[Any], bits: Any) -> str:
    return ",".join(["true" if v else "false" for v in items])


def _float32s(items: list[Any], bits: Any) -> str | None:
    if bits is None:
        bits = struct.unpack(f"<{len(items)}I", struct.pack(f"<{len(items)}f", *items))
    elif None in bits:
        return None
    return "f32:" + ",f32:".join(map(str, bits))


def _float64s(items: list[Any], bits: Any) -> str:
    n = len(items)
    return ",".join(map(str, struct.unpack(f"<{n}Q", struct.pack(f"<{n}d", *items))))


def _uint64s(items: list[Any], bits: Any) -> str:
    return ",".join([str(v - (1 << 64) if v >= 1 << 63 else v) for v in map(int, items)])


def _ints(items: list[Any], bits: Any) -> str:
    return ",".join(map(str, map(int, items)))


_ARRAYS: dict[str, Callable[[list[Any], Any], str | None]] = {
    "string": _strings,
    "bool": _bools,
    "float32": _float32s,
    "float64": _float64s,
    "uint64": _uint64s,
    **dict.fromkeys(("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64"), _ints),
}


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


def _byte_length(fmt: str, t: TensorInfo) -> int:
    if fmt == "gguf":
        size = _GGUF_PLAIN_SIZES.get(t.stored_dtype.lower())
        n = math.prod(t.shape)
        return 0 if size is None or n >= 1 << 64 else (n * size) % (1 << 64)
    if fmt == "safetensors":
        return t.nbytes  # stored raw: weight-inspect's byte_length
    return t.decoded_nbytes  # the logical size: recompressing keeps the hash


def _structural_dtype(fmt: str, t: TensorInfo) -> str:
    """A tensor's dtype in the structural hash: the file's name lower-cased
    (weight-inspect's recipe), but a type tensorfile does not know as its
    :attr:`~tensorfile.core.catalog.TensorInfo.common_dtype`, case kept (``X.Foo/1`` is
    not ``x.foo/1``) and never the name of a known type (``ext:f32``)."""
    if t.type_known or t.layout == "quantized":
        return file_dtype(fmt, t).lower()
    return _id_dtype(t)


def _id_dtype(t: TensorInfo) -> str:
    """A tensor's dtype in the content id's head (and, for a type tensorfile does not know,
    in the structural hash): :attr:`~tensorfile.core.catalog.TensorInfo.common_dtype`, and
    for a type tensorfile does not know (a zTensor v2 logical type it has not registered)
    ``@`` and the storage dtype its bytes are held as, lower-cased (``x.foo/1@u16``): the
    same bytes stored as ``f16`` or ``u16`` under one logical type are two tensors to the
    file and to ztensor. A known type's name is its common dtype alone.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Component, TensorInfo
        >>> from tensorfile.core.dtypes import from_name
        >>> u16 = Component(ByteRange(0, 8), from_name("U16"), logical="x.foo/1")
        >>> _id_dtype(TensorInfo("w", u16.dtype, (4,), {"data": u16}, dtype_name="x.foo/1"))
        'x.foo/1@u16'
    """
    if t.type_known or t.layout == "quantized":
        return t.common_dtype
    return f"{t.common_dtype}@{t.dtype.name.lower()}"


def _items(value: Any) -> int:
    """How many items a metadata value counts for in a progress report."""
    if isinstance(value, TypedValue) and value.type == "array":
        return max(1, len(value.value))
    return 1


def canonical_json(s: Catalog, *, progress: Callable[[int, int], None] | None = None) -> str:
    """The compact JSON whose SHA-256 is the structural hash.

    Shapes are written in the order the file stores them (weight-inspect's contract): a
    GGUF tensor's innermost dimension first, the reverse of :attr:`TensorInfo.shape`.
    ``progress(done, total)`` is called as metadata values are canonicalised, counting each
    item of an array (a 150,000-token vocabulary counts 150,000) and each tensor.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
        >>> from tensorfile.core.dtypes import from_name
        >>> f32 = from_name("F32")
        >>> data = {"data": Component(ByteRange(0, 24), f32)}
        >>> t = TensorInfo("w", f32, (2, 3), data, "dense", "f32")
        >>> s = Catalog("gguf", {}, {"w": t}, 0, 0, "3", path="m.gguf")
        >>> print(canonical_json(s))
        {"format":"gguf","gguf_version":3,"metadata":{},"tensors":{"w":{"name":"w","dtype":"f32","shape":[3,2],"byte_length":24}}}
    """
    doc: dict[str, Any] = {"format": s.format}
    if s.format == "gguf" and s.version is not None:
        doc["gguf_version"] = int(s.version)
    fmt = FORMATS.get(s.format)
    reverse = fmt is not None and fmt.reversed_shapes
    if progress is None:
        doc["metadata"] = {k: canonical_value(s.metadata[k]) for k in sorted(s.metadata)}
    else:
        total = sum(_items(v) for v in s.metadata.values()) + len(s.tensors)
        done = 0
        progress(done, total)
        meta = {}
        for k in sorted(s.metadata):
            meta[k] = canonical_value(s.metadata[k])
            done += _items(s.metadata[k])
            progress(done, total)
        doc["metadata"] = meta
    doc["tensors"] = {
        t.name: {
            "name": t.name,
            "dtype": _structural_dtype(s.format, t),
            "shape": list(t.shape[::-1] if reverse else t.shape),
            "byte_length": _byte_length(s.format, t),
        }
        for t in s.by_name()
    }
    if progress is not None:
        progress(total, total)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def structural_hash(
    structure: Catalog | str,
    *,
    progress: Callable[[int, int], None] | None = None,
    allow_full_download: bool | None = None,
) -> str:
    r"""The structural hash of a :class:`~tensorfile.core.catalog.Catalog` (or of the file at
    a path).

    Text the header holds that is not valid Unicode (a lone surrogate, possible only in a
    catalog built by hand: every format's reader refuses one) is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    ``progress(done, total)``, when given, is called as the hash is computed (see
    :func:`canonical_json` for what it counts; reading the header of a path comes before,
    without reports). A vocabulary-sized GGUF header takes a few tenths of a second.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Catalog, Component, TensorInfo
        >>> from tensorfile.core.dtypes import from_name
        >>> f32 = from_name("F32")
        >>> t = TensorInfo("w", f32, (2,), {"data": Component(ByteRange(0, 8), f32)})
        >>> s = Catalog("safetensors", {"lang": "日本語"}, {"w": t}, 0, 0, path="m")
        >>> print(canonical_json(s).partition(',"tensors"')[0])
        {"format":"safetensors","metadata":{"lang":"\"日本語\""}
        >>> structural_hash(s) == hashlib.sha256(canonical_json(s).encode()).hexdigest()
        True
        >>> seen = []
        >>> _ = structural_hash(s, progress=lambda done, total: seen.append((done, total)))
        >>> seen[-1]
        (2, 2)
    """
    allow = allow_full_download
    s = load(structure, allow_full_download=allow) if isinstance(structure, str) else structure
    try:
        data = canonical_json(s, progress=progress).encode("utf-8")
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
    algorithm: str = "sha256",
    verify: bool = False,
    trust_stored_digests: bool = False,
    max_dense_bytes: int = MAX_DENSE_BYTES,
    allow_full_download: bool | None = None,
) -> str:
    """The content id: SHA-256 over every tensor's name, common dtype, shape and the digest
    ``algorithm`` of its data bytes, in name order (see the module's docstring).

    Every tensor's bytes are read and hashed. With ``trust_stored_digests=True`` (a trust
    boundary: for files you trust), a tensor whose file stores a digest ``algorithm`` of
    exactly its data bytes (:meth:`~tensorfile.core.reader.Reader.stored_digest`: a
    safetensors file's ``tensorfile.digests``, a raw zTensor v1.0 component's
    crc32c/sha256, a zTensor v2 part's xxh3/sha256) is not read: its digest enters the id
    as the file claims it, unchecked, so a byte changed after writing goes unseen. With
    ``verify=True`` every digest the file stores is checked as the data is read: a
    mismatch raises the format's :class:`~tensorfile.errors.ChecksumError`
    (``SafetensorChecksumError``, ``ZTensorChecksumError``) naming the tensor, and a file
    with tensors no digest covers gets a :class:`~tensorfile.errors.NoDigestsWarning`. The
    two contradict each other (one reads nothing a digest covers, the other reads and
    checks everything): asking for both is an
    :class:`~tensorfile.errors.InvalidArgumentError`. ``algorithm`` is one of ``xxh3``,
    ``crc32c`` and ``sha256``; the id depends on the content and the algorithm only, never
    on which of these ways computed it. A ``sha256`` id is 64 lower-case hex digits; an
    ``xxh3`` or ``crc32c`` one is ``xxh3:`` or ``crc32c:`` and 64 hex digits: it detects
    accidental changes only, a forger can keep it (see the module docstring).

    ``progress(done, total)`` is called as bytes are hashed (for a progress bar); ``total``
    counts the bytes to read, not those of tensors a stored digest covers. Memory stays
    bounded: stored bytes are read a chunk at a time and sparse tensors are densified a
    chunk at a time; a sparse tensor whose dense form is over ``max_dense_bytes`` is refused
    with :class:`~tensorfile.errors.UnsupportedError` before any data is read.
    """
    Digest(algorithm)  # an unknown algorithm: refused before anything is opened
    if verify and trust_stored_digests:
        raise InvalidArgumentError(
            "verify=True reads every tensor and checks the digests the file stores; "
            "trust_stored_digests=True takes them unchecked instead of reading: choose one"
        )
    s = load(path, allow_full_download=allow_full_download)
    files = files_of(s)
    by_file = open_readers(
        s, allow_full_download=allow_full_download, verify=True if verify else None
    )
    # the stored digests used: with verify every one (each checked against the bytes read);
    # trusted, the id's own (its tensor unread); by default none (every tensor read)
    wanted = ALGORITHMS if verify else (algorithm,) if trust_stored_digests else ()
    try:
        plan: list[tuple[TensorInfo, Reader, dict[str, str]]] = []
        for t in s.by_name():  # every refusal before the first byte of data
            reader = by_file[t.file or files[0]]
            with naming(reader.source.name):
                check_densifiable(reader.info(t.name), reader.source.name, max_dense_bytes)
                plan.append((t, reader, _stored(reader, t.name, wanted)))
        total = sum(t.numel * _itemsize(t) for t, _, got in plan if verify or not got)
        done = 0
        h = hashlib.sha256(CONTENT_PREFIX)
        for t, reader, stored in plan:
            info = reader.info(t.name)
            h.update(_head(reader, info, t))
            value = None if verify else stored.get(algorithm)
            if value is None:
                digests = {a: Digest(a) for a in (algorithm, *stored)}
                with naming(reader.source.name):
                    chunks = _tensor_chunks(reader, t.name)
                    if t.common_dtype == "BOOL" and is_plain(info):  # nonzero is True: as 1
                        chunks = map(_bool_bytes, chunks)
                    for chunk in chunks:
                        for d in digests.values():
                            d.update(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, max(total, done))
                    for alg, want in stored.items():
                        if digests[alg].value() != want:
                            _mismatch(reader, t.name, digests[alg].value(), want)
                value = digests[algorithm].value()
            h.update(value.encode() + b"\n")
        if progress is not None:
            progress(max(total, done), max(total, done))
    finally:
        for r in by_file.values():
            r.close()
    return h.hexdigest() if algorithm == "sha256" else f"{algorithm}:{h.hexdigest()}"


CONTENT_PREFIX = b"tensorfile-content-v2\n"
"""The bytes the content id's SHA-256 starts with."""


def _stored(reader: Reader, name: str, wanted: tuple[str, ...]) -> dict[str, str]:
    """The digests of ``name``'s data bytes its file stores, of the ``wanted`` algorithms."""
    return {a: d for a in wanted if (d := reader.stored_digest(name, a)) is not None}


def _mismatch(reader: Reader, name: str, got: str, want: str) -> NoReturn:
    """Raise the error of a tensor whose data bytes have digest ``got``, not the ``want``
    its file stores: the reader's own (a verifying read checks it), else a ChecksumError."""
    reader.get_tensor(name)
    raise ChecksumError(
        f"{reader.source.name}: tensor {name!r} has digest {got}, the file records {want}: "
        "its bytes changed after it was written"
    )


def _itemsize(t: TensorInfo) -> int:
    if t.type_known:
        return t.dtype.itemsize
    return max(1, t.nbytes // max(1, t.numel))


_RULED = ("bool", "f4_e2m1")
"""zTensor v2 logical types whose bytes obey a rule (bool bytes 0 or 1, an odd F4 count's
pad nibble zero): read through the reader, which refuses bytes that break it."""


def _bool_bytes(chunk: bytes | bytearray) -> bytes:
    """BOOL bytes as 0 and 1 (a file may store any nonzero byte for True; the reference
    and numpy read it as True, zTensor v2 stores 1)."""
    import numpy as np

    return np.frombuffer(chunk, np.uint8).astype(bool).view(np.uint8).tobytes()


def is_plain(info: TensorInfo) -> bool:
    """Whether the content id hashes ``info`` as a plain tensor (its data bytes, under the
    head ``{"name","dtype","shape"}``): a dense or sparse tensor, or ggml's blocks as stored
    (:func:`~tensorfile.core.reader.holds_blocks`); any other layout is an extension one,
    hashed part by part (:func:`_framed_parts`)."""
    return info.layout in _PLAIN_LAYOUTS or holds_blocks(info)


_PLAIN_LAYOUTS = ("dense", "sparse_csr", "sparse_coo")


def _head(reader: Reader, info: TensorInfo, t: TensorInfo) -> bytes:
    """A tensor's head in the id: its compact JSON and ``\n`` (JSON escapes every control
    character, so the first ``\n`` ends it). An extension layout's head also names the
    layout and, when its object has any (zTensor v2), the deterministic CBOR of its
    attributes as hex, so a plain tensor's head (which has neither key) never equals one."""
    head: dict[str, Any] = {"name": t.name, "dtype": _id_dtype(t), "shape": list(t.shape)}
    if not is_plain(info):
        head["layout"] = file_name(info.layout)  # as the file names it
        attributes = _attributes(reader, t.name)
        if attributes:
            head["attributes"] = attributes
    return json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _attributes(reader: Reader, name: str) -> str | None:
    """The attributes of zTensor v2 object ``name`` as the hex of their canonical CBOR
    encoding (RFC 7049 §3.9: map keys sorted, shortest forms, so one value has one
    encoding); None when the object has none, or the format has no object attributes."""
    inner = reader.reader_of(name) if hasattr(reader, "reader_of") else reader
    get = getattr(inner, "object_attributes", None)
    found = get(name) if get is not None else None
    if not found:
        return None
    import cbor2

    return cbor2.dumps(found, canonical=True).hex()


def _frame(role: str, info: TensorInfo, nbytes: int) -> bytes:
    """What precedes an extension part's bytes: the compact JSON ``[role, dtype, logical
    type or null, byte length]`` and ``\n``; the length says where the bytes end."""
    comp = info.components[role]
    frame = [role, comp.dtype.name, comp.logical, nbytes]
    return json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _tensor_chunks(reader: Reader, name: str) -> Iterator[bytes | bytearray]:
    """The tensor's data bytes, a chunk at a time (stored bytes are streamed; GGUF's
    quantized blocks as they are stored; sparse tensors densified piece by piece; an
    extension layout's parts framed, see :func:`_frame`)."""
    info = reader.info(name)
    if not is_plain(info):  # an extension layout: each part, by role, framed
        for role, part in components(reader.get_tensor(name)).items():
            data = part.tobytes()
            yield _frame(role, info, len(data))
            yield data
        return
    if info.layout in ("dense", "quantized") and all(
        c.encoding == "raw" and c.shard is None and c.logical not in _RULED
        for c in info.components.values()
    ):  # stored bytes in this file are the tensor's bytes (a v2 part in a shard is elsewhere)
        rng = info.byte_range
        for pos in range(0, rng.length, _CHUNK):
            buf = bytearray(min(_CHUNK, rng.length - pos))
            reader.source.readinto(rng.start + pos, [memoryview(buf)])
            yield buf
        return
    if info.layout == "dense" and info.dtype.is_subbyte:  # F4: packed, as a raw file stores it
        packed = bytearray(info.dtype.nbytes(info.numel))
        reader.read_into([name], lambda _info: (memoryview(packed), lambda: packed))
        for pos in range(0, len(packed), _CHUNK):
            yield packed[pos : pos + _CHUNK]
        return
    value = reader.get_tensor(name)
    if is_extension(value):  # ggml blocks (a zTensor v2 part encoded or in a shard), as
        yield components(value)["data"].tobytes()  # GGUF stores them: one id for both
        return
    for piece in dense_chunks(value, _CHUNK // max(1, info.dtype.itemsize)):
        yield piece.tobytes()
