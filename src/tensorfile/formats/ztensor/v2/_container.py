"""Open the container of a zTensor v2 file (spec §8 steps 1-6): footer, manifest bounds, the
1 GiB cap, the XXH3-64 check, the deterministic-CBOR parse and the validation summary; and
find the files a manifest's shard table names (Appendix B's positional convention).

Opening costs two reads, the footer and the manifest (one request over HTTP when the
manifest is in the file's last 100,000 bytes). A data shard (``manifest_length`` 0) opens
as a file with no tensors.

Example:
    >>> import numpy as np
    >>> from tensorfile.sources import MemorySource
    >>> from tensorfile.formats.ztensor.v2._writer import to_bytes
    >>> data = to_bytes({"w": np.arange(3, dtype=np.int16)}, checksum="xxh3")
    >>> cat = read_catalog(MemorySource(data))
    >>> cat.version, cat.tensors["w"].shape, cat.tensors["w"].data.digest[:5]
    ('2', (3,), 'xxh3:')
"""

from __future__ import annotations

import os
import struct
from typing import Any

from tensorfile.core.catalog import Catalog
from tensorfile.core.errors import SourceError, ZTensorError, ZTensorIOError
from tensorfile.core.source import Source
from tensorfile.formats.ztensor import _cbor
from tensorfile.formats.ztensor.v2._format import (
    ALIGN_FLOOR,
    FOOTER_SIZE,
    MAGIC,
    MAX_MANIFEST_SIZE,
    MIN_FILE_SIZE,
    VERSION,
    manifest_hash,
    parse_footer,
)
from tensorfile.formats.ztensor.v2._manifest import ShardEntry, catalog_from

__all__ = ["check_frame", "read_catalog", "shard_path"]


def check_frame(source: Source) -> bytes:
    """Check the size, the header magic and the footer's magic and version of the file in
    ``source``; return the footer. A file that begins with the magic but lacks the footer's
    is said to look truncated, with the size it had when that can be told
    (:func:`_whole_size`)."""
    name, size = source.name, source.size
    if size < MIN_FILE_SIZE:
        head = source.read(0, min(size, len(MAGIC)))
        cut = (
            "; it begins like one, so it looks truncated" if head and MAGIC.startswith(head) else ""
        )
        raise ZTensorError(
            f"{name}: {size} bytes is too short for a zTensor v2 file (the magic and the "
            f"footer alone take {MIN_FILE_SIZE}){cut}"
        )
    head = source.read(0, len(MAGIC))
    if head != MAGIC:
        raise ZTensorError(f"{name}: not a zTensor v2 file (magic {head!r})", offset=0)
    footer = source.read(size - FOOTER_SIZE, FOOTER_SIZE)
    if footer[-len(MAGIC) :] != MAGIC:
        raise ZTensorError(_truncated(source, footer[-len(MAGIC) :]), offset=size - len(MAGIC))
    return footer


def _truncated(source: Source, last: bytes) -> str:
    """The message for a file that begins with the v2 magic and does not end with it."""
    size, whole = source.size, _whole_size(source)
    if whole is None:
        how_long = (
            "how long it was cannot be told: its footer, which would say, is cut off (or the "
            "file was damaged at its end)"
        )
    else:
        how_long = (
            f"whole, it is {whole:,} bytes long ({whole - size:,} bytes are missing: only the "
            f"first {FOOTER_SIZE - (whole - size)} of its {FOOTER_SIZE}-byte footer are there)"
        )
    return (
        f"{source.name} looks truncated: it begins with the zTensor v2 magic but does not end "
        f"with it (its last {len(last)} bytes are {last!r}, the footer's magic is {MAGIC!r}); "
        f"{how_long}"
    )


_FOOTER_HEAD = 16
"""The footer bytes that say where it is: its manifest's offset and length (the footer
follows the manifest)."""


