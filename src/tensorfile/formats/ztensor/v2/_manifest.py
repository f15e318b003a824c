"""zTensor v2 manifests: every rule of the validation summary (spec §3.6) over a decoded
manifest, and the :class:`~tensorfile.core.catalog.Catalog` it describes.

Each object becomes a :class:`~tensorfile.core.catalog.TensorInfo` whose components are the
object's parts. The two registered sparse profiles are given tensorfile's layout names
(``zt.sparse_csr/1`` is ``"sparse_csr"``, ``zt.sparse_coo/1`` is ``"sparse_coo"``); other
layouts keep their profile id and are exposed structurally, except ggml's block types as
ztensor's GGUF conversion writes them (``gguf.q8_0/1``), which read as GGUF's quantized
tensors do (layout ``"quantized"``, ``dtype_name`` the ggml type). A layout or encoding id
the file chooses never passes for one of tensorfile's own names: an unregistered layout
``sparse_csr`` or ``quantized`` is ``"ext:sparse_csr"``, ``"ext:quantized"``, an
unregistered encoding ``raw`` is ``"ext:raw"``
(:func:`~tensorfile.core.catalog.extension_name`). Each part's digest covers its
decoded bytes (``Component.digest_over == "decoded"``), an encoded part carries its
``decoded_length``, a part in another file names its shard.

File attributes are arbitrary CBOR values; :attr:`Catalog.metadata` maps each key to text
as tensorfile's other formats do: a text value as it is, any other value as its JSON text
(byte strings as lowercase hex text, map keys as text). The values themselves are in
``catalog.extra["attributes"]``; each object's layout id and attributes are in
``catalog.extra["objects"]``.

Example:
    >>> from tensorfile.formats.ztensor import _cbor
    >>> raw = _cbor.encode({"attributes": {"n": 3, "who": "me"}, "objects": {
    ...     "w": {"shape": [2], "layout": "dense",
    ...           "parts": {"data": {"dtype": "f32", "blob": [4096, 8]}}}}}, deterministic=True)
    >>> root = _cbor.decode(raw, deterministic=True)
    >>> cat = catalog_from(root, manifest_at=8192, manifest_length=len(raw),
    ...                    file_size=8192 + len(raw) + 40, name="m.zt")
    >>> cat.metadata, cat.tensors["w"].dtype, cat.tensors["w"].data.range
    ({'n': '3', 'who': 'me'}, DType(F32), ByteRange(start=4096, stop=4104))
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from tensorfile.core import dtypes
from tensorfile.core.catalog import (
    ENCODING_NAMES,
    LAYOUT_NAMES,
    ByteRange,
    Catalog,
    Component,
    TensorInfo,
    extension_name,
)
from tensorfile.core.errors import ZTensorError
from tensorfile.core.reader import brief
from tensorfile.formats.ggml import GGML_TYPES, block_type
from tensorfile.formats.ztensor.v2._format import (
    ALIGN_FLOOR,
    FOOTER_SIZE,
    LOGICAL_TYPES,
    MAX_RANK,
    MAX_U64,
    MIN_FILE_SIZE,
    STORAGE_WIDTH,
    check_digest_text,
    check_name,
    check_shard_name,
    decoded_size,
)

__all__ = ["LAYOUTS", "PROFILE_IDS", "ShardEntry", "attribute_text", "catalog_from"]

LAYOUTS: dict[str, str] = {
    "dense": "dense",
    "zt.sparse_csr/1": "sparse_csr",
    "zt.sparse_coo/1": "sparse_coo",
}
"""tensorfile's layout name of each layout profile it interprets."""

PROFILE_IDS: dict[str, str] = {v: k for k, v in LAYOUTS.items()}
"""The profile id of each of tensorfile's layout names."""

ENCODINGS = ("zt.zstd-seekable/1",)
"""The encoding profiles tensorfile decodes."""


class ShardEntry(NamedTuple):
    """One entry of the shard table: the file's exact size and whole-file digest."""

    size: int
    digest: str


def _fail(message: str, tensor: str | None = None) -> ZTensorError:
    return ZTensorError(message, tensor=tensor)


def _map(value: Any, what: str, tensor: str | None = None) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{what} must be a map, got {brief(value)}", tensor)
    return value


def _uint(value: Any, what: str, tensor: str | None = None) -> int:
    if type(value) is not int or not 0 <= value <= MAX_U64:
        raise _fail(f"{what} must be an unsigned 64-bit integer, got {brief(value)}", tensor)
    return value


def _text(value: Any, what: str, tensor: str | None = None) -> str:
    if not isinstance(value, str):
        raise _fail(f"{what} must be text, got {brief(value)}", tensor)
    return value


