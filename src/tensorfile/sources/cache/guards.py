"""What keeps other users out of the cache folder: who may write in it, and how long a lock
is waited for.

**Who may write.** A cache folder another user can write in decides the bytes a load
returns (a planted chunk needs only public facts: the URL, the ETag, the size). So, as ssh
does for its files, the cache folder and its layout folders are used only when they are
owned by this process's user (or root), writable by no group nor other user, and carry
no extended POSIX ACL (:func:`distrust`); else the read goes on without the
cache (:class:`UntrustedFolder`, with a warning). A symlink at the cache folder's own path is
followed only when it is this user's or root's (:func:`distrust_link`): one another user
planted there, before the cache was made, would choose the folder it is made in. Inside
such a folder, a file's chunk folder or an entry owned by another user, or writable by a
group or others, is a damaged entry: removed, never read. (The folders above the cache
folder are the user's choice and are not checked.)

**Bounded waits.** A lock is a file others may open: a user who can only read the folder
can ``flock`` a lock file or a cached file (``flock`` works on a read-only descriptor), and
a process of ours may hang while it holds one. No lock of the cache is waited for without
bound: :func:`flock_within` polls for at most :data:`LOCK_WAIT` seconds, then
:class:`LockHeld` says which lock in which folder is held, and the read goes on without the
cache. Lock files are made readable by their owner only.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> check_root(folder)
    >>> os.chmod(folder, 0o777)
    >>> try:
    ...     check_root(folder)
    ... except UntrustedFolder as exc:
    ...     print(str(exc).split(":")[1].strip())
    writable by every user
"""

from __future__ import annotations

import fcntl
import os
import pwd
import stat
import time

from ...core.errors import SourceError
from ...core.release import ACL_ACCESS, BASE_ACL, NO_ACL

__all__ = [
    "HELD_MEMORY",
    "LOCK_WAIT",
    "CacheBypass",
    "LockHeld",
    "StuckEntry",
    "UntrustedFolder",
    "check_root",
    "distrust",
    "distrust_link",
    "flock_within",
    "untrusted",
]

LOCK_WAIT = 5.0
"""Seconds a lock of the cache folder (its ``.lock``, a cached shard's shared lock) is
waited for before the read goes on without the cache (:class:`LockHeld`). A legitimate
holder keeps one for a scan or a rename: milliseconds. (A shard's download lock is waited
for as long as a download may take: :data:`~.entries.WAIT_SECONDS`.)"""
HELD_MEMORY = 60.0
"""Seconds a lock found held is remembered: within them, the next wait for that lock in this
process is one try (the files of a sharded checkpoint do not each wait for it). The shared
locks of cached files are remembered per folder: a user who holds every cached shard of a
folder costs one wait, not one per shard."""
_HELD_AT: dict[str, float] = {}


class CacheBypass(SourceError):
    """The cache folder cannot be used for this read (a lock held by another process, a
    folder others can write in): the read goes on without the cache, with a
    :class:`~tensorfile.sources.CacheWarning` that says why."""


class LockHeld(CacheBypass):
    """A lock of the cache folder stayed held by another process for the whole wait."""


class UntrustedFolder(CacheBypass):
    """The cache folder or a layout folder in it can be written by another user."""


class StuckEntry(CacheBypass):
    """Something that is not a regular file at an entry's name (a folder, a FIFO) cannot be
    removed (a permission, an immutable file in it): the read goes on without the cache."""


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


_ACL_DEFAULT = "system.posix_acl_default"


def _acl(where: int | str, folder: bool) -> str | None:
    """Why the file or folder ``where`` (an open descriptor or a path) carries an ACL that
    could let another user write (None when none): an access ACL beyond the mode bits, or
    (a folder) any default ACL. One that cannot be read is distrusted."""
    if not hasattr(os, "getxattr"):
        return None
    for name in (ACL_ACCESS, _ACL_DEFAULT) if folder else (ACL_ACCESS,):
        try:
            value = os.getxattr(where, name)
        except OSError as exc:
            if exc.errno in NO_ACL:
                continue
            return f"its ACL cannot be read ({exc.strerror or exc})"
        if name == _ACL_DEFAULT or len(value) > BASE_ACL:
            kind = "a default" if name == _ACL_DEFAULT else "an extended"
            return f"it carries {kind} POSIX ACL (other users may write)"
    return None


