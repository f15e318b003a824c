"""The file a write replaces: what the new file keeps of it and when it may not be
replaced, and letting go of it in the background.

Every tensorfile writer (:class:`~.atomic.AtomicFile`, the edits of :func:`~.atomic.rewrite`)
gives the new file the old one's mode and, where permitted, its owner
(:func:`keep_owner_and_mode`, as ``open(path, "w")`` would), and refuses a read-only file (by
its mode bits, so that root is refused too) rather than replace it (:func:`refuse_read_only`);
:func:`check_editable` adds an edit's own rules (hard links, the folder).

Renaming a new file over an old one removes the old file's last name, and the kernel frees
its cached pages and its blocks inside the rename, on the writer's time (~0.5 s for a 1 GiB
file in the page cache on this project's machine). Holding the old file open across the
rename moves that work to whoever closes it last: :func:`release` hands the descriptor to one
background thread that closes it, so ``save_file`` returns as soon as the new file is in
place. Nothing about the result changes: the destination holds the new file from the rename
on, and the old one is gone once the thread has closed it (:func:`wait` blocks until then).

Example:
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> old, new = os.path.join(d, "old"), os.path.join(d, "new")
    >>> _ = open(old, "wb").write(b"x" * (MIN_BYTES + 1)); _ = open(new, "wb").write(b"y")
    >>> fd = hold(old)
    >>> os.replace(new, old); release(fd); wait()
    >>> open(old, "rb").read()
    b'y'
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading

from .errors import SourceError

__all__ = [
    "ACL_ACCESS",
    "BASE_ACL",
    "MIN_BYTES",
    "NO_ACL",
    "access_acl",
    "can_write",
    "check_editable",
    "hold",
    "keep_owner_and_mode",
    "refuse_read_only",
    "release",
    "wait",
]

MIN_BYTES = 16 << 20
"""Files smaller than this are freed in the rename as before (their pages cost little)."""

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_queue: queue.SimpleQueue[int | threading.Event] = queue.SimpleQueue()
_worker: threading.Thread | None = None
_lock = threading.Lock()


def hold(path: str, *, dir_fd: int | None = None) -> int:
    """An open descriptor on ``path`` (``dir_fd``: the name ``path`` in that open folder)
    when it is a large regular file with one name (the rename will be its end), else -1.
    Never raises."""
    flags = os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except (OSError, ValueError):
        return -1
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size >= MIN_BYTES:
            return fd
    except OSError:
        pass
    os.close(fd)
    return -1


def release(fd: int) -> None:
    """Close ``fd`` on the background thread (nothing for -1)."""
    if fd < 0:
        return
    global _worker
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_run, name="tensorfile-release", daemon=True)
            _worker.start()
    _queue.put(fd)


def wait() -> None:
    """Block until every descriptor given to :func:`release` so far is closed."""
    with _lock:
        running = _worker is not None and _worker.is_alive()
    if running:
        done = threading.Event()
        _queue.put(done)
        done.wait()


def _run() -> None:
    while True:
        item = _queue.get()
        if isinstance(item, threading.Event):
            item.set()
            continue
        try:
            os.close(item)
        except OSError:
            pass


# -- what the new file keeps, and what is refused ----------------------------------------------


def can_write(st: os.stat_result) -> bool:
    """What the mode bits allow this process (root: any write bit at all).

    Example:
        >>> os.geteuid() == 0 or not can_write(os.stat("/"))
        True
    """
    euid = os.geteuid()
    if euid == 0:
        return bool(st.st_mode & 0o222)
    if st.st_uid == euid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == os.getegid() or st.st_gid in os.getgroups():
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def check_editable(path: str) -> tuple[str, os.stat_result]:
    """The real file behind ``path`` (symlinks followed) and its status, once it is known
    that an edit by temporary file + rename may replace it; else a :class:`SourceError`
    that says why not, before anything is written.

    Refused: a file that is not a regular file, has several hard links (an edit makes a new
    file: the other names would keep the old contents), or is read-only by its mode bits
    (checked as bits, so that root is refused too), and a file whose folder or file system
    is read-only.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> _ = open(path, "w").write("x")
        >>> check_editable(path)[0] == os.path.realpath(path)
        True
        >>> os.chmod(path, 0o444)
        >>> try:
        ...     check_editable(path)
        ... except SourceError as exc:
        ...     print(str(exc).split(": ", 1)[1])
        the file is read-only (mode 0444); nothing was written
    """
    real = os.path.realpath(path)
    shown = path if real == os.path.abspath(path) else f"{path} (a link to {real})"
    try:
        st = os.stat(real)
    except OSError as exc:
        raise SourceError(f"cannot edit {shown}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"cannot edit {shown}: it is not a regular file")
    if st.st_nlink > 1:
        raise SourceError(
            f"cannot edit {shown}: it has {st.st_nlink} hard links, and an atomic edit writes "
            f"a new file, so the other {st.st_nlink - 1} name(s) would keep the old contents; "
            "edit a copy, or remove the other links first; nothing was written"
        )
    refuse_read_only(st, real, shown, "edit")
    folder = os.path.dirname(real)
    try:
        fst = os.stat(folder)
        read_only_fs = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError as exc:
        raise SourceError(f"cannot edit {shown}: {folder}: {exc.strerror or exc}") from exc
    if read_only_fs:
        raise SourceError(f"cannot edit {shown}: its file system is mounted read-only")
    if not can_write(fst) or (os.geteuid() != 0 and not os.access(folder, os.W_OK | os.X_OK)):
        raise SourceError(
            f"cannot edit {shown}: its folder {folder} is read-only (mode "
            f"{stat.S_IMODE(fst.st_mode):04o}), and the edited file is written there and "
            "renamed into place; nothing was written"
        )
    return real, st


def refuse_read_only(
    st: os.stat_result, name: str, shown: str, doing: str, dir_fd: int | None = None
) -> None:
    """A :class:`SourceError` when the regular file ``name`` (of status ``st``; in the
    folder ``dir_fd`` when given) is read-only: by its mode bits (root too), or for this
    user. An edit or a write over it would replace what its owner protected."""
    if can_write(st) and (
        os.geteuid() == 0 or os.access(name, os.W_OK, dir_fd=dir_fd, follow_symlinks=False)
    ):
        return
    mode = stat.S_IMODE(st.st_mode)
    raise SourceError(
        f"cannot {doing} {shown}: the file is read-only (mode {mode:04o}); nothing was written"
    )


def keep_owner_and_mode(
    fd: int, st: os.stat_result, name: str | None = None, dir_fd: int | None = None
) -> None:
    """Give the new file the old one's owner (where permitted), permission bits and POSIX
    access ACL. ``name``: the old file's path (in the folder ``dir_fd`` when given), whose
    ACL (:func:`access_acl`) is copied; with an ACL the mode's group bits are its *mask*,
    not what the owning group may do, so the bits alone would open a file the ACL kept from
    its group. An ACL that cannot be given leaves the group what the ACL gave it, never the
    mask (the named users and groups lose their access: narrower, never wider)."""
    own = os.fstat(fd)
    if (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid):
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:
            try:  # a member of the file's group may still keep that
                os.fchown(fd, -1, st.st_gid)
            except PermissionError:
                pass
    mode = stat.S_IMODE(st.st_mode)
    acl = None if name is None else access_acl(name, dir_fd)
    if acl is not None:
        group = _acl_group(acl)
        mode &= ~0o070 | (group << 3)  # (until the ACL is given, or when it cannot be)
    os.fchmod(fd, mode)  # after chown, which clears set-id bits
    if acl is not None:
        try:
            os.setxattr(fd, ACL_ACCESS, acl)
        except OSError:
            pass  # (the mode above stands: the group keeps what the ACL gave it)


ACL_ACCESS = "system.posix_acl_access"
"""The extended attribute of a file's POSIX access ACL (Linux's xattr encoding)."""
NO_ACL = frozenset({errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP})
"""The errors of reading an ACL that say there is none (or none can be on that file system)."""
_ACL_GROUP_OBJ, _ACL_MASK = 0x04, 0x10
BASE_ACL = 4 + 3 * 8
"""Bytes of an access ACL with only the three base entries (owner, group, other: the mode
bits); a longer one names other users or groups, and has a mask."""


def access_acl(name: str, dir_fd: int | None = None) -> bytes | None:
    """The POSIX access ACL of the file ``name`` (in the folder ``dir_fd`` when given; a
    symlink is not followed) when it has one beyond its mode bits, else None (none, none
    possible, or it cannot be read).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x")
        >>> _ = open(path, "w").write("x")
        >>> access_acl(path) is None
        True
    """
    if not hasattr(os, "getxattr"):
        return None
    where = name if dir_fd is None else f"/proc/self/fd/{dir_fd}/{name}"
    try:
        acl = os.getxattr(where, ACL_ACCESS, follow_symlinks=False)
    except OSError:
        return None
    return acl if len(acl) > BASE_ACL else None


def _acl_group(acl: bytes) -> int:
    """What the owning group may do under the ACL ``acl`` (``rwx`` bits: its ``GROUP_OBJ``
    entry within the mask); 0 for an ACL that cannot be parsed."""
    if len(acl) < 4 or (len(acl) - 4) % 8:
        return 0
    entries = {}
    for at in range(4, len(acl), 8):
        tag, perm = int.from_bytes(acl[at : at + 2], "little"), acl[at + 2] & 7
        entries[tag] = perm
    return entries.get(_ACL_GROUP_OBJ, 0) & entries.get(_ACL_MASK, 7)