def _attributes(value: Any, what: str, tensor: str | None = None) -> dict[str, Any]:
    entries = _map(value, what, tensor)
    for key in entries:
        if not isinstance(key, str):
            raise _fail(f"{what}: an attribute key is not text: {brief(key)}", tensor)
        check_name(key, what, "attribute key")
    return entries


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {
            k if isinstance(k, str) else json.dumps(_jsonable(k)): _jsonable(v)
            for k, v in value.items()
        }
    return value


def attribute_text(value: Any) -> str:
    """An attribute value as metadata text: text as it is, anything else as JSON (byte
    strings as hex text).

    Example:
        >>> attribute_text("x"), attribute_text([1, 2.5, None]), attribute_text(b"\\x01")
        ('x', '[1,2.5,null]', '"01"')
    """
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"))


class _Ctx:
    """What checking one object needs: the file, the region ends and the shard table."""

    def __init__(self, name: str, data_end: int, shards: Mapping[str, ShardEntry]) -> None:
        self.name = name
        self.data_end = data_end
        self.shards = shards


class _Where:
    """Where a check runs, as text only when a message needs it."""

    __slots__ = ("file", "name", "role")

    def __init__(self, file: str, name: str, role: str | None = None) -> None:
        self.file, self.name, self.role = file, name, role

    def __str__(self) -> str:
        text = f"{self.file}: object {brief(self.name)}"
        return text if self.role is None else f"{text} part {brief(self.role)}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_U64


def _part(raw: Any, where: _Where, tensor: str, ctx: _Ctx) -> Component:
    entries = raw if type(raw) is dict else _map(raw, str(where), tensor)
    if "dtype" not in entries or "blob" not in entries:
        raise _fail(f"{where} needs 'dtype' and 'blob'", tensor)
    storage = entries["dtype"]
    if type(storage) is not str:
        storage = _text(storage, f"{where}: dtype", tensor)
    if storage not in STORAGE_WIDTH:
        raise _fail(f"{where}: unknown storage dtype {brief(storage)}", tensor)
    logical = entries.get("type")
    if logical is not None or "type" in entries:
        logical = _text(logical, f"{where}: type", tensor)
        required = LOGICAL_TYPES.get(logical)
        if required is not None and required[0] != storage:
            raise _fail(
                f"{where}: logical type {logical!r} requires dtype {required[0]!r}, not "
                f"{storage!r}",
                tensor,
            )
    blob = entries["blob"]
    if not isinstance(blob, list) or len(blob) != 2:
        raise _fail(f"{where}: blob must be an array [offset, length], got {brief(blob)}", tensor)
    offset, length = blob
    if not (_is_u64(offset) and _is_u64(length)):
        offset = _uint(offset, f"{where}: blob offset", tensor)
        length = _uint(length, f"{where}: blob length", tensor)
    shard = None
    if "shard" in entries:
        shard = check_shard_name(entries["shard"], where)
        if shard not in ctx.shards:
            raise _fail(f"{where}: shard {shard!r} is not in the manifest's shard table", tensor)
    if offset % ALIGN_FLOOR or offset < ALIGN_FLOOR:
        raise _fail(
            f"{where}: blob offset {offset} is not a multiple of {ALIGN_FLOOR} at or past "
            f"{ALIGN_FLOOR}",
            tensor,
        )
    end = ctx.data_end if shard is None else ctx.shards[shard].size - FOOTER_SIZE
    if offset + length > end:
        place = "this file" if shard is None else f"shard {shard!r}"
        raise _fail(
            f"{where}: blob [{offset}, {offset + length}) runs past the data region of {place} "
            f"(which ends at {end})",
            tensor,
        )
    encoding = entries.get("encoding")
    decoded_length = entries.get("decoded_length")
    if ("encoding" in entries) != ("decoded_length" in entries):
        raise _fail(f"{where}: 'decoded_length' is required exactly when 'encoding' is", tensor)
    if "encoding" in entries:
        encoding = _text(encoding, f"{where}: encoding", tensor)
        decoded_length = _uint(decoded_length, f"{where}: decoded_length", tensor)
    digest = entries.get("digest")
    if "digest" in entries:
        digest = check_digest_text(digest, where)
    known = dtypes.from_ztensor_v2(storage, logical if logical in LOGICAL_TYPES else None)
    return Component(
        ByteRange(offset, offset + length),
        known,
        "raw" if encoding is None else extension_name(encoding, ENCODING_NAMES),
        digest,
        "decoded",
        decoded_length,
        shard,
        logical,
    )


def storage_of(comp: Component) -> str:
    """The storage dtype name of a part."""
    return dtypes.ztensor_v2_names(comp.dtype)[0]  # (an unknown type's dtype is its storage)


