"""Atomic file writes: a temporary file in the destination's folder, renamed into place.

A reader never sees a partial file at the destination, and a failure at any point, a
``SIGKILL`` included, leaves whatever was there before untouched. A new file's mode is
``AtomicFile.MODE`` (0666, as ``open(path, "w")`` gives) less the umask; a file written over
an existing regular file keeps that file's mode and, where permitted, its owner (as
``open(path, "w")`` would), from the moment it is created, and a read-only one (by its mode
bits, for root too) is refused, never replaced (:mod:`.release`).

Temporary files are named ``.{name}.tensorfile-{12 hex digits}.tmp`` and their writer holds an
exclusive ``flock`` on them until it renames or removes them. A writer killed on the way
leaves its temporary file behind (as large as what it had written); the next
:class:`AtomicFile` for the same destination removes such leftovers: files of exactly that
name pattern whose lock it can take, i.e. whose writer is gone. A live writer's file, and
any other file, is never touched.

Edits of existing files (:func:`rewrite`) are built the same way: the new file is a clone of
the old one (``FICLONE``/``FICLONERANGE``, no data copied, where the file system shares
blocks: xfs, btrfs) or a kernel-side copy (``copy_file_range``), gets its new bytes, keeps
the old file's mode and owner, and is renamed over it. :func:`check_editable` is what an edit
refuses before anything is written: symlinks are followed (the real file is edited, in its
own folder), files with several hard links and read-only files or folders are refused.

A large file that a commit replaces is freed by a background thread (:mod:`.release`), not
inside the rename: the writer returns as soon as the new file is in place.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
    >>> with atomic_write(path) as fd:
    ...     _ = os.write(fd, b"data")
    >>> open(path, "rb").read()
    b'data'
    >>> rewrite(path, b"new ", 0, 4, b"!")  # the 4 kept bytes move by 4: copied, not cloned
    'copy'
    >>> open(path, "rb").read()
    b'new data!'
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from . import release
from .errors import InvalidArgumentError, InvalidTypeError, SourceError
from .release import check_editable, keep_owner_and_mode, refuse_read_only

__all__ = [
    "CLONE_BLOCK",
    "AtomicFile",
    "atomic_write",
    "check_editable",
    "copy_range",
    "is_temp_name",
    "preallocate",
    "remove_if_unlocked",
    "remove_stale_temps",
    "rewrite",
    "write_all",
]

TEMP_TAG = "tensorfile"
"""The word in every temporary file's name that says tensorfile wrote it."""

CLONE_BLOCK = 4096
"""Block size that a moved range must keep its offset modulo to be cloned, not copied (the
block size of xfs, btrfs and ext4 on common systems)."""

_HEX = 12
_FICLONE = 0x40049409  # _IOW(0x94, 9, int)
_FICLONERANGE = 0x4020940D  # _IOW(0x94, 13, struct file_clone_range)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

Method = Literal["reflink", "copy"]


def _temp_prefix(base: str) -> str:
    return f".{base}.{TEMP_TAG}-"


def is_temp_name(name: str, base: str) -> bool:
    """Whether ``name`` is a tensorfile temporary file for the destination named ``base``.

    Example:
        >>> is_temp_name(".m.zt.tensorfile-0123456789ab.tmp", "m.zt")
        True
        >>> is_temp_name(".m.zt.0123456789ab.tmp", "m.zt"), is_temp_name(".m.zt.tmp", "m.zt")
        (False, False)
    """
    prefix = _temp_prefix(base)
    if not (name.startswith(prefix) and name.endswith(".tmp")):
        return False
    digits = name[len(prefix) : -4]
    return len(digits) == _HEX and all(c in "0123456789abcdef" for c in digits)


