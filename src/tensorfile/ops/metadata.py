"""``meta``: read and edit a file's metadata without touching its tensors.

safetensors files keep it in ``__metadata__``, zTensor files in the manifest's
``attributes``; GGUF metadata is read-only here. Every key is checked before any file is
written, and every file is checked for being editable (see
:func:`tensorfile.core.atomic.check_editable`: a symlink's target is edited; a file with
several hard links, or read-only, is refused); a sharded checkpoint is then edited shard by
shard (each shard atomically, the checkpoint as a whole not).

Every edit writes a new file beside the old one and renames it into place, so a process
killed at any instant leaves the old file or the new one, and readers see one or the other.
The tensor bytes are cloned where the file system shares blocks (``method == "reflink"``:
xfs, btrfs; nothing copied) and copied in the kernel otherwise (``"copy"``). How the header
or manifest is rebuilt is each format's business: its ``edit_metadata`` hook in the
registry (:mod:`tensorfile.formats`).

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(2, np.float32)}, path, metadata={"note": "a long note"})
    >>> r = edit_metadata(path, set={"license": "MIT"}, delete=["note"])
    >>> r.after, r.method in ("reflink", "copy")  # reflink: a clone (xfs, btrfs), else a copy
    ({'license': 'MIT'}, True)
    >>> try:  # a lone surrogate: how Python reads a non-UTF-8 command-line argument
    ...     edit_metadata(path, set={"note": chr(0xDCFF)})
    ... except InvalidArgumentError as exc:
    ...     print(exc)
    the metadata value '\\udcff' of key 'note' is not valid UTF-8 text
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Literal

from ..core.atomic import check_editable
from ..core.errors import InvalidArgumentError, UnsupportedError
from ..formats import FORMATS, detect
from ..formats.catalogs import file_catalog, local_target
from ..sources import is_url, open_path, redact
from ._catalogs import files_of, load

__all__ = ["MetadataEdit", "edit_metadata", "read_metadata"]


@dataclass(frozen=True)
class MetadataEdit:
    """What an edit did.

    Attributes:
        paths: the files edited (every shard of a checkpoint).
        before, after: the metadata before and after.
        method: ``"reflink"`` when every new file shares its tensor bytes with the old one
            (a clone: nothing copied), ``"copy"`` when the bytes of at least one were copied.
            Either way each file was replaced atomically (temporary file + rename).
    """

    paths: tuple[str, ...]
    before: dict[str, Any]
    after: dict[str, Any]
    method: Literal["reflink", "copy"]


def read_metadata(path: str, *, allow_full_download: bool | None = None) -> dict[str, Any]:
    """The metadata of a file, checkpoint or glob (GGUF values unwrapped;
    ``allow_full_download``: see :func:`tensorfile.sources.open_path`)."""
    from .inspect import json_metadata

    return json_metadata(load(path, allow_full_download=allow_full_download).metadata)


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
        if not _is_utf8(key):
            raise InvalidArgumentError(f"the metadata key {_short(key)} is not valid UTF-8 text")
        if not _is_utf8(value):
            raise InvalidArgumentError(
                f"the metadata value {_short(value)} of key {_short(key)} is not valid UTF-8 text"
            )
        after[key] = value
    return after


def _is_utf8(text: str) -> bool:
    """Files store UTF-8: a lone surrogate (how Python reads a non-UTF-8 byte of a
    command-line argument) cannot be written."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _short(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 3]) + "..."


def edit_metadata(
    path: str,
    *,
    set: Mapping[str, str] | None = None,
    delete: Iterable[str] = (),
    clear: bool = False,
) -> MetadataEdit:
    """Set, delete or clear metadata keys of a safetensors or zTensor file (or every shard of
    a checkpoint); tensor bytes never change, and a failure leaves the file as it was."""
    path = local_target(path)  # a file:// URL: its local path
    if is_url(path):
        raise UnsupportedError(f"{redact(path)}: metadata of a remote file is read-only")
    s = load(path)
    fmt = FORMATS[s.format]
    if not fmt.editable:
        raise UnsupportedError(f"{path}: editing {fmt.title} metadata is not supported (read-only)")
    files = files_of(s)
    set = dict(set or {})
    delete = list(delete)
    if s.shards:  # every shard's own keys (one shard may hold a key the others lack)
        union: dict[str, Any] = {}
        for f in files:
            for k, v in file_catalog(f, local=True).metadata.items():
                union.setdefault(k, v)
        before = {k: str(v) for k, v in union.items()}
    else:
        before = {k: str(v) for k, v in s.metadata.items()}
    after = _apply(before, set, delete, clear)  # checks every key before any file changes

    def change(meta: Mapping[str, str]) -> dict[str, str]:
        # a shard of a checkpoint may lack a key another shard holds
        return _apply(meta, set, delete, clear, strict=False)

    for f in files:  # links and permissions, before any file is written
        check_editable(f)
    cloned = True
    for f in files:
        with closing(open_path(f)) as src:
            fmt = detect(src)
        cloned &= fmt.impl().edit_metadata(f, change)  # True: the tensor bytes were cloned
    return MetadataEdit(tuple(files), before, after, "reflink" if cloned else "copy")
