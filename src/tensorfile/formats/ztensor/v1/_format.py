"""The zTensor format's hooks for the registry (:mod:`tensorfile.formats`): read the catalog,
open a reader, and rewrite the manifest's ``attributes``.

The manifest ends the file, so an edit clones (or copies) everything before it into a new
file, appends the new manifest and footer, and renames the new file over the old one
(:func:`tensorfile.core.atomic.rewrite`): a process killed at any instant leaves the old file
or the new one. The new manifest is the old one's bytes with only the ``attributes`` entry
replaced: other keys, tensors, and any CBOR tags or encodings another writer used in them,
are kept byte for byte, and so is every attribute the edit leaves as it was.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> ztensor.save_file({"w": np.zeros(2, np.float32)}, path, attributes={"a": "1"})
    >>> cloned = edit_metadata(path, lambda m: {})  # True: the data was cloned (a reflink)
    >>> ztensor.open(path).attributes
    {}
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from tensorfile.core.atomic import check_editable, rewrite
from tensorfile.core.errors import ZTensorError
from tensorfile.core.source import Source
from tensorfile.formats import MetadataChange
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor.v1._manifest import FOOTER_SIZE
from tensorfile.formats.ztensor.v1._reader import ZTensorReader, read_catalog
from tensorfile.sources import LocalSource

__all__ = ["edit_metadata", "new_manifest", "open_reader", "read_catalog"]


class _Entry(NamedTuple):
    """One entry of a CBOR map, with where its key and value are in the bytes."""

    key: Any
    value: Any
    key_at: int
    value_at: int
    end: int


def open_reader(source: Source) -> ZTensorReader:
    """A reader over ``source``."""
    return ZTensorReader(source)


def _split_map(raw: bytes, start: int, stop: int, what: str) -> tuple[bytes, list[_Entry]]:
    """The CBOR map in ``raw[start:stop]``: the tags before it (kept as they are) and its
    entries."""
    dec = _cbor._Decoder(raw[:stop])
    try:
        at = start
        major, _info, count, pos = dec._head(at)
        while major == 6:
            at = pos
            major, _info, count, pos = dec._head(at)
        if major != 5:
            raise ZTensorError(f"{what} is not a CBOR map")
        entries: list[_Entry] = []
        while count != 0:
            if count < 0 and raw[pos : pos + 1] == b"\xff":
                pos += 1
                break
            key, value_at = dec.item(pos, 1)
            value, end = dec.item(value_at, 1)
            entries.append(_Entry(key, value, pos, value_at, end))
            pos = end
            count -= 1
    except _cbor.CBORDecodeError as exc:
        raise ZTensorError(f"{what}: {exc}") from exc
    if pos != stop:
        raise ZTensorError(f"{what}: {stop - pos} bytes follow the map")
    return raw[start:at], entries


def _map(prefix: bytes, entries: list[bytes]) -> bytes:
    return prefix + _cbor.head(5, len(entries)) + b"".join(entries)


def _encode(value: object, name: str) -> bytes:
    try:
        return _cbor.encode(value)
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise ZTensorError(f"{name}: cannot encode the attribute {value!r}: {exc}") from exc


def _attributes(raw: bytes, start: int, stop: int, change: MetadataChange, name: str) -> bytes:
    """The new ``attributes`` map: the entries the change keeps are their old bytes, the
    others encoded; keys sorted."""
    prefix, entries = _split_map(raw, start, stop, f"{name}: the manifest's attributes")
    old = {e.key: e for e in entries}
    new = change({k: e.value for k, e in old.items()})
    out = []
    for key in sorted(new):
        value = new[key]
        e = old.get(key)
        if e is not None and e.value is value:
            out.append(raw[e.key_at : e.end])
        else:
            out.append(_encode(key, name) + _encode(value, name))
    return _map(prefix, out)


def new_manifest(raw: bytes, change: MetadataChange, name: str = "the file") -> bytes:
    """The manifest ``raw`` with its ``attributes`` replaced by ``change(attributes)``; every
    other byte of it is kept (entries, their order, tags, encodings).

    Example:
        >>> raw = _cbor.encode({"version": "1.0", "attributes": {"a": "1"}, "tensors": {}})
        >>> _cbor.decode(new_manifest(raw, lambda m: {**m, "b": "2"}))
        {'version': '1.0', 'attributes': {'a': '1', 'b': '2'}, 'tensors': {}}
    """
    prefix, entries = _split_map(raw, 0, len(raw), f"{name}: the manifest")
    out = []
    done = False
    for e in entries:
        if e.key == "attributes" and not done:
            done = True
            value = _attributes(raw, e.value_at, e.end, change, name)
            out.append(raw[e.key_at : e.value_at] + value)
        else:
            out.append(raw[e.key_at : e.end])
    if not done:
        out.append(_encode("attributes", name) + _attributes(b"\xa0", 0, 1, change, name))
    return _map(prefix, out)


def edit_metadata(path: str, change: MetadataChange) -> bool:
    """Give the file at ``path`` the attributes ``change(old)`` by writing a new file renamed
    into place; True when its tensor bytes are shared with the old file (a reflink clone),
    False when they were copied."""
    real, expect = check_editable(path)  # follows symlinks; refuses hard links, read-only
    with LocalSource(real) as src:
        cat = read_catalog(src)
        start = src.size - FOOTER_SIZE - cat.header_size
        raw = src.read(start, cat.header_size)
    manifest = new_manifest(raw, change, path)
    footer = struct.pack("<Q", len(manifest))
    return rewrite(path, b"", 0, start, manifest + footer, expect=expect) == "reflink"
