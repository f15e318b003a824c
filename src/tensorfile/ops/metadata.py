"""``meta``: read and edit a file's metadata without touching its tensors.

safetensors files keep it in ``__metadata__``, zTensor files in the manifest's
``attributes``; GGUF metadata is read-only here. Every key is checked before any file is
written; a sharded checkpoint is then edited shard by shard (each shard atomically, the
checkpoint as a whole not). How the bytes change (in place when the new header fits, else
an atomic rewrite) is each format's business: its ``edit_metadata`` hook in the registry
(:mod:`tensorfile.formats`).

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

from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from ..core.errors import InvalidArgumentError, UnsupportedError
from ..formats import FORMATS, detect
from ..sources import is_url, open_path
from ._structure import load

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
    if is_url(path):
        raise UnsupportedError(f"{path}: metadata of a remote file is read-only")
    s = load(path)
    fmt = FORMATS[s.format]
    if not fmt.editable:
        raise UnsupportedError(f"{path}: editing {fmt.title} metadata is not supported (read-only)")
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
        with closing(open_path(f)) as src:
            fmt = detect(src)
        in_place &= fmt.impl().edit_metadata(f, change)
    return MetadataEdit(tuple(files), before, after, in_place)
