"""The files of a dataset folder, touched without trusting them: reads that cannot block on a
FIFO or grow past a bound, shard paths that must stay inside the folder, and the one decision
of what a commit may delete.

A manifest, an index and the folder itself can lie: a name can be a FIFO, a directory or a
symlink to somewhere else, and a manifest can list any path at all. The path rules are the
store's, decided once for every local route (:mod:`tensorfile.sources.local.paths`:
:func:`open_regular`, :func:`read_bounded`, :func:`is_plain_name`, re-exported here); what is
the dataset's:

* :func:`check_member` checks a listed shard of a local folder: inside the folder (symlinks
  followed), a regular file, of the listed size.

* :func:`deletable` decides what a commit may delete of the previous dataset: regular files
  (not symlinks) directly inside the folder, named like shards (§3.2 of the Spark spec),
  listed by the previous manifest, and never the manifest, the index or a file the new
  dataset lists. :func:`delete_previous` deletes exactly those, through a descriptor of the
  folder so that a path cannot be redirected on the way.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> shard = "part-00000-0000-123e4567-e89b-12d3-a456-426614174000.safetensors"
    >>> _ = open(os.path.join(folder, shard), "wb").write(b"x")
    >>> os.symlink("/etc/hostname", os.path.join(folder, "part-00001-" + shard[11:]))
    >>> deletable(folder, [shard, "part-00001-" + shard[11:], "dataset_manifest.json", "../x"])
    ['part-00000-0000-123e4567-e89b-12d3-a456-426614174000.safetensors']
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterable
from typing import TypeGuard

from ...core.errors import FormatError, SourceError
from ...formats import SAFETENSORS
from ...sources.local.paths import is_inside, is_plain_name, open_regular, read_bounded

__all__ = [
    "INDEX_NAME",
    "MANIFEST_NAME",
    "SHARD_NAME",
    "check_member",
    "deletable",
    "deletable_names",
    "delete_previous",
    "is_plain_name",
    "open_regular",
    "read_bounded",
]

MANIFEST_NAME = "dataset_manifest.json"
INDEX_NAME = "_tensor_index.parquet"
_HEX = "[0-9a-fA-F]"
SHARD_NAME = re.compile(
    rf"part-[0-9]{{5,}}-[0-9]{{4,}}-{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
    + re.escape(SAFETENSORS.suffixes[0])
)
"""``part-{taskId:05d}-{shardIndex:04d}-{uuid}.safetensors`` (§3.2; wider ids have more
digits): the only names a commit deletes."""


def _is_shard_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and SHARD_NAME.fullmatch(name) is not None


def deletable_names(listed: Iterable[object], keep: Collection[str] = ()) -> list[str]:
    """The names, of those listed, that :func:`deletable` considers at all: named like shards
    (no ``/``, so entries of the folder itself), never the manifest, the index or one of
    ``keep``; each once, in order.

    Example:
        >>> deletable_names(["../x", "dataset_manifest.json", 7])
        []
    """
    protected = {MANIFEST_NAME, INDEX_NAME, *keep}
    return list(dict.fromkeys(n for n in listed if _is_shard_name(n) and n not in protected))


def deletable(
    folder: str, listed: Iterable[object], keep: Collection[str] = (), *, dir_fd: int | None = None
) -> list[str]:
    """The names, of those the previous manifest ``listed``, that a commit may delete from
    the dataset folder ``folder``: named like shards (a plain file name, so nothing outside
    the folder or under another folder), not in ``keep`` (the new dataset's shards), never
    the manifest or the index, and a regular file right now (not a symlink, directory or
    FIFO). Anything else is not provably the previous dataset's and is left alone.

    Example:
        >>> import tempfile
        >>> deletable(tempfile.mkdtemp(), ["dataset_manifest.json", "/etc/passwd", "../x"])
        []
    """
    names = deletable_names(listed, keep)
    if not names:
        return []
    own_fd = dir_fd is None
    try:
        fd = _open_folder(folder) if dir_fd is None else dir_fd
    except OSError:
        return []
    out = []
    try:
        for name in names:
            try:
                mode = os.lstat(name, dir_fd=fd).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode):
                out.append(name)
    finally:
        if own_fd:
            os.close(fd)
    return out


def _open_folder(folder: str) -> int:
    return os.open(
        folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    )


def delete_previous(folder: str, listed: Iterable[object], keep: Collection[str] = ()) -> list[str]:
    """Delete what :func:`deletable` allows, and return the names deleted.

    The work is done through one descriptor of the folder, so a renamed or swapped folder
    path cannot redirect it; a name swapped for a symlink after the check loses only the link,
    and one swapped for a directory is not unlinked. A file that cannot be deleted is left
    (the new dataset is already committed; an unlisted shard is ignored by readers).

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.mkdir(os.path.join(folder, "part-00000-0000-" + "0" * 8 + "-0000-0000-0000-"
        ...                       + "0" * 12 + ".safetensors"))
        >>> delete_previous(folder, os.listdir(folder))  # a directory is not a shard
        []
    """
    try:
        fd = _open_folder(folder)
    except OSError:
        return []
    removed = []
    try:
        for name in deletable(folder, listed, keep, dir_fd=fd):
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:
                continue
            removed.append(name)
    finally:
        os.close(fd)
    return removed


def check_member(folder: str, name: str, size: int) -> str:
    """The path of the listed file ``name`` of ``folder`` (a dataset's shard), after checking
    that it resolves inside the folder (symlinks followed), is a regular file and has the
    ``size`` the listing gives; a :class:`~tensorfile.errors.FormatError` (a lie) or
    :class:`~tensorfile.errors.SourceError` (not a file) says which file is wrong.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.symlink("/etc/hostname", os.path.join(folder, "a.safetensors"))
        >>> try:
        ...     check_member(folder, "a.safetensors", 1)
        ... except FormatError as exc:
        ...     print(str(exc).partition(": ")[2])
        shard a.safetensors resolves outside the dataset folder
    """
    path = os.path.join(folder, name)
    if "\x00" in name or not is_inside(folder, path):
        raise FormatError(f"{folder}: shard {name} resolves outside the dataset folder")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FormatError(f"{folder}: the manifest lists {name}, which is missing") from None
    except OSError as exc:
        raise SourceError(f"cannot stat shard {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"shard {path} is not a regular file")
    if st.st_size != size:
        raise FormatError(
            f"{folder}: the manifest says shard {name} has {size} bytes, the file has {st.st_size}"
        )
    return path
