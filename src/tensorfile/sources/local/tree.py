"""Folders of a local store walked from descriptors: no symlink is followed at any level
below the store's root, however the folders change meanwhile.

A path such as ``root/_staging/job`` is resolved again by the kernel each time it is used,
so a check that ``_staging`` is a real folder says nothing about what it is a moment later
(another process can swap it for a symlink to anywhere). Here every folder below the root is
opened relative to its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, and entries are
listed, statted, unlinked and removed relative to their folder's descriptor: a folder
swapped for a symlink is refused (:class:`~tensorfile.errors.SourceError` naming it), never
followed. The root itself is opened as given (the caller chose it).

Example:
    >>> import os, tempfile
    >>> root, outside = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(root, "a", "b"))
    >>> _ = open(os.path.join(outside, "keep"), "w").write("x")
    >>> os.symlink(outside, os.path.join(root, "a", "link"))
    >>> remove_tree(root, "a"), os.listdir(root), os.listdir(outside)
    (None, [], ['keep'])
    >>> os.symlink(outside, os.path.join(root, "s"))
    >>> try:
    ...     remove_tree(root, "s/keep")
    ... except SourceError as exc:
    ...     print(str(exc).endswith("is a symlink: not followed"))
    True
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from ...core.errors import SourceError

__all__ = [
    "entries",
    "lstat",
    "open_folder",
    "remove_empty_folder",
    "remove_file",
    "remove_folder_at",
    "remove_tree",
]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_NOT_FOLDER = (errno.ENOTDIR, errno.ELOOP)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_sub(fd: int, name: str, where: str) -> int | None:
    """A descriptor of the folder ``name`` in the folder ``fd`` (``where`` for messages);
    None when nothing is there or it is not a folder; a symlink is refused."""
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in _NOT_FOLDER:
            raise SourceError(f"cannot open {where}: {_why(exc)}") from exc
        if _is_link(fd, name):
            raise SourceError(f"{where} is a symlink: not followed") from None
        return None


def open_folder(root: str, name: str) -> int | None:
    """A descriptor of the folder ``name`` (a checked store name, ``""``: the root) of the
    store at ``root``, each folder below the root opened without following a symlink; None
    when it (or a folder on the way) is not there or is not a folder. A symlink on the way
    is a :class:`~tensorfile.errors.SourceError`. The caller closes the descriptor."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SourceError(f"cannot open {root}: {_why(exc)}") from exc
    where = root
    for part in name.split("/") if name else ():
        where = os.path.join(where, part)
        try:
            sub = _open_sub(fd, part, where)
        finally:
            os.close(fd)
        if sub is None:
            return None
        fd = sub
    return fd


def _list(fd: int, where: str) -> list[tuple[str, bool]]:
    try:
        with os.scandir(fd) as it:
            return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError as exc:
        raise SourceError(f"cannot list {where}: {_why(exc)}") from exc


def entries(root: str, folder: str) -> list[tuple[str, bool]]:
    """The entries of ``folder`` of the store at ``root``: (name, whether it is a folder, not
    a symlink to one); none when the folder is not there.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "a", "b"))
        >>> entries(root, "a"), entries(root, "none")
        ([('b', True)], [])
    """
    fd = open_folder(root, folder)
    if fd is None:
        return []
    try:
        return _list(fd, os.path.join(root, folder) if folder else root)
    finally:
        os.close(fd)


def _parent(root: str, name: str) -> tuple[int | None, str]:
    folder, _, base = name.rpartition("/")
    return open_folder(root, folder), base


