"""The zTensor v1.0 container: magic, footer and CBOR manifest, parsed into a Catalog.

Parsing follows §6 of the spec and its security section, plus what a hostile file needs: the
manifest size must fit the file (``<= FILE_SIZE - 16``, so a file with no tensors is valid),
the CBOR must be one map within the decoder's limits, every component must lie between the
magic and the manifest without overlapping another, raw dense components must hold exactly
shape × itemsize bytes, and the components a known layout requires must be there. Version
negotiation: the same major proceeds (a warning for a newer minor), another major fails.

Manifests in the form writers produce are parsed and checked for all tensors at once by
:mod:`._manifest_fast`; anything else (and anything wrong) goes through the
entry-by-entry checks here, which say exactly what is wrong.

Example:
    >>> from tensorfile.core.dtypes import from_ztensor
    >>> blob = encode_manifest({"w": {"dtype": "float32", "shape": [2], "format": "dense",
    ...     "components": {"data": {"offset": 64, "length": 8}}}}, {}, "doc")
    >>> cat = parse_manifest(blob, manifest_start=72, file_size=72 + len(blob) + 8, name="f")
    >>> cat.tensors["w"].data.range, cat.version
    (ByteRange(start=64, stop=72), '1.0')
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from tensorfile.core import dtypes
from tensorfile.core.catalog import (
    LAYOUT_NAMES,
    ByteRange,
    Catalog,
    Component,
    TensorInfo,
    extension_name,
    file_name,
    first_overlap,
)
from tensorfile.core.dtypes import DType
from tensorfile.core.errors import ZTensorError, ZTensorUnsupportedError, ZTensorWarning
from tensorfile.core.reader import brief
from tensorfile.formats import ZTENSOR
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor._codecs import ENCODINGS, MAX_ZSTD_RATIO, check_digest
from tensorfile.formats.ztensor.v1._manifest_fast import fast_catalog

__all__ = [
    "ALIGNMENT",
    "FOOTER_SIZE",
    "INDEX_DTYPE",
    "MAGIC",
    "MAX_MANIFEST_SIZE",
    "READER_VERSION",
    "REQUIRED_COMPONENTS",
    "component_dtype",
    "encode_manifest",
    "numel_within",
    "parse_manifest",
    "parse_manifest_precise",
]

MAGIC = ZTENSOR.magic + b"1000"
ALIGNMENT = 64
FOOTER_SIZE = 8
READER_VERSION = (1, 0)
MAX_MANIFEST_SIZE = 1 << 30
"""Largest manifest tensorfile reads (1 GiB; a 100,000-tensor manifest is ~10 MB)."""

INDEX_DTYPE: DType = dtypes.from_ztensor("uint64")

REQUIRED_COMPONENTS: Mapping[str, tuple[str, ...]] = {
    "dense": ("data",),
    "sparse_csr": ("values", "indices", "indptr"),
    "sparse_coo": ("values", "coords"),
}
"""The components each layout the spec defines must have."""

_INDEX_ROLES = frozenset({"indices", "indptr", "coords"})
_VALUE_ROLES = frozenset({"data", "values"})
_MAX_U64 = (1 << 64) - 1


def component_dtype(role: str, dtype: DType) -> DType:
    """The element type of a component: the tensor's dtype for ``data``/``values``,
    uint64 for the index arrays, raw bytes (uint8) for roles of unknown layouts."""
    if role in _VALUE_ROLES:
        return dtype
    if role in _INDEX_ROLES:
        return INDEX_DTYPE
    return dtypes.from_ztensor("uint8")


def _fail(message: str, *, tensor: str | None = None, offset: int | None = None) -> ZTensorError:
    return ZTensorError(message, tensor=tensor, offset=offset)


def _check_version(root: Mapping[str, Any], name: str) -> str:
    version = root.get("version")
    if not isinstance(version, str):
        raise _fail(f"{name}: the manifest's 'version' must be a text string, got {brief(version)}")
    parts = version.split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() for p in parts):
        raise _fail(f"{name}: the manifest's version {brief(version)} is not MAJOR.MINOR")
    # (a part of thousands of digits is only a large number: int() would refuse it)
    major, minor = (int(p) if len(p) <= 18 else 10**18 for p in parts[:2])
    if major != READER_VERSION[0]:
        raise ZTensorUnsupportedError(
            f"{name}: zTensor version {_clip(version)} is not supported; tensorfile reads "
            f"{READER_VERSION[0]}.x files"
        )
    if minor > READER_VERSION[1]:
        warnings.warn(
            f"{name}: zTensor version {_clip(version)} is newer than the "
            f"{READER_VERSION[0]}.{READER_VERSION[1]} tensorfile reads; features it adds "
            "are ignored",
            ZTensorWarning,
            stacklevel=5,  # (the caller of read_catalog)
        )
    return version


def _clip(text: str, limit: int = 40) -> str:
    """``text`` for a message, cut when longer than ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _text_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _fail(f"{what} must be a map of text to text, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise _fail(f"{what} must map text to text; entry {brief(k)}: {brief(v)} does not")
    return value


class _Where:
    """Where in the manifest a check runs, formatted only when a message needs it."""

    __slots__ = ("file", "role", "tensor")

    def __init__(self, file: str, tensor: str, role: str | None = None) -> None:
        self.file, self.tensor, self.role = file, tensor, role

    def __str__(self) -> str:
        text = f"{self.file}: tensor {brief(self.tensor)}"
        return text if self.role is None else f"{text} component {brief(self.role)}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _uint(value: Any, where: _Where, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_U64:
        raise _fail(
            f"{where}: {what} must be an unsigned 64-bit integer, got {brief(value)}",
            tensor=where.tensor,
        )
    return value


def _component(role: str, raw: Any, dtype: DType, tensor: str, limit: int, name: str) -> Component:
    where = _Where(name, tensor, role)
    if not isinstance(raw, dict):
        raise _fail(f"{where} must be a map, got {type(raw).__name__}", tensor=tensor)
    if "offset" not in raw or "length" not in raw:
        raise _fail(f"{where} needs 'offset' and 'length'", tensor=tensor)
    offset = _uint(raw["offset"], where, "offset")
    length = _uint(raw["length"], where, "length")
    if offset + length > limit or (length and offset < len(MAGIC)):
        raise _fail(
            f"{where}: bytes [{offset}, {offset + length}) lie outside the component area "
            f"[{len(MAGIC)}, {limit}) between the magic and the manifest",
            tensor=tensor,
            offset=offset,
        )
    encoding = raw.get("encoding")
    if encoding is None:
        encoding = "raw"
    if encoding not in ENCODINGS:
        raise ZTensorUnsupportedError(
            f"{where}: unknown encoding {brief(encoding)} (zTensor defines raw and zstd)",
            tensor=tensor,
            offset=offset,
        )
    digest = raw.get("digest")
    if digest is not None:
        if not isinstance(digest, str):
            raise _fail(f"{where}: digest must be text, got {brief(digest)}", tensor=tensor)
        check_digest(digest, what=str(where))
    if offset % ALIGNMENT and length:
        warnings.warn(
            f"{where}: offset {offset} is not a multiple of {ALIGNMENT}; reading it anyway",
            ZTensorWarning,
            stacklevel=6,
        )
    return Component(
        ByteRange(offset, offset + length), component_dtype(role, dtype), encoding, digest
    )


def _tensor(tname: Any, raw: Any, limit: int, name: str) -> TensorInfo:
    if not isinstance(tname, str):
        raise _fail(f"{name}: a tensor name is not text: {brief(tname)}")
    where = _Where(name, tname)
    if not isinstance(raw, dict):
        raise _fail(f"{where} must be a map, got {type(raw).__name__}", tensor=tname)
    for key in ("dtype", "shape", "format", "components"):
        if key not in raw:
            raise _fail(f"{where} has no {key!r}", tensor=tname)
    dtype_name, shape_raw, layout, comps = (
        raw["dtype"],
        raw["shape"],
        raw["format"],
        raw["components"],
    )
    if not isinstance(dtype_name, str):
        raise _fail(f"{where}: dtype must be text, got {brief(dtype_name)}", tensor=tname)
    try:
        dtype = dtypes.from_ztensor(dtype_name)
    except KeyError:
        raise ZTensorUnsupportedError(
            f"{where}: unknown dtype {brief(dtype_name)}", tensor=tname
        ) from None
    if not isinstance(shape_raw, list):
        raise _fail(f"{where}: shape must be an array, got {brief(shape_raw)}", tensor=tname)
    shape = tuple([_uint(d, where, "a shape dimension") for d in shape_raw])
    if not isinstance(layout, str):
        raise _fail(f"{where}: format must be text, got {brief(layout)}", tensor=tname)
    if not isinstance(comps, dict):
        raise _fail(f"{where}: components must be a map", tensor=tname)
    components: dict[str, Component] = {}
    for role, craw in comps.items():
        if not isinstance(role, str):
            raise _fail(f"{where}: a component role is not text: {brief(role)}", tensor=tname)
        components[role] = _component(role, craw, dtype, tname, limit, name)
    if layout not in REQUIRED_COMPONENTS:  # an extension: never one of tensorfile's names
        layout = extension_name(layout, LAYOUT_NAMES)
    info = TensorInfo(tname, dtype, shape, components, layout, dtype_name)
    _check_layout(info, where)
    return info


def _check_layout(info: TensorInfo, where: _Where) -> None:
    itemsize = info.dtype.itemsize
    # every layout's shape, extension layouts' too: its bytes must fit in 64 bits, and so
    # must those of its non-zero dimensions, so that no later product over the shape (of
    # 100,000 dimensions, say) is ever a huge number
    numel = numel_within(info.shape, _MAX_U64 // itemsize)
    if numel is None:
        raise _fail(
            f"{where}: a shape of {len(info.shape):,} dimensions whose "
            f"{info.dtype.ztensor_name} bytes overflow 64 bits"
            + (" (not counting its zero dimensions)" if 0 in info.shape else ""),
            tensor=info.name,
        )
    required = REQUIRED_COMPONENTS.get(info.layout)
    if required is None:
        return  # an extension layout: listed, readable component by component
    missing = [r for r in required if r not in info.components]
    if missing:
        raise _fail(
            f"{where}: a {info.layout} tensor needs the component(s) {', '.join(missing)}",
            tensor=info.name,
        )
    if 0 in info.shape:
        numel = 0
    if info.layout == "dense":
        _check_size(info.data, numel * itemsize, where, "data")
    elif info.layout == "sparse_csr":
        if len(info.shape) != 2:
            raise _fail(
                f"{where}: a sparse_csr tensor must be 2-D, its shape is {list(info.shape)}",
                tensor=info.name,
            )
        _check_size(info.components["indptr"], (info.shape[0] + 1) * 8, where, "indptr")
        _check_sparse_counts(info, "indices", 1, where)
    else:
        _check_sparse_counts(info, "coords", len(info.shape), where)


def numel_within(shape: tuple[int, ...], limit: int) -> int | None:
    """The product of the non-zero dimensions of ``shape``, or None as soon as it passes
    ``limit`` (linear time even for thousands of huge dimensions)."""
    n = 1
    for d in shape:
        if d:
            n *= d
            if n > limit:
                return None
    return n


def _check_size(comp: Component, expected: int, where: _Where, role: str) -> None:
    """A raw component must hold exactly ``expected`` bytes; a zstd one must be able to."""
    stored = comp.range.length
    if comp.encoding == "raw" and stored != expected:
        raise _fail(
            f"{where}: shape and dtype need {expected:,} bytes of {brief(role)} but the component "
            f"holds {stored:,}",
            tensor=where.tensor,
            offset=comp.range.start,
        )
    if comp.encoding == "zstd" and expected > MAX_ZSTD_RATIO * stored + (1 << 20):
        raise _fail(
            f"{where}: {stored:,} zstd bytes of {brief(role)} cannot decompress to the "
            f"{expected:,} bytes the shape declares",
            tensor=where.tensor,
            offset=comp.range.start,
        )


def _check_sparse_counts(info: TensorInfo, index_role: str, per_value: int, where: _Where) -> None:
    """Raw sparse components must agree on the number of stored values (nnz)."""
    values, index = info.components["values"], info.components[index_role]
    itemsize = info.dtype.itemsize
    if values.encoding != "raw" or index.encoding != "raw":
        return  # checked against the decoded bytes when read
    if values.range.length % itemsize:
        raise _fail(
            f"{where}: values hold {values.range.length} bytes, not a whole number of "
            f"{info.dtype.ztensor_name} elements",
            tensor=info.name,
        )
    nnz = values.range.length // itemsize
    if index.range.length != nnz * per_value * 8:
        raise _fail(
            f"{where}: {nnz} values need {nnz * per_value * 8} bytes of uint64 {index_role}, "
            f"the component holds {index.range.length}",
            tensor=info.name,
        )


def _check_overlaps(tensors: Mapping[str, TensorInfo], name: str) -> None:
    found = first_overlap(
        (c.range.start, c.range.stop, (t.name, role))
        for t in sorted(tensors.values(), key=lambda t: t.name)
        for role, c in sorted(t.components.items())
    )
    if found is not None:
        (_s0, _e0, (t0, r0)), (s1, _e1, (t1, r1)) = found
        raise _fail(
            f"{name}: component {brief(r1)} of tensor {brief(t1)} overlaps component "
            f"{brief(r0)} of tensor {brief(t0)} at byte {s1}",
            tensor=t1,
            offset=s1,
        )


def parse_manifest(data: bytes, *, manifest_start: int, file_size: int, name: str) -> Catalog:
    """Decode and validate a manifest found at ``manifest_start`` of a ``file_size`` file.

    Manifests in the form every writer produces take the fast path
    (:func:`~._manifest_fast.fast_catalog`); anything else, and anything
    wrong, is parsed entry by entry (:func:`parse_manifest_precise`), which says precisely
    what is wrong."""
    fast = fast_catalog(data, manifest_start=manifest_start)
    if fast is not None:
        return fast
    return parse_manifest_precise(
        data, manifest_start=manifest_start, file_size=file_size, name=name
    )


def parse_manifest_precise(
    data: bytes, *, manifest_start: int, file_size: int, name: str
) -> Catalog:
    """:func:`parse_manifest` entry by entry, every TensorInfo built at once."""
    if data and data[0] >> 5 not in (5, 6):  # not a map (or a tag): refused before decoding
        raise _fail(
            f"{name}: the manifest must be a CBOR map, but its first byte is 0x{data[0]:02x}",
            offset=manifest_start,
        )
    try:
        root = _cbor.decode(data)
    except _cbor.CBORDecodeError as exc:
        raise _fail(
            f"{name}: the manifest is not valid CBOR: {exc}",
            offset=manifest_start + exc.offset,
        ) from exc
    if not isinstance(root, dict):
        raise _fail(f"{name}: the manifest must be a CBOR map, got {type(root).__name__}")
    version = _check_version(root, name)
    generator = root.get("generator")
    if not isinstance(generator, str):
        raise _fail(f"{name}: the manifest's 'generator' must be a text string")
    if "attributes" not in root:
        raise _fail(f"{name}: the manifest has no 'attributes' map")
    attributes = _text_map(root["attributes"], f"{name}: the manifest's attributes")
    raw_tensors = root.get("tensors", {})
    if not isinstance(raw_tensors, dict):
        raise _fail(f"{name}: the manifest's 'tensors' must be a map")
    tensors = {
        info.name: info
        for info in (_tensor(k, v, manifest_start, name) for k, v in raw_tensors.items())
    }
    _check_overlaps(tensors, name)
    ordered = dict(
        sorted(
            tensors.items(),
            key=lambda kv: min((c.range.start for c in kv[1].components.values()), default=0),
        )
    )
    return Catalog(
        format="ztensor",
        metadata=attributes,
        tensors=ordered,
        header_size=len(data),
        data_start=len(MAGIC),
        version=version,
        extra={"generator": generator, "manifest_start": manifest_start},
    )


def _component_entry(comp: Component) -> dict[str, Any]:
    entry: dict[str, Any] = {"offset": comp.range.start, "length": comp.range.length}
    if comp.encoding != "raw":
        entry["encoding"] = comp.encoding
    if comp.digest is not None:
        entry["digest"] = comp.digest
    return entry


def encode_manifest(
    tensors: Mapping[str, Mapping[str, Any] | TensorInfo],
    attributes: Mapping[str, str],
    generator: str,
) -> bytes:
    """The CBOR manifest the v1.0 reference writes: root keys version, generator,
    attributes, tensors; tensors, attributes and components in bytewise key order; a
    component's ``encoding`` only when not raw."""
    entries: dict[str, Any] = {}
    for tname in sorted(tensors):
        t = tensors[tname]
        if isinstance(t, TensorInfo):
            name_of = t.dtype.ztensor_name
            entries[tname] = {
                "dtype": name_of,
                "shape": list(t.shape),
                "format": file_name(t.layout),
                "components": {r: _component_entry(t.components[r]) for r in sorted(t.components)},
            }
        else:
            entries[tname] = dict(t)
    root = {
        "version": f"{READER_VERSION[0]}.{READER_VERSION[1]}",
        "generator": generator,
        "attributes": {k: attributes[k] for k in sorted(attributes)},
        "tensors": entries,
    }
    return _cbor.encode(root)
