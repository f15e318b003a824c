"""A store in a local folder: the hardened primitives of :mod:`.paths` (no FIFO waited on, no
symlink followed out of the folder) and atomic renames.

Conditional writes (:meth:`LocalStore.write_if`) compare and rename under an exclusive
``flock`` of the folder itself, so writers in other processes (and threads) take turns; the
kernel drops the lock of a killed process, so no lock outlives its writer and there is no
lock file to leave behind. A version is the file's identity and times (device, inode, size,
modification and change times in nanoseconds): every atomic write makes a new inode.

Example:
    >>> import tempfile
    >>> s = LocalStore(tempfile.mkdtemp())
    >>> s.write_atomic("a.bin", b"0123456789")
    >>> s.read_range("a.bin", 2, 3), s.file_size("a.bin"), s.list_files()
    (b'234', 10, ['a.bin'])
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any

from ...core.errors import ConcurrentWriteError, SourceError
from ...core.source import ByteRequest
from ..local import paths, tree
from ..local.local import LocalSource
from .store import Store

__all__ = ["LocalStore"]


class LocalStore(Store):
    """A folder on the local file system (``root``, an absolute path). Reads refuse a file
    that resolves outside the folder; writes are atomic renames; ``read_only`` refuses every
    change."""

    is_local = True
    conditional_writes = True
    lock_timeout = 60.0
    """Seconds :meth:`write_if` waits for another writer's turn before it gives up."""

    def __init__(self, root: str, *, read_only: bool = False) -> None:
        self.root = root
        self.read_only = read_only
        self.supports_writes = self.supports_deletes = not read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remake, (self.root, self.read_only))

    def __fspath__(self) -> str:
        return self.root

    def path(self, name: str = "") -> str:
        """The local path of ``name`` (checked: it cannot leave the root)."""
        paths.check_name(name, folder=True)
        return os.path.join(self.root, *name.split("/")) if name else self.root

    def local_path(self, name: str = "") -> str:
        return self.path(name)

    def _target(self, name: str) -> str:
        """The path to write ``name`` at, its folders made (as an object store needs none);
        a folder that resolves outside the root is refused before anything is made."""
        path = self.path(name)
        parent = os.path.dirname(path)
        if parent != self.root:
            if not paths.is_inside(self.root, parent):
                raise SourceError(f"cannot write {path}: its folder resolves outside {self.root}")
            _makedirs(parent, f"the folder of {path}")
        return path

    def url(self, name: str = "") -> str:
        return os.path.join(self.root, *name.split("/")) if name else self.root

    def location(self) -> str:
        return self.root

    def make_root(self) -> None:
        self._require("writes", "create")
        _makedirs(self.root, "the dataset folder")

    def make_folder(self, name: str, what: str) -> str:
        """Create the folder ``name`` (not through a symlink out of the store)."""
        self._require("writes", "create", name)
        path = self.path(name)
        _makedirs(path, what)
        if os.path.islink(path) or not os.path.isdir(path):
            raise SourceError(f"{what} {path} is not a folder of the dataset")
        return path

    def is_folder(self) -> bool:
        return os.path.isdir(self.root)

    def file_size(self, name: str) -> int | None:
        fd = paths.open_regular(self.path(name), name)
        if fd is None:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def open_source(self, name: str, *, first: ByteRequest | None = None) -> LocalSource:
        path = self.path(name)
        if not paths.is_inside(self.root, path):
            raise SourceError(f"{path} resolves outside the folder {self.root}")
        return LocalSource(path)

    def read_bounded(self, name: str, what: str, limit: int) -> bytes | None:
        return paths.read_bounded(self.path(name), what, limit)

    def locate(self, name: str, *, first: ByteRequest | None = None) -> str:
        return self.path(name)

    def write_atomic(self, name: str, data: bytes) -> None:
        from ...core.atomic import atomic_write, write_all

        self._require("writes", "write", name)
        with atomic_write(self._target(name), fsync=True) as fd:
            write_all(fd, memoryview(data))

    def version(self, name: str) -> str | None:
        fd = paths.open_regular(self.path(name), name)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive ``flock`` of the root folder while the block runs."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise SourceError(f"cannot open {self.root}: {exc.strerror or exc}") from exc
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise SourceError(
                            f"cannot lock {self.root}: {exc.strerror or exc}"
                        ) from exc
                if time.monotonic() > deadline:
                    raise ConcurrentWriteError(
                        f"{self.root}: another writer held the folder's lock for over "
                        f"{self.lock_timeout:g} s; nothing was written"
                    )
                time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # (releases the lock)

    def upload(self, local_path: str, name: str) -> None:
        self._require("writes", "write", name)
        self.move_local(local_path, self._target(name))

    def write_file(self, name: str, write: Callable[[str], None]) -> int:
        """Have ``write(path)`` write the file ``name`` in place: ``write`` publishes it
        atomically (every tensorfile writer writes a temporary file and renames it)."""
        self._require("writes", "write", name)
        path = self._target(name)
        write(path)
        try:
            return os.path.getsize(path)
        except OSError as exc:
            raise SourceError(f"cannot stat {path}: {exc.strerror or exc}") from exc

    @staticmethod
    def move_local(src: str, dst: str) -> None:
        """Rename the local file ``src`` to ``dst``, replacing it."""
        try:
            os.replace(src, dst)
        except OSError as exc:
            raise SourceError(f"cannot move {src} to {dst}: {exc.strerror or exc}") from exc

    def move(self, src: str, dst: str) -> None:
        self._require("writes", "move", src)
        self.move_local(self.path(src), self._target(dst))

    def list_files(self, folder: str = "") -> list[str]:
        # everything but folders: a FIFO or a symlink named like a shard is refused by name
        # when it is used, not skipped in silence
        return sorted(n for n, is_folder in self._entries(folder) if not is_folder)

    def list_folders(self, folder: str = "") -> list[str]:
        return sorted(n for n, is_folder in self._entries(folder) if is_folder)

    def _entries(self, folder: str) -> list[tuple[str, bool]]:
        """``folder``'s entries, reached without following a symlink below the root (one on
        the way is a SourceError: :mod:`..local.tree`)."""
        self.path(folder)  # (checked: it cannot leave the root)
        return tree.entries(self.root, folder)

    def modified(self, name: str) -> float | None:
        path = self.path(name)
        st = tree.lstat(self.root, name)  # (no symlink followed: not a file of the store)
        if st is None:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path} is not a regular file")
        return max(st.st_mtime, st.st_ctime)

    def remove(self, name: str) -> None:
        self._require("deletes", "remove", name)
        paths.check_name(name)  # (not the root)
        tree.remove_file(self.root, name)

    def remove_empty_folder(self, name: str) -> bool:
        self._require("deletes", "remove", name)
        self.path(name)
        return tree.remove_empty_folder(self.root, name)

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` and what is in it, never through a symlink: one on
        the way, or a folder swapped for one meanwhile, is a SourceError naming it (a
        symlink in the tree is unlinked, its target left alone)."""
        self._require("deletes", "remove", name)
        paths.check_name(name)  # (not the root)
        tree.remove_tree(self.root, name)


def _remake(root: str, read_only: bool) -> LocalStore:
    return LocalStore(root, read_only=read_only)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _makedirs(path: str, what: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot create {what} {path}: {exc.strerror or exc}") from exc