def decoded_length(comp: Component) -> int:
    """A part's decoded size in bytes."""
    return comp.range.length if comp.decoded_length is None else comp.decoded_length


def _size_of(comp: Component, count: int) -> int | None:
    return decoded_size(storage_of(comp), comp.logical, count)


def _check_layout(
    name: str, layout: str, shape: tuple[int, ...], parts: dict[str, Component], where: _Where
) -> None:
    if layout == "dense":
        if set(parts) != {"data"}:
            raise _fail(f"{where}: a dense object has exactly one part, 'data'", name)
        numel = math.prod(shape)
        expected = _size_of(parts["data"], numel)
        got = decoded_length(parts["data"])
        if expected is not None and got != expected:
            kind = parts["data"].logical or storage_of(parts["data"])
            raise _fail(
                f"{where}: shape {list(shape)} of {kind} needs {expected:,} bytes, the part "
                f"decodes to {got:,}",
                name,
            )
        return
    csr = layout == "zt.sparse_csr/1"
    index_role = "indices" if csr else "coords"
    want = {"values", "indices", "indptr"} if csr else {"values", "coords"}
    if csr and len(shape) != 2:
        raise _fail(f"{where}: a zt.sparse_csr/1 object is 2-D, its shape is {list(shape)}", name)
    if not csr and not shape:
        raise _fail(f"{where}: a zt.sparse_coo/1 object has rank 1 or more", name)
    if set(parts) != want:
        raise _fail(f"{where}: a {layout} object has exactly the parts {sorted(want)}", name)
    index = parts[index_role]
    if index.logical is not None or storage_of(index) not in ("u32", "u64"):
        raise _fail(f"{where}: part {index_role!r} must be plain u32 or u64", name)
    width = STORAGE_WIDTH[storage_of(index)]
    if csr:
        indptr = parts["indptr"]
        if indptr.logical is not None or storage_of(indptr) != storage_of(index):
            raise _fail(f"{where}: part 'indptr' must have the dtype of 'indices'", name)
        if decoded_length(indptr) != (shape[0] + 1) * width:
            raise _fail(
                f"{where}: 'indptr' must hold rows + 1 = {shape[0] + 1:,} elements "
                f"({(shape[0] + 1) * width:,} bytes), it holds {decoded_length(indptr):,} bytes",
                name,
            )
    per = width * (1 if csr else len(shape))
    if decoded_length(index) % per:
        raise _fail(
            f"{where}: {index_role!r} holds {decoded_length(index):,} bytes, not a "
            f"whole number of {per}-byte entries",
            name,
        )
    nnz = decoded_length(index) // per
    expected = _size_of(parts["values"], nnz)
    if expected is not None and decoded_length(parts["values"]) != expected:
        raise _fail(
            f"{where}: {nnz:,} values need {expected:,} bytes, 'values' decodes to "
            f"{decoded_length(parts['values']):,}",
            name,
        )


def _object(name: Any, raw: Any, ctx: _Ctx) -> tuple[TensorInfo, str, Any]:
    check_name(name, ctx.name, "an object name")
    where = _Where(ctx.name, name)
    entries = raw if type(raw) is dict else _map(raw, str(where), name)
    for key in ("shape", "layout", "parts"):
        if key not in entries:
            raise _fail(f"{where} has no {key!r}", name)
    shape_raw = entries["shape"]
    if not isinstance(shape_raw, list):
        raise _fail(f"{where}: shape must be an array, got {brief(shape_raw)}", name)
    if len(shape_raw) > MAX_RANK:
        raise _fail(f"{where}: rank {len(shape_raw)} is over the limit of {MAX_RANK}", name)
    if all(map(_is_u64, shape_raw)):
        shape = tuple(shape_raw)
    else:
        shape = tuple(_uint(d, f"{where}: a dimension", name) for d in shape_raw)
    count = 1
    for dim in shape:  # as the reference: a partial product past 64 bits is refused
        count *= dim
        if count > MAX_U64:
            raise _fail(
                f"{where}: the element count of shape {list(shape)} overflows 64 bits", name
            )
    layout = entries["layout"]
    if type(layout) is not str:
        layout = _text(layout, f"{where}: layout", name)
    attributes = None
    if "attributes" in entries:
        attributes = _attributes(entries["attributes"], f"{where}: attributes", name)
    parts_raw = entries["parts"]
    if type(parts_raw) is not dict:
        parts_raw = _map(parts_raw, f"{where}: parts", name)
    if not parts_raw:
        raise _fail(f"{where} has no parts", name)
    parts: dict[str, Component] = {}
    for role, praw in parts_raw.items():
        check_name(role, where, "a part name")
        parts[role] = _part(praw, _Where(ctx.name, name, role), name, ctx)
    if layout in LAYOUTS:
        _check_layout(name, layout, shape, parts, where)
    main = parts.get("data") or parts.get("values") or parts[min(parts)]
    blocks = _ggml_blocks(layout, shape, parts, attributes)
    info = TensorInfo(
        name,
        main.dtype,
        shape,
        parts,
        "quantized" if blocks else LAYOUTS.get(layout) or extension_name(layout, LAYOUT_NAMES),
        blocks or main.logical or storage_of(main),
    )
    return info, layout, attributes


