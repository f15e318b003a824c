"""``meta``: read and edit a file's metadata without touching its tensors.

safetensors: the ``__metadata__`` map. When the new header fits in the old header's space it
is written in place (padded with spaces, one write, the tensor bytes untouched); otherwise
the file is rewritten by a streaming copy into a temporary file that is renamed into place,
with the data region keeping the alignment it had. Every key is checked before any file is
written; a sharded checkpoint is then edited shard by shard (each shard atomically, the
checkpoint as a whole not). zTensor: the manifest's ``attributes``;
the manifest (which ends the file) is rewritten in place when the new one is not longer,
else the file is copied as above. A sharded checkpoint is edited shard by shard. GGUF
metadata is read-only here.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(2, np.float32)}, path, metadata={"note": "a long note"})
    >>> r = edit_metadata(path, set={"license": "MIT"}, delete=["note"])
    >>> r.after, r.in_place  # the new header is shorter: written in place
    ({'license': 'MIT'}, True)
    >>> edit_metadata(path, set={"description": "a much longer text"}).in_place
    False
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._atomic import atomic_write, write_all
from ..errors import InvalidArgumentError, SourceError, UnsupportedError
from ..sources import LocalSource
from ._structure import detect, load, open_source

__all__ = ["MetadataEdit", "edit_metadata", "read_metadata"]


@dataclass(frozen=True)
class MetadataEdit:
    """What an edit did."""

    paths: tuple[str, ...]
    before: dict[str, Any]
    after: dict[str, Any]
    in_place: bool


def read_metadata(path: str) -> dict[str, Any]:
    """The metadata of a file, checkpoint or glob (GGUF values unwrapped)."""
    from .inspect import json_metadata

    return json_metadata(load(path).metadata)


def _apply(
    before: Mapping[str, str],
    set: Mapping[str, str],
    delete: Iterable[str],
    clear: bool,
    *,
    strict: bool = True,
) -> dict[str, str]:
    after = {} if clear else dict(before)
    for key in delete:
        if strict and key not in after and not clear:
            raise InvalidArgumentError(f"metadata has no key {key!r} to delete")
        after.pop(key, None)
    for key, value in set.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError(f"metadata maps text to text; got {key!r}: {value!r}")
        after[key] = value
    return after


def edit_metadata(
    path: str,
    *,
    set: Mapping[str, str] | None = None,
    delete: Iterable[str] = (),
    clear: bool = False,
) -> MetadataEdit:
    """Set, delete or clear metadata keys of a safetensors or zTensor file (or every shard of
    a checkpoint); tensor bytes never change, and a failure leaves the file as it was."""
    from ..sources import is_url

    if is_url(path):
        raise UnsupportedError(f"{path}: metadata of a remote file is read-only")
    s = load(path)
    if s.format == "gguf":
        raise UnsupportedError(f"{path}: editing GGUF metadata is not supported (read-only)")
    files = [sh.path for sh in s.shards] if s.shards else [s.path]
    set = dict(set or {})
    delete = list(delete)
    before = {k: str(v) for k, v in s.metadata.items()}
    after = _apply(before, set, delete, clear)  # checks every key before any file changes

    def change(meta: Mapping[str, str]) -> dict[str, str]:
        # a shard of a checkpoint may lack a key another shard holds
        return _apply(meta, set, delete, clear, strict=False)

    in_place = True
    for f in files:
        with open_source(f) as src:
            fmt = detect(src)
        if fmt == "ztensor":
            in_place &= _edit_ztensor(f, change)
        else:
            in_place &= _edit_safetensors(f, change)
    return MetadataEdit(tuple(files), before, after, in_place)


# -- safetensors ------------------------------------------------------------------------


def _alignment(offset: int) -> int:
    align = 8
    while align < 4096 and offset % (align * 2) == 0:
        align *= 2
    return align


def _edit_safetensors(path: str, change: Any) -> bool:
    from ..safetensors._header import N_LEN, encode_header
    from ..safetensors._reader import read_header

    with LocalSource(path) as src:
        h = read_header(src)
        size = src.size
    items = []
    for pos, name in enumerate(h.names):
        dt, shape, start, end = h.info(pos)
        items.append((name, dt, shape, start, end))
    new_meta = change(dict(h.metadata or {}))
    meta_arg = new_meta or None
    packed = encode_header(items, meta_arg, align=8)
    body = packed[N_LEN:].rstrip(b" ")
    if len(body) <= h.header_size:
        header = body + b" " * (h.header_size - len(body))
        _write_in_place(path, size, N_LEN, header)
        return True
    new = encode_header(items, meta_arg, align=_alignment(h.data_start))
    _rewrite(path, new, h.data_start, size - h.data_start, b"")
    return False


# -- zTensor ------------------------------------------------------------------------------


def _edit_ztensor(path: str, change: Any) -> bool:
    from ..ztensor import _cbor
    from ..ztensor._reader import read_catalog

    with LocalSource(path) as src:
        cat = read_catalog(src)
        size = src.size
        start = size - 8 - cat.header_size
        root = _cbor.decode(src.read(start, size - 8 - start))
    root["attributes"] = change(dict(root.get("attributes") or {}))
    root["attributes"] = dict(sorted(root["attributes"].items()))
    manifest = _cbor.encode(root)
    old_len = size - 8 - start
    footer = struct.pack("<Q", len(manifest))
    if len(manifest) <= old_len:
        tail = bytes(old_len - len(manifest)) + manifest + footer
        _write_in_place(path, size, start, tail)
        return True
    _rewrite(path, b"", 0, start, manifest + footer)
    return False


# -- writing ------------------------------------------------------------------------------


def _write_in_place(path: str, size: int, offset: int, data: bytes) -> None:
    """One positional write over bytes the edit replaces, then fsync."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SourceError(f"cannot open {path} for writing: {exc.strerror or exc}") from exc
    try:
        if os.fstat(fd).st_size != size:
            raise SourceError(f"{path} changed while it was being edited; nothing was written")
        write_all(fd, memoryview(data), offset)
        os.fsync(fd)
    except OSError as exc:
        raise SourceError(f"writing {path} failed: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _rewrite(path: str, head: bytes, copy_from: int, copy_len: int, tail: bytes) -> None:
    """``head`` + ``copy_len`` bytes of the old file from ``copy_from`` + ``tail``, written to
    a temporary file and renamed over ``path``."""
    try:
        src = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(src).st_mode & 0o7777
        with atomic_write(path, fsync=True) as dst:
            write_all(dst, memoryview(head))
            _copy_range(src, dst, copy_from, copy_len, len(head))
            write_all(dst, memoryview(tail), len(head) + copy_len)
            os.fchmod(dst, mode)
    finally:
        os.close(src)


def _copy_range(src: int, dst: int, offset: int, length: int, out_offset: int) -> None:
    done = 0
    while done < length:
        try:
            n = os.copy_file_range(src, dst, length - done, offset + done, out_offset + done)
        except (AttributeError, OSError):
            n = 0
        if n <= 0:
            chunk = os.pread(src, min(16 << 20, length - done), offset + done)
            if not chunk:
                raise SourceError("the file ended while it was being copied")
            write_all(dst, memoryview(chunk), out_offset + done)
            n = len(chunk)
        done += n