def lstat(root: str, name: str) -> os.stat_result | None:
    """``name``'s own status (a symlink's, not its target's), reached without following a
    symlink; None when it is not there."""
    fd, base = _parent(root, name)
    if fd is None:
        return None
    try:
        return os.stat(base, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SourceError(f"cannot stat {os.path.join(root, name)}: {_why(exc)}") from exc
    finally:
        os.close(fd)


def remove_file(root: str, name: str) -> None:
    """Unlink ``name`` (a symlink itself, never its target); nothing there is no error."""
    fd, base = _parent(root, name)
    if fd is None:
        return
    try:
        os.unlink(base, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SourceError(f"cannot remove {os.path.join(root, name)}: {_why(exc)}") from exc
    finally:
        os.close(fd)


def remove_empty_folder(root: str, name: str) -> bool:
    """Remove the folder ``name`` if it is empty; whether it is gone (a folder that is not
    empty, a symlink, a file, or one reached through a symlink is left alone)."""
    try:
        fd, base = _parent(root, name)
    except SourceError:
        return False
    if fd is None:
        return True
    try:
        os.rmdir(base, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def remove_tree(root: str, name: str) -> None:
    """Remove the folder ``name`` and everything in it, each folder opened from its parent's
    descriptor without following a symlink (a symlink in the tree is unlinked, its target
    left alone); nothing there (or a file there) is no error. A symlink on the way to, or
    at, ``name`` (or a folder in the tree swapped for one meanwhile) is a
    :class:`~tensorfile.errors.SourceError`: nothing is followed."""
    fd, base = _parent(root, name)
    if fd is None:
        return
    try:
        remove_folder_at(fd, base, os.path.join(root, name))
    finally:
        os.close(fd)


def remove_folder_at(parent: int, name: str, where: str) -> None:
    """Remove the folder ``name`` of the open folder ``parent`` (``where``: its path, for
    messages) and everything in it, as :func:`remove_tree` does, without recursion and with
    at most 32 folders of the tree open at once: a folder nested deeper is moved
    up into ``name`` first (a tree a few thousand levels deep is removed whole, never a
    ``RecursionError``, never a descriptor per level). Nothing there (or not a folder) is no
    error; a symlink at ``name`` is a :class:`~tensorfile.errors.SourceError`, as is an
    entry that cannot be removed.

    Example:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "a", *["d"] * 100))
        >>> fd = os.open(root, os.O_RDONLY)
        >>> remove_folder_at(fd, "a", os.path.join(root, "a")); os.close(fd)
        >>> os.listdir(root)
        []
    """
    top = _open_sub(parent, name, where)
    if top is None:
        return
    try:
        _empty(top, where)
    finally:
        os.close(top)
    _rmdir(parent, name, where)


_DEPTH = 32
"""The most folders of a tree :func:`remove_folder_at` holds open at once (a writer's
staging tree and the cache's folders are a few levels deep)."""


@dataclass(slots=True)
class _Level:
    fd: int
    name: str
    where: str
    todo: list[tuple[str, bool]]


def _empty(top: int, where: str) -> None:
    """Remove everything in the open folder ``top``, depth first from an explicit stack;
    a folder at :data:`_DEPTH` is renamed into ``top`` (under a new name) and removed from
    there once ``top``'s listing is done: each move brings a subtree up, so it ends."""
    stack = [_Level(top, "", where, _list(top, where))]
    moved = False
    try:
        while stack:
            level = stack[-1]
            if not level.todo:
                if len(stack) > 1:
                    stack.pop()
                    os.close(level.fd)
                    _rmdir(stack[-1].fd, level.name, level.where)
                elif moved:  # (folders moved up meanwhile: listed again)
                    moved = False
                    level.todo = _list(top, where)
                else:
                    return
                continue
            entry, is_folder = level.todo.pop()
            path = os.path.join(level.where, entry)
            if not is_folder and not _unlinked(level.fd, entry, path):
                continue  # (gone, or unlinked; a folder made meanwhile falls through)
            if len(stack) >= _DEPTH:
                _move_up(level.fd, entry, top, path)
                moved = True
                continue
            sub = _open_sub(level.fd, entry, path)
            if sub is None:
                continue  # (gone, or not a folder now: left, the folder's removal says so)
            try:
                todo = _list(sub, path)
            except BaseException:
                os.close(sub)
                raise
            stack.append(_Level(sub, entry, path, todo))
    finally:
        for level in stack[1:]:
            os.close(level.fd)


def _unlinked(fd: int, name: str, where: str) -> bool:
    """Unlink the entry ``name`` (not a folder when listed): False when it is gone (or
    unlinked); True when it is a folder now (made meanwhile)."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        return True
    except OSError as exc:
        raise SourceError(f"cannot remove {where}: {_why(exc)}") from exc
    return False


def _move_up(fd: int, name: str, top: int, where: str) -> None:
    """Rename the folder ``name`` of ``fd`` into ``top`` under a name not taken there."""
    for _ in range(8):
        try:
            os.rename(name, f".rm-{os.urandom(8).hex()}", src_dir_fd=fd, dst_dir_fd=top)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise SourceError(f"cannot remove {where}: {_why(exc)}") from exc
    raise SourceError(f"cannot remove {where}: no free name to move it to")


def _rmdir(parent: int, name: str, where: str) -> None:
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:  # (written meanwhile: left, as a writer's own)
            raise SourceError(f"cannot remove {where}: {_why(exc)}") from exc