def _ggml_blocks(
    layout: str, shape: tuple[int, ...], parts: dict[str, Component], attributes: Any
) -> str | None:
    """The ggml block type of an object ztensor's GGUF conversion wrote (``gguf.q8_0/1``:
    one ``u8`` part, the blocks as the GGUF stored them; attributes ``block_bytes`` and
    ``elems_per_block``, when given, those of the type), read as GGUF's quantized tensors
    are; None for any other object (an extension layout, exposed structurally)."""
    if not layout.startswith("gguf.") or set(parts) != {"data"}:
        return None
    data = parts["data"]
    if data.logical is not None or storage_of(data) != "u8":
        return None
    found = block_type(layout, shape, decoded_length(data))
    if found is None or not isinstance(attributes, dict):
        return found
    _, block, size = next(t for t in GGML_TYPES.values() if t[0] == found)
    said = (attributes.get("elems_per_block", block), attributes.get("block_bytes", size))
    return found if said == (block, size) else None


def _shards(raw: Any, name: str) -> dict[str, ShardEntry]:
    out: dict[str, ShardEntry] = {}
    for key, value in _map(raw, f"{name}: the shard table").items():
        check_shard_name(key, f"{name}: the shard table")
        where = f"{name}: shard {key!r}"
        entry = _map(value, where)
        if "size" not in entry or "digest" not in entry:
            raise _fail(f"{where} needs 'size' and 'digest'")
        size = _uint(entry["size"], f"{where}: size")
        if size < MIN_FILE_SIZE:
            raise _fail(f"{where}: size {size} is below the {MIN_FILE_SIZE}-byte minimum")
        out[key] = ShardEntry(size, check_digest_text(entry["digest"], where))
    return out


def _check_overlaps(tensors: dict[str, TensorInfo], manifest: tuple[int, int], name: str) -> None:
    groups: dict[str | None, set[tuple[int, int]]] = {None: {manifest}}
    for info in tensors.values():
        for comp in info.components.values():
            if comp.range.length:
                groups.setdefault(comp.shard, set()).add((comp.range.start, comp.range.stop))
    for shard, spans in groups.items():
        ordered = sorted(spans)
        for (s0, e0), (s1, e1) in itertools.pairwise(ordered):
            if s1 < e0:
                place = "this file" if shard is None else f"shard {shard!r}"
                raise _fail(
                    f"{name}: blobs [{s0}, {e0}) and [{s1}, {e1}) in {place} partially "
                    "overlap (references must be identical or disjoint)"
                )


def catalog_from(
    root: Any, *, manifest_at: int, manifest_length: int, file_size: int, name: str
) -> Catalog:
    """Validate the decoded manifest ``root`` of a ``file_size``-byte file whose manifest
    blob is at ``manifest_at``, and return its catalog."""
    root = _map(root, f"{name}: the manifest")
    if "objects" not in root:
        raise _fail(f"{name}: the manifest has no 'objects' map")
    attributes: dict[str, Any] = {}
    if "attributes" in root:
        attributes = _attributes(root["attributes"], f"{name}: the file attributes")
    shards = _shards(root["shards"], name) if "shards" in root else {}
    ctx = _Ctx(name, file_size - FOOTER_SIZE, shards)
    tensors: dict[str, TensorInfo] = {}
    objects: dict[str, dict[str, Any]] = {}
    for key, value in _map(root["objects"], f"{name}: objects").items():
        info, layout, obj_attributes = _object(key, value, ctx)
        tensors[key] = info
        objects[key] = {"layout": layout, "attributes": obj_attributes}
    _check_overlaps(tensors, (manifest_at, manifest_at + manifest_length), name)
    ordered = dict(sorted(tensors.items(), key=lambda kv: _place(kv[1])))
    return Catalog(
        format="ztensor",
        metadata={k: attribute_text(v) for k, v in attributes.items()},
        tensors=ordered,
        header_size=manifest_length,
        data_start=ALIGN_FLOOR,
        version="2",
        extra={
            "manifest_start": manifest_at,
            "attributes": attributes,
            "objects": objects,
            "shards": shards,
        },
    )


def _place(info: TensorInfo) -> tuple[int, int]:
    comps = info.components.values()
    local = [c.range.start for c in comps if c.shard is None]
    return (0, min(local)) if local else (1, 0)