def distrust(st: os.stat_result, where: int | str | None = None) -> str | None:
    """Why a cache folder or entry with this ``stat`` could be changed by a user other than
    this process's (None when it cannot): owned by another user (root excepted), writable
    by a group or by others (as ssh's StrictModes: a group may hold other users), or
    (``where``: its open descriptor or path, whose extended attributes are read) carrying
    an extended POSIX ACL.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> distrust(os.stat(folder), folder) is None
        True
        >>> os.chmod(folder, 0o777)
        >>> distrust(os.stat(folder)).endswith("writable by every user")
        True
    """
    me = os.geteuid()
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    if st.st_uid not in (me, 0):
        return f"owned by {_user(st.st_uid)}, not by {_user(me)} ({mode})"
    if st.st_mode & stat.S_IWOTH:
        why: str | None = "writable by every user"
    elif st.st_mode & stat.S_IWGRP:
        why = f"writable by its group (gid {st.st_gid})"
    else:
        why = None if where is None else _acl(where, stat.S_ISDIR(st.st_mode))
    # (the owner's name only in a refusal: a password-database lookup for every cache
    # entry opened cost a cached load a fifth of its time)
    return None if why is None else f"owned by {_user(st.st_uid)}, {mode}: {why}"


def check_root(folder: str) -> None:
    """Refuse the cache folder ``folder`` (:class:`UntrustedFolder`, saying what to do)
    when another user could write in it (:func:`distrust`), or when its own path is a
    symlink another user owns (:func:`distrust_link`); a folder that is not there yet
    passes (the cache makes it)."""
    why = distrust_link(folder)
    if why is not None:
        raise untrusted(folder, why)
    try:
        st = os.stat(folder)
    except OSError:
        return
    why = distrust(st, folder)
    if why is not None:
        raise untrusted(folder, why)


def distrust_link(path: str) -> str | None:
    """Why the symlink at ``path`` is not followed to a cache folder (None when ``path`` is
    no symlink, or one of this process's user or of root): a link another user owns (say
    planted in a folder others can write, at the path ``$TENSORFILE_CACHE_DIR`` names
    before the cache was made) picks a folder of yours for the cache. As the kernel's
    ``fs.protected_symlinks`` rule: a link is followed when its owner is who follows it.

    Example:
        >>> import os, tempfile
        >>> base = tempfile.mkdtemp()
        >>> os.symlink(tempfile.mkdtemp(), os.path.join(base, "cache"))
        >>> distrust_link(os.path.join(base, "cache")) is None  # (your own link)
        True
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISLNK(st.st_mode) or st.st_uid in (os.geteuid(), 0):
        return None
    try:
        target = f" to {os.readlink(path)!r}"
    except OSError:
        target = ""
    return (
        f"a symlink owned by {_user(st.st_uid)}, not by {_user(os.geteuid())}{target} "
        "(a folder another user chose)"
    )


def untrusted(folder: str, why: str) -> UntrustedFolder:
    """The error that refuses the cache folder (or layout folder) ``folder``: ``why``
    (:func:`distrust`), and what to do."""
    return UntrustedFolder(
        f"the cache folder {folder} is {why}: another user could plant the bytes a load "
        "returns, so the read bypasses the cache; use a folder only you can write (chmod "
        "go-w it and setfacl -b it, or use another cache_dir / $TENSORFILE_CACHE_DIR)"
    )


def flock_within(
    fd: int, how: int, path: str, wait: float | None = None, *, memory: str | None = None
) -> None:
    """``flock(fd, how)``, waited for at most ``wait`` seconds (None: :data:`LOCK_WAIT`),
    polled without blocking: no process holding the lock can hang this one. Still held
    then: :class:`LockHeld` names the lock ``path`` and its folder (and for
    :data:`HELD_MEMORY` seconds the next wait for it is one try). ``memory``: what that is
    remembered by (None: ``path``; a folder: every lock remembered by it at once).

    Example:
        >>> import fcntl, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), ".lock")
        >>> a, b = os.open(path, os.O_RDWR | os.O_CREAT), os.open(path, os.O_RDONLY)
        >>> flock_within(a, fcntl.LOCK_EX, path)
        >>> try:
        ...     flock_within(b, fcntl.LOCK_SH, path, wait=0.05)
        ... except LockHeld as exc:
        ...     print(str(exc).split(" in the")[0])
        the lock .lock
        >>> os.close(a); os.close(b)
    """
    limit = LOCK_WAIT if wait is None else wait
    key = path if memory is None else memory
    now = time.monotonic()
    if key in _HELD_AT and now - _HELD_AT[key] < HELD_MEMORY:
        limit = 0.0  # (found held a moment ago)
    give_up = now + limit
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            if memory is None:  # (a folder's: others in it may still be held)
                _HELD_AT.pop(key, None)
            return
        except BlockingIOError:
            pass
        if time.monotonic() >= give_up:
            _HELD_AT[key] = time.monotonic()
            raise LockHeld(
                f"the lock {os.path.basename(path)} in the cache folder "
                f"{os.path.dirname(path)} is held by another process (waited {limit:g} s): "
                "the read bypasses the cache"
            )
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