def _whole_size(source: Source) -> int | None:
    """The size of a zTensor v2 file cut short inside its footer, or None when that cannot be
    told.

    A footer follows its manifest, so the footer starting at ``q`` has ``manifest_offset +
    manifest_length == q``. Each place in the last 39 bytes where at least the 16 bytes
    holding those two numbers remain is tried: they must agree (an aligned offset past the
    magic, a non-empty manifest), and so must every footer byte that survived (the manifest's
    XXH3-64 against the manifest itself, the version, the reserved zeros, the start of the
    magic). Exactly one place must pass; the size is then ``q + 40``.

    Example:
        >>> from tensorfile.sources import MemorySource
        >>> from tensorfile.formats.ztensor.v2._format import encode_footer
        >>> manifest = b"m" * 10
        >>> footer = encode_footer(4096, 10, manifest_hash(manifest))
        >>> whole = MAGIC + bytes(4088) + manifest + footer
        >>> [_whole_size(MemorySource(whole[:-cut])) for cut in (7, 20, 25)]
        [4146, 4146, None]
        >>> len(whole)  # (with 15 footer bytes left, where the footer starts is unknown)
        4146
    """
    size = source.size
    start = max(len(MAGIC), size - FOOTER_SIZE + 1)
    tail = source.read(start, size - start)
    found = []
    for q in range(start, size - _FOOTER_HEAD + 1):
        rest = tail[q - start :]
        offset, length = struct.unpack_from("<QQ", rest)
        if length == 0 or offset + length != q or offset % ALIGN_FLOOR or offset < ALIGN_FLOOR:
            continue
        if length > MAX_MANIFEST_SIZE:
            continue
        tail_bytes = struct.pack("<II", VERSION, 0) + MAGIC
        if rest[24:] != tail_bytes[: max(0, len(rest) - 24)]:
            continue
        if len(rest) >= 24:
            (recorded,) = struct.unpack_from("<Q", rest, 16)
            if manifest_hash(source.read(offset, length)) != recorded:
                continue
        found.append(q)
    return found[0] + FOOTER_SIZE if len(found) == 1 else None


def read_catalog(source: Source) -> Catalog:
    """Read and validate the footer and manifest of the zTensor v2 file in ``source``."""
    name, size = source.name, source.size
    try:
        footer = parse_footer(check_frame(source), name)
        if footer.length == 0:
            if footer.offset or footer.hash:
                raise ZTensorError(
                    f"{name}: a footer with no manifest (a data shard) must have a zero "
                    f"manifest offset and hash, this one has {footer.offset} and {footer.hash}",
                    offset=size - FOOTER_SIZE,
                )
            return _data_shard()
        if footer.length > MAX_MANIFEST_SIZE:
            raise ZTensorError(
                f"{name}: the footer declares a {footer.length:,}-byte manifest, over the "
                f"{MAX_MANIFEST_SIZE:,}-byte limit",
                offset=size - FOOTER_SIZE,
            )
        if footer.offset % ALIGN_FLOOR or footer.offset < ALIGN_FLOOR:
            raise ZTensorError(
                f"{name}: the manifest blob at {footer.offset} is not at a multiple of "
                f"{ALIGN_FLOOR} (at or past {ALIGN_FLOOR})",
                offset=size - FOOTER_SIZE,
            )
        if footer.offset + footer.length > size - FOOTER_SIZE:
            raise ZTensorError(
                f"{name}: the manifest blob [{footer.offset:,}, "
                f"{footer.offset + footer.length:,}) runs past the data region, which ends at "
                f"{size - FOOTER_SIZE:,}",
                offset=size - FOOTER_SIZE,
            )
        raw = source.read(footer.offset, footer.length)
    except SourceError as exc:
        raise ZTensorIOError(f"cannot read the manifest of {name}: {exc}") from exc
    if manifest_hash(raw) != footer.hash:
        raise ZTensorError(
            f"{name}: the manifest's XXH3-64 is {manifest_hash(raw):016x}, the footer records "
            f"{footer.hash:016x}; the manifest is corrupt",
            offset=footer.offset,
        )
    try:
        root = _cbor.decode(raw, deterministic=True)
    except _cbor.DeterministicCBORError as exc:
        raise ZTensorError(
            f"{name}: the manifest is not deterministic CBOR: {exc}",
            offset=footer.offset + exc.offset,
        ) from exc
    return catalog_from(
        root, manifest_at=footer.offset, manifest_length=footer.length, file_size=size, name=name
    )