def remove_stale_temps(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> list[str]:
    """Remove the temporary files that killed writers left for the destination ``path``
    (``dir_fd``: an open descriptor of its folder, used instead of the folder's path).

    Only regular files named like this module's temporary files for ``path`` are candidates,
    and one is removed only while this call holds its ``flock``: a live writer holds it, so
    its file survives. Returns the names removed. Nothing here raises: a file that cannot be
    opened, locked or removed is left alone.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> _ = open(os.path.join(folder, ".x.bin.tensorfile-00000000000a.tmp"), "w")
        >>> _ = open(os.path.join(folder, ".x.bin.other.tmp"), "w")
        >>> remove_stale_temps(os.path.join(folder, "x.bin")), sorted(os.listdir(folder))
        (['.x.bin.tensorfile-00000000000a.tmp'], ['.x.bin.other.tmp'])
    """
    dest = os.fspath(path)
    folder, base = os.path.dirname(dest) or ".", os.path.basename(dest)
    prefix = _temp_prefix(base)
    removed: list[str] = []
    try:
        with os.scandir(folder if dir_fd is None else dir_fd) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        if is_temp_name(name, base) and remove_if_unlocked(
            os.path.join(folder, name), dir_fd=dir_fd
        ):
            removed.append(name)
    return removed


def remove_if_unlocked(tmp: str, *, dir_fd: int | None = None) -> bool:
    """Remove the temporary file ``tmp`` if it is a regular file whose writer is gone (this
    call can take its ``flock``); whether it was removed. ``dir_fd``: an open descriptor of
    its folder (the name ``tmp`` ends with is removed there). Never raises."""
    name = tmp if dir_fd is None else os.path.basename(tmp)
    try:  # O_NONBLOCK: a FIFO of that name must not block us; O_NOFOLLOW: nor a symlink lead us
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while its writer lives
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        os.unlink(name, dir_fd=dir_fd)  # names are never reused: this removes that same file
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


_NOT_FILES = {
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def _dest_text(path: object) -> str:
    """A destination path as text: a ``str`` or ``os.PathLike`` of text, without NUL."""
    try:
        dest = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        dest = None
    if not isinstance(dest, str):
        raise InvalidTypeError(f"a file name must be text, not {type(path).__name__}")
    if "\0" in dest or not dest:
        raise InvalidArgumentError(f"not a usable file name: {dest!r}")
    return dest


def _check_destination(dest: str, dir_fd: int | None = None) -> os.stat_result | None:
    """Refuse a destination that exists and is not a regular file (or a symlink): renaming a
    file over ``/dev/null`` or a FIFO would replace the node itself. Returns its status (a
    symlink's own), None when nothing is there."""
    name = dest if dir_fd is None else os.path.basename(dest)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    kind = stat.S_IFMT(st.st_mode)
    if kind in _NOT_FILES:
        raise SourceError(
            f"cannot write {dest}: it is {_NOT_FILES[kind]}, not a regular file; tensorfile "
            "writes files by renaming a new file into place and will not replace it"
        )
    return st


class AtomicFile:
    """A temporary file beside ``path`` that :meth:`commit` renames into place and
    :meth:`abort` removes. Writers that live longer than one ``with`` block (a streaming
    writer) hold one of these; :func:`atomic_write` is the ``with`` form.

    The constructor first removes what killed writers left for the same destination
    (:func:`remove_stale_temps`), then creates ``.{name}.tensorfile-{hex}.tmp`` and locks it
    (``flock``) for as long as it lives.

    ``dir_fd``: an open descriptor of ``path``'s folder, in which every create, rename and
    unlink is done (a copy is kept until the end), never through the folder's path, which
    may have been swapped for a symlink meanwhile (``path`` still names it in messages).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> f = AtomicFile(path)
        >>> os.path.basename(f.tmp).startswith(".x.bin.tensorfile-")
        True
        >>> _ = os.write(f.fd, b"data")
        >>> f.commit()
        >>> open(path, "rb").read(), os.listdir(os.path.dirname(path))
        (b'data', ['x.bin'])
    """

    MODE = 0o666  # the new file's mode, less the umask (a subclass may make it narrower)
    KEEP_MODE = True
    """Whether a file written over an existing regular file keeps its mode and owner, and a
    read-only one is refused (see the module docstring). False for files tensorfile alone
    owns (cache entries), whose mode is the writer's whatever was at the name."""

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, dir_fd: int | None = None
    ) -> None:
        self.dest = _dest_text(path)
        self.fsync = fsync
        self.folder = os.path.dirname(self.dest) or "."
        self.fd = -1
        self.done = True
        self.dir_fd = None if dir_fd is None else os.dup(dir_fd)
        try:
            self._create()
        except BaseException:
            self._drop_dir()
            raise

    def _name(self, path: str) -> str:
        """What names ``path`` for a call with ``dir_fd=self.dir_fd``."""
        return path if self.dir_fd is None else os.path.basename(path)

    def _drop_dir(self) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None

    def _create(self) -> None:
        old = _check_destination(self.dest, self.dir_fd)
        if old is not None and not (self.KEEP_MODE and stat.S_ISREG(old.st_mode)):
            old = None  # (a symlink is replaced, not followed: its target keeps its mode)
        if old is not None:
            refuse_read_only(old, self._name(self.dest), self.dest, "write", self.dir_fd)
        remove_stale_temps(self.dest, dir_fd=self.dir_fd)
        base = os.path.basename(self.dest)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
        # never wider than the file it replaces, even before its mode is given
        mode = self.MODE if old is None else self.MODE & stat.S_IMODE(old.st_mode)
        for _ in range(100):
            self.tmp = os.path.join(self.folder, f"{_temp_prefix(base)}{secrets.token_hex(6)}.tmp")
            try:
                fd = os.open(self._name(self.tmp), flags, mode, dir_fd=self.dir_fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise SourceError(f"cannot write {self.dest}: {exc.strerror or exc}") from exc
            if _lock_own(fd, self._name(self.tmp), self.dir_fd):
                self.fd = fd
                self.done = False
                if old is not None:
                    self._keep(old)
                return
            os.close(fd)  # another writer's cleanup removed it before we locked it: again
        raise SourceError(f"cannot write {self.dest}: no temporary file could be kept")

    def _keep(self, old: os.stat_result) -> None:
        """Give the new file the replaced one's owner, mode and ACL
        (:func:`~.release.keep_owner_and_mode`)."""
        try:
            keep_owner_and_mode(self.fd, old, self._name(self.dest), self.dir_fd)
        except OSError as exc:
            self.abort()
            raise SourceError(f"cannot write {self.dest}: {exc.strerror or exc}") from exc

    def commit(self) -> None:
        """Flush (with ``fsync``) and rename the file over the destination, then close it.

        The rename happens while the lock is still held, so no cleanup can remove the file
        between the end of the writing and the rename.
        """
        if self.done:
            return
        old = -1
        try:
            if self.fsync:
                os.fsync(self.fd)
            _check_destination(self.dest, self.dir_fd)  # again: a node may have appeared
            # the replaced file is freed in the background
            old = release.hold(self._name(self.dest), dir_fd=self.dir_fd)
            if self.dir_fd is None:
                os.replace(self.tmp, self.dest)
            else:
                at = self.dir_fd
                os.replace(
                    self._name(self.tmp), self._name(self.dest), src_dir_fd=at, dst_dir_fd=at
                )
        except OSError as exc:
            _close(old)
            self.abort()
            raise SourceError(f"cannot write {self.dest}: {exc.strerror or exc}") from exc
        except BaseException:
            _close(old)
            self.abort()
            raise
        release.release(old)
        self.done = True
        os.close(self.fd)
        self.fd = -1
        if self.fsync:
            _fsync_dir(self.folder, self.dir_fd)
        self._drop_dir()

    def abort(self) -> None:
        """Remove and close the temporary file; the destination is untouched."""
        if self.done:
            return
        self.done = True
        try:
            os.unlink(self._name(self.tmp), dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            self._drop_dir()


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _lock_own(fd: int, tmp: str, dir_fd: int | None = None) -> bool:
    """Lock the file just created; False when a cleanup removed it before the lock."""
    try:  # never waiting: a file another process (any user who can read the folder)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # locked first is left, another made
    except OSError as exc:  # (no locks on this file system: nothing can clean it up either)
        return not isinstance(exc, BlockingIOError)
    try:
        now = os.stat(tmp, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    st = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


@contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, fsync: bool = False, dir_fd: int | None = None
) -> Iterator[int]:
    """Yield a file descriptor; on success the file replaces ``path`` atomically.

    With ``fsync=True`` the data and the folder entry are flushed to stable storage;
    ``dir_fd``: ``path``'s folder is this open descriptor (see :class:`AtomicFile`).
    """
    f = AtomicFile(path, fsync=fsync, dir_fd=dir_fd)
    try:
        yield f.fd
    except OSError as exc:
        f.abort()
        raise SourceError(f"cannot write {f.dest}: {exc.strerror or exc}") from exc
    except BaseException:
        f.abort()
        raise
    f.commit()


def _fsync_dir(folder: str, dir_fd: int | None = None) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY) if dir_fd is None else dir_fd
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        if dfd != dir_fd:
            os.close(dfd)


def write_all(fd: int, data: memoryview, offset: int | None = None) -> None:
    """Write all of ``data`` (at ``offset`` when given, else at the current position)."""
    view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    pos = 0
    while pos < view.nbytes:
        chunk = view[pos : pos + (1 << 30)]
        n = os.write(fd, chunk) if offset is None else os.pwrite(fd, chunk, offset + pos)
        if n <= 0:
            raise OSError("write returned no progress")
        pos += n


def preallocate(fd: int, size: int, offset: int = 0) -> None:
    """Reserve ``size`` bytes of the file, from ``offset``, before writing them.

    On ext4 and xfs this makes the following writes ~3x faster than growing the file as it
    is written (no delayed-allocation work per page), and a full disk fails here, before any
    data is written. Where the file system cannot, the file is just sized.
    """
    if size <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, size)
    except (AttributeError, OSError):
        os.ftruncate(fd, max(offset + size, os.fstat(fd).st_size))


# -- editing existing files -------------------------------------------------------------------


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def rewrite(
    path: str,
    head: bytes,
    copy_from: int,
    copy_len: int,
    tail: bytes,
    *,
    expect: os.stat_result | None = None,
) -> Method:
    """Replace ``path`` by ``head`` + ``copy_len`` of its bytes from ``copy_from`` + ``tail``.

    The new file is written beside the real file (symlinks followed; see
    :func:`check_editable` for what is refused), keeps its mode and, where permitted, its
    owner (as every :class:`AtomicFile` over a file does), is flushed, and renamed over it:
    a process killed at any instant leaves the old file or the new one, and readers see one
    or the other. The kept bytes are cloned where
    the file system can share blocks (``"reflink"``: nothing copied; it needs
    ``len(head) - copy_from`` to be a multiple of :data:`CLONE_BLOCK`), else copied in the
    kernel (``"copy"``). Returns which. ``expect`` is the status of the file when its header
    was read: if the file changed since, nothing is written.
    """
    real, st = check_editable(path)
    if expect is not None and _identity(st) != _identity(expect):
        raise SourceError(f"cannot write {path}: it changed while it was being edited")
    try:
        src = os.open(real, os.O_RDONLY | _CLOEXEC)
    except OSError as exc:
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        sst = os.fstat(src)
        if _identity(sst) != _identity(st) or copy_from + copy_len > sst.st_size:
            raise SourceError(f"cannot write {path}: it changed while it was being edited")
        f = AtomicFile(real, fsync=True)
        try:
            method = _fill(src, f.fd, sst.st_size, head, copy_from, copy_len, tail)
            if _identity(os.stat(real)) != _identity(sst):  # another edit got there first
                raise SourceError(f"cannot write {path}: it changed while it was being edited")
            f.commit()
        except OSError as exc:
            f.abort()
            raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from exc
        except BaseException:
            f.abort()
            raise
    finally:
        os.close(src)
    return method


def _fill(
    src: int, dst: int, size: int, head: bytes, copy_from: int, copy_len: int, tail: bytes
) -> Method:
    """Write the new file's bytes into the empty ``dst``."""
    end = copy_from + copy_len
    out_len = len(head) + copy_len + len(tail)
    delta = len(head) - copy_from
    method: Method = "copy"
    start = copy_from - copy_from % CLONE_BLOCK
    if delta % CLONE_BLOCK == 0 and copy_len > 0 and start + delta >= 0:
        stop = end if end == size else end - end % CLONE_BLOCK
        if stop > start and _clone(src, dst, start, 0 if stop == size else stop - start, delta):
            method = "reflink"
            copy_range(src, dst, stop, end - stop, stop + delta)  # under a block, if any
    if method == "copy":
        os.ftruncate(dst, 0)
        copy_range(src, dst, copy_from, copy_len, len(head))
    write_all(dst, memoryview(head), 0)  # also covers cloned bytes of the old header
    write_all(dst, memoryview(tail), len(head) + copy_len)
    os.ftruncate(dst, out_len)
    return method


def _clone(src: int, dst: int, offset: int, length: int, delta: int) -> bool:
    """Share ``length`` bytes (0: to the end) of ``src`` from ``offset`` with ``dst`` at
    ``offset + delta``; False where the file system cannot."""
    try:
        if offset == 0 and length == 0 and delta == 0:
            fcntl.ioctl(dst, _FICLONE, src)
        else:
            arg = struct.pack("=qQQQ", src, offset, length, offset + delta)
            fcntl.ioctl(dst, _FICLONERANGE, arg)
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
            raise
        return False  # EOPNOTSUPP, EXDEV, EINVAL (alignment), ENOTTY, ...


def copy_range(src: int, dst: int, offset: int, length: int, out_offset: int) -> None:
    """Copy ``length`` bytes of ``src`` at ``offset`` to ``dst`` at ``out_offset`` (in the
    kernel where it can)."""
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