def _data_shard() -> Catalog:
    return Catalog(
        format="ztensor",
        metadata={},
        tensors={},
        header_size=0,
        data_start=ALIGN_FLOOR,
        version="2",
        extra={"data_shard": True, "attributes": {}, "objects": {}, "shards": {}},
    )


def shard_path(root: str, shard: str) -> str:
    """Where Appendix B's positional convention puts shard ``shard`` of the root file
    ``root``: the sibling ``<stem>-<shard>.zt`` (``model.zt``, ``00001`` ->
    ``model-00001.zt``). Shard names are single path components by construction (§7.1).

    Example:
        >>> shard_path("/m/model.zt", "00001-of-00002")
        '/m/model-00001-of-00002.zt'
    """
    from tensorfile.formats import ZTENSOR

    suffix = ZTENSOR.suffixes[0]
    folder, base = os.path.split(root)
    stem = base[: -len(suffix)] if base.endswith(suffix) else base
    return os.path.join(folder, f"{stem}-{shard}{suffix}")


def open_shard(root: Any, shard: str, entry: ShardEntry, tensor: str) -> Source:
    """Open shard ``shard`` of the local file ``root`` (a path, or None when the root is not
    a local file) and check it is the file the shard table describes (its size, magic and
    footer); the whole-file digest is checked by :func:`verify_shard`."""
    from tensorfile.sources import LocalSource

    if root is None:
        raise ZTensorError(
            f"tensor {tensor!r} is in shard {shard!r}, another file; tensorfile finds shards "
            "next to a local root file (<stem>-<shard>.zt), and this file is not a local path",
            tensor=tensor,
        )
    path = shard_path(root, shard)
    try:
        source = LocalSource(path)
    except SourceError as exc:
        raise ZTensorIOError(
            f"tensor {tensor!r} is in shard {shard!r}, expected at {path}: {exc}", tensor=tensor
        ) from exc
    try:
        if source.size != entry.size:
            raise ZTensorError(
                f"{path}: shard {shard!r} should be {entry.size:,} bytes (the root's shard table "
                f"says), the file is {source.size:,}; it is not the shard the root names",
                tensor=tensor,
            )
        parse_footer_of(source)
    except BaseException:
        source.close()
        raise
    return source


def parse_footer_of(source: Source) -> None:
    """Check a shard's frame: size, magic, footer magic and version."""
    try:
        parse_footer(check_frame(source), source.name)
    except SourceError as exc:
        raise ZTensorIOError(f"cannot read {source.name}: {exc}") from exc


def verify_shard(source: Source, entry: ShardEntry, shard: str) -> None:
    """Check the whole-file digest of a shard (read a chunk at a time)."""
    from tensorfile.formats.ztensor.v2._format import Hasher

    algorithm = entry.digest.partition(":")[0]
    hasher = Hasher(algorithm)
    chunk = 8 << 20
    try:
        for pos in range(0, source.size, chunk):
            hasher.update(source.read(pos, min(chunk, source.size - pos)))
    except SourceError as exc:
        raise ZTensorIOError(f"cannot read shard {shard!r}: {exc}") from exc
    if hasher.value() != entry.digest:
        from tensorfile.core.errors import ZTensorChecksumError

        raise ZTensorChecksumError(
            f"{source.name}: shard {shard!r} has digest {hasher.value()}, the root's shard table "
            f"records {entry.digest}; it is not the shard the root names"
        )
