"""The cache folder's files at the system level: descriptors that carry locks (closed in a
child after ``fork``), entries opened without ever blocking or following a link, damaged
entries healed, and each whole-file entry's record (checksum, ETag).

**Locks and fork.** A ``flock`` belongs to an open file description, and ``fork`` gives the
child every description of the parent. A DataLoader worker forked while a background
download holds a shard's lock (or the temporary file's, which the rename moves onto the
shard file) would keep that lock for its whole life: the parent's threads would wait for
the child, and a child reading that shard would wait for itself. So every descriptor of
the cache that can carry a lock is opened through :func:`open_fd` (or :func:`adopt`\\ ed)
and closed through :func:`close_fd`; an ``os.register_at_fork`` handler closes all of them
in the child (the parent's locks then end when the parent closes its own copies), and a
fork waits while one is being opened or closed (:func:`guarded`), so the list is exact.

**Damaged entries.** Every entry of a cache folder is untrusted: anything but a regular
file with one name at an entry's name (a FIFO, a directory, a symlink, a socket, a hard link)
is removed without being followed (:func:`heal`) and the entry fetched again, as a file of
the wrong size is. No
open of an entry can block (:func:`open_fd`, :func:`open_entry`: ``O_NONBLOCK``,
``O_NOFOLLOW``, then a file-type check).

**Records.** ``<key>.sum`` holds the XXH3-64 of a whole-file entry as downloaded and the
ETag the download saw; it is written (atomically) before the entry is renamed into place.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> fd = open_fd(os.path.join(folder, "a.lock"), os.O_RDWR | os.O_CREAT)
    >>> fd in held()
    True
    >>> close_fd(fd); fd in held()
    False
    >>> os.mkfifo(os.path.join(folder, "b.shard"))
    >>> heal(os.path.join(folder, "b.shard")), os.listdir(folder)
    (True, ['a.lock'])
    >>> write_record(os.path.join(folder, "c.sum"), "xxh3:00ff", '"v1"')
    >>> read_record(os.path.join(folder, "c.sum"))
    ('xxh3:00ff', '"v1"')
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import stat
import threading
from collections.abc import Iterator
from typing import Literal, overload

from ...core.atomic import AtomicFile, preallocate, write_all
from ...core.digests import Digest
from ...core.errors import SourceError
from ..local.tree import remove_folder_at
from .guards import StuckEntry, distrust, flock_within, untrusted

__all__ = [
    "ENTRY_MODE",
    "RECORD_BYTES",
    "adopt",
    "close_fd",
    "digest_fd",
    "drop",
    "end_temp",
    "forget",
    "guarded",
    "heal",
    "held",
    "is_entry",
    "lock_fd",
    "lock_same",
    "new_temp",
    "open_entry",
    "open_fd",
    "open_folder",
    "open_folders",
    "read_record",
    "remove_stuck",
    "remove_unused",
    "write_record",
    "write_small",
]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_GUARD = [threading.Lock()]
_HELD: set[int] = set()
RECORD_BYTES = 512
"""The most bytes a record may hold (a longer one is never written, never read): a
download reserves this much room for its record."""
_O_ENTRY = os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
_O_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
_FOLDER_MODE = 0o700
"""The mode of the folders the cache makes (never writable by group or others, whatever
the umask: :func:`~.guards.distrust` would refuse them; nor searchable by them: another
user cannot open an entry to ``flock`` it, even in a cache folder others may read). A
layout folder of this user's with a wider mode (an older version made them 0755) is
narrowed to it when opened."""
ENTRY_MODE = 0o600
"""The mode of the files the cache writes (set with ``fchmod``, whatever the umask: one
writable by its group would be refused by :func:`~.guards.distrust`; readable by their
owner only, as the cache is one user's)."""


def _at(path: str, dir_fd: int | None) -> str:
    """What names ``path`` in a call with ``dir_fd``: its last part when ``dir_fd`` (an
    open descriptor of its folder) is given, else ``path`` itself."""
    return path if dir_fd is None else os.path.basename(path)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """Hold off ``fork`` (and the other openers) while descriptors are opened or closed."""
    with _GUARD[0]:
        yield


def open_fd(path: str, flags: int, mode: int = 0o600, *, dir_fd: int | None = None) -> int:
    """``os.open`` (never following a symlink, never blocking on a FIFO, close-on-exec),
    the descriptor remembered until :func:`close_fd`: a forked child closes it.
    ``dir_fd``: ``path``'s folder is this open descriptor (its path is not used)."""
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC
    with _GUARD[0]:
        fd = os.open(_at(path, dir_fd), flags, mode, dir_fd=dir_fd)
        _HELD.add(fd)
    return fd


def open_entry(path: str, flags: int = os.O_RDONLY, *, dir_fd: int | None = None) -> int | None:
    """A descriptor of the regular file ``path`` (not remembered: it carries no lock); None
    when there is none. Anything else there (a FIFO, a directory, a symlink, a socket, a
    file with other hard links) is removed (:func:`heal`) and None returned, as is a file
    another user could have written (:func:`~.guards.distrust`); the open never blocks nor
    follows a link.
    ``dir_fd``: ``path``'s folder is this open descriptor."""
    try:
        fd = os.open(_at(path, dir_fd), flags | _O_ENTRY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR, errno.EWOULDBLOCK):
            heal(path, dir_fd=dir_fd)
            return None
        raise
    try:
        st = os.fstat(fd)
        if is_entry(st) and distrust(st, fd) is None:
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    if not heal(path, dir_fd=dir_fd):
        drop(path, st, dir_fd=dir_fd)  # (another user's file: never read)
    return None


def drop(path: str, seen: os.stat_result, *, dir_fd: int | None = None) -> None:
    """Remove the file at ``path`` if it is still the one ``seen`` (a damaged entry: another
    user's, or writable by others); one that cannot be removed is a
    :class:`~.guards.StuckEntry` (nothing could ever be renamed over it: the read goes on
    without the cache)."""
    name = _at(path, dir_fd)
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
        _remove(name, dir_fd, f"the cache entry {path} is damaged and cannot be removed")


def adopt(fd: int) -> None:
    """Remember ``fd`` as :func:`open_fd` does (call it inside :func:`guarded`, with the
    call that opened it)."""
    _HELD.add(fd)


def forget(fd: int) -> None:
    """Stop remembering ``fd`` (call it inside :func:`guarded`, with the call that closes
    it)."""
    _HELD.discard(fd)


def close_fd(fd: int) -> None:
    """Close a descriptor of :func:`open_fd`."""
    with _GUARD[0]:
        _HELD.discard(fd)
        os.close(fd)


def held() -> frozenset[int]:
    """The descriptors remembered now (tests)."""
    return frozenset(_HELD)


def _before_fork() -> None:
    _GUARD[0].acquire()


def _after_fork_parent() -> None:
    _GUARD[0].release()


def _after_fork_child() -> None:
    fds = sorted(_HELD)
    _HELD.clear()
    for fd in fds:  # the threads that owned them are not in the child
        with contextlib.suppress(OSError):
            os.close(fd)
    _GUARD[0] = threading.Lock()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child
)


class _PrivateTemp(AtomicFile):
    """A cache entry's temporary file, made 0600 whatever the umask: no other user can open
    it for writing before :data:`ENTRY_MODE` is set (a descriptor opened in that window
    would keep writing into the committed entry), and never given the mode or owner of a
    file planted at the entry's name."""

    MODE = 0o600
    KEEP_MODE = False


def new_temp(dest: str, size: int, *, fsync: bool = False, dir_fd: int | None = None) -> AtomicFile:
    """The temporary file of the entry ``dest`` (anything but a regular file there removed
    first), ``size`` bytes long (preallocated where the file system can: a disk too small
    fails here), its lock-holding descriptor closed in a forked child. End it with
    :func:`end_temp`. ``dir_fd``: ``dest``'s folder is this open descriptor (the file is
    made, renamed and removed there, whatever its path names meanwhile)."""
    heal(dest, dir_fd=dir_fd)
    with _GUARD[0]:
        tmp = _PrivateTemp(dest, fsync=fsync, dir_fd=dir_fd)
        _HELD.add(tmp.fd)
    try:
        os.fchmod(tmp.fd, ENTRY_MODE)
        preallocate(tmp.fd, size)
        if os.fstat(tmp.fd).st_size != size:
            os.ftruncate(tmp.fd, size)
    except BaseException:
        end_temp(tmp, commit=False)
        raise
    return tmp


def end_temp(tmp: AtomicFile, *, commit: bool) -> None:
    """Rename the temporary file of :func:`new_temp` into place (``commit``; its data
    flushed first when it was made with ``fsync``), else remove it; nothing when it was
    ended already."""
    if commit and tmp.fsync and not tmp.done:
        os.fsync(tmp.fd)
        tmp.fsync = False
    if tmp.done:
        return
    with _GUARD[0]:  # the rename and close are quick: a fork waits for them
        _HELD.discard(tmp.fd)
        if commit:
            tmp.commit()
        else:
            tmp.abort()


def lock_fd(
    path: str, *, wait: bool = True, dir_fd: int | None = None, within: float | None = None
) -> int:
    """A descriptor of the lock file ``path`` (created if need be, readable by its owner
    only), exclusively locked (``wait``: else not locked) on the file the name still holds
    (a sweep may remove a lock file), waited for at most ``within`` seconds (None:
    :data:`~.guards.LOCK_WAIT`; still held then: :class:`~.guards.LockHeld`). What is no
    entry (:func:`heal`: a symlink never followed, a FIFO never waited on, a hard link) or
    cannot be opened is removed first (:func:`remove_stuck`). ``dir_fd``: ``path``'s
    folder is this open descriptor."""
    for _ in range(16):
        try:
            fd = open_fd(path, os.O_RDWR | os.O_CREAT, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if heal(path, dir_fd=dir_fd):
                continue
            if exc.errno in (errno.EPERM, errno.EACCES) and remove_stuck(path, exc, dir_fd=dir_fd):
                continue  # (a file we may not open: removed)
            raise SourceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
        try:
            st = os.fstat(fd)
            if not is_entry(st):  # (never an fchmod or utime of a hard link's other file)
                close_fd(fd)
                fd = -1
                heal(path, dir_fd=dir_fd)
                continue
            if st.st_mode & 0o077 and st.st_uid == os.geteuid():
                with contextlib.suppress(OSError):  # (one an older version made 0644)
                    os.fchmod(fd, 0o600)
            if not wait:
                return fd
            if lock_same(fd, path, st, fcntl.LOCK_EX, dir_fd=dir_fd, wait=within):
                return fd
        except BaseException:
            if fd >= 0:
                close_fd(fd)
            raise
        close_fd(fd)  # removed by a sweep before we locked it: take the new one
    raise SourceError(f"cannot lock {path}: it is replaced again and again")


def lock_same(
    fd: int,
    path: str,
    st: os.stat_result,
    how: int,
    *,
    dir_fd: int | None = None,
    wait: float | None = None,
    memory: str | None = None,
) -> bool:
    """``flock(fd, how)`` (waiting at most ``wait`` seconds, a lock found held remembered
    by ``memory``: :func:`~.guards.flock_within`), then whether ``path`` still names the
    file ``fd`` is open on (``st``: its fstat); False when it was removed or replaced
    meanwhile (the caller closes ``fd`` and opens the name again)."""
    flock_within(fd, how, path, wait, memory=memory)
    try:
        now = os.stat(_at(path, dir_fd), dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def remove_unused(path: str, record: str, *, force: bool, dir_fd: int | None = None) -> bool:
    """Remove the shard file ``path`` (and its ``record``, in the same folder) unless it is
    open somewhere (a shared lock held); ``force``: even then (the name goes, the readers
    keep their copy). ``dir_fd``: their folder is this open descriptor."""
    try:
        fd = open_fd(path, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if not force:
                return False  # open somewhere: kept while anything else can go
        os.unlink(_at(path, dir_fd), dir_fd=dir_fd)
        with contextlib.suppress(OSError):
            os.unlink(_at(record, dir_fd), dir_fd=dir_fd)
        return True
    except OSError:
        return False
    finally:
        close_fd(fd)


def is_entry(st: os.stat_result) -> bool:
    """Whether a cache entry of this status may be used: a regular file with one name (the
    cache's ``fchmod`` and ``utime`` of a hard link would change its other file)."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def heal(path: str, *, dir_fd: int | None = None) -> bool:
    """Remove what is at ``path`` if it is no entry the cache may use (:func:`is_entry`: a
    directory with what it holds, a symlink, not followed, a hard link); True when something
    was removed. One that cannot be removed is a :class:`~.guards.StuckEntry` naming it (the
    read goes on without the cache). ``dir_fd``: ``path``'s folder is this open descriptor."""
    name = _at(path, dir_fd)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SourceError(f"cannot check the cache entry {path}: {exc.strerror}") from exc
    if is_entry(st):
        return False
    what = "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a regular file"
    _remove(name, dir_fd, f"the cache entry {path} {what} and cannot be removed",
            tree=stat.S_ISDIR(st.st_mode))  # fmt: skip
    return True


def remove_stuck(path: str, exc: OSError, *, dir_fd: int | None = None) -> bool:
    """Remove the file at ``path``, which could not be used (``exc``: why); whether one was
    there. One that cannot be removed either (an immutable file) is a
    :class:`~.guards.StuckEntry` (the read goes on without the cache)."""
    try:
        os.unlink(_at(path, dir_fd), dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise StuckEntry(
            f"the cache entry {path} cannot be used ({exc.strerror or exc}) and cannot be "
            f"removed: {err.strerror or err}; read without the cache"
        ) from err
    return True


def _remove(name: str, dir_fd: int | None, why: str, *, tree: bool = False) -> None:
    """Remove ``name`` (in the folder ``dir_fd``; ``tree``: a folder and what it holds,
    symlinks inside removed, not followed); gone already is no error, anything else a
    :class:`~.guards.StuckEntry` saying ``why`` (the read goes on without the cache)."""
    try:
        if tree:
            _remove_tree(name, dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StuckEntry(f"{why}: {exc.strerror or exc}; read without the cache") from exc


def _remove_tree(name: str, dir_fd: int | None) -> None:
    """Remove the folder ``name`` (in the folder ``dir_fd``, else a path) and what it holds
    without recursion (:func:`~tensorfile.sources.local.tree.remove_folder_at`: a folder
    planted a few thousand levels deep is removed, never a ``RecursionError``)."""
    if dir_fd is not None:
        remove_folder_at(dir_fd, name, name)
        return
    folder, base = os.path.split(name)
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        remove_folder_at(fd, base, name)
    finally:
        os.close(fd)


@overload
def open_folder(path: str, *, create: Literal[True] = ..., parent: int | None = ...) -> int: ...
@overload
def open_folder(path: str, *, create: bool, parent: int | None = ...) -> int | None: ...
def open_folder(path: str, *, create: bool = True, parent: int | None = None) -> int | None:
    """A descriptor of the cache's own folder ``path`` (a layout folder, a file's chunk
    folder) opened without following a symlink (``O_DIRECTORY | O_NOFOLLOW``): what is done
    relative to it stays in that folder, even if its name is swapped for a symlink a moment
    later. Anything but a real folder there (a symlink, even to a folder, a FIFO, a file, a
    socket) is removed without being followed, then (``create``) a folder made; None when
    no folder is there (and not ``create``). ``parent``: an open descriptor of ``path``'s
    folder, where its last part is looked up (its path is not used). A folder another user
    could write in (:func:`~.guards.distrust`) is removed too when it is inside a folder of the
    cache (``parent``), else refused (:class:`~.guards.UntrustedFolder`: a layout
    folder). One that
    cannot be healed is a :class:`~tensorfile.errors.SourceError` naming it. The caller
    closes the descriptor.

    Example:
        >>> import os, tempfile
        >>> base = tempfile.mkdtemp()
        >>> os.symlink(tempfile.mkdtemp(), os.path.join(base, "chunks-v1"))
        >>> os.close(open_folder(os.path.join(base, "chunks-v1")))
        >>> os.path.islink(os.path.join(base, "chunks-v1"))
        False
    """
    name = _at(path, parent)
    for _ in range(16):
        try:
            fd = os.open(name, _O_FOLDER, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(name, _FOLDER_MODE, dir_fd=parent)
            except FileExistsError:
                pass  # (made or planted meanwhile: look again)
            except OSError as exc:
                raise SourceError(
                    f"the cache folder {path} cannot be made: {exc.strerror or exc}"
                ) from exc
            continue
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise SourceError(
                    f"cannot open the cache folder {path}: {exc.strerror or exc}"
                ) from exc
        else:
            why = _distrust_fd(fd)
            if why is None:
                _narrow(fd)
                return fd
            os.close(fd)
            if parent is None:
                raise untrusted(path, why)
            # another user's folder inside ours: a damaged entry, removed (never followed)
            _remove(name, parent, f"the cache folder {path} is {why} and cannot be removed",
                    tree=True)  # fmt: skip
            if not create:
                return None
            continue
        # not a folder (a symlink, even to one, a FIFO, a file): removed, never followed
        _remove(name, parent, f"the cache folder {path} is not a folder and cannot be replaced")
        if not create:
            return None
    raise SourceError(f"the cache folder {path} is replaced again and again")


def _narrow(fd: int) -> None:
    """Give the cache's folder ``fd``, when it is this user's, :data:`_FOLDER_MODE` (one an
    older version made 0755 let other users open its entries)."""
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, _FOLDER_MODE)


def _distrust_fd(fd: int) -> str | None:
    try:
        return distrust(os.fstat(fd), fd)
    except BaseException:
        os.close(fd)
        raise


@overload
def open_folders(folder: str, *names: str, create: Literal[True] = ...) -> int: ...
@overload
def open_folders(folder: str, *names: str, create: bool) -> int | None: ...
def open_folders(folder: str, *names: str, create: bool = True) -> int | None:
    """A descriptor of ``folder/names[0]/names[1]/...``, each name opened (and healed) by
    :func:`open_folder` in the descriptor of the one before it (``folder``, the cache
    folder, is the caller's choice: its path is used as given); None when one is missing
    (and not ``create``). The caller closes the descriptor.

    Example:
        >>> import os, tempfile
        >>> base, outside = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(base, "chunks-v1"))
        >>> os.symlink(outside, os.path.join(base, "chunks-v1", "k"))
        >>> fd = open_folders(base, "chunks-v1", "k")
        >>> os.close(os.open("x", os.O_CREAT | os.O_WRONLY, dir_fd=fd)); os.close(fd)
        >>> os.listdir(os.path.join(base, "chunks-v1", "k")), os.listdir(outside)
        (['x'], [])
    """
    where = os.path.join(folder, names[0])
    fd = open_folder(where, create=create)
    for name in names[1:]:
        if fd is None:
            return None
        where = os.path.join(where, name)
        try:
            sub = open_folder(where, create=create, parent=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd


def digest_fd(fd: int, size: int) -> str:
    """The XXH3-64 of the first ``size`` bytes of the open file ``fd`` (``xxh3:<hex>``)."""
    d = Digest("xxh3")
    if size:
        with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            for at in range(0, size, 64 << 20):
                with memoryview(mm)[at : at + (64 << 20)] as piece:
                    d.update(piece)
    return d.value()


def write_record(path: str, digest: str, version: str | None, *, dir_fd: int | None = None) -> None:
    """Write an entry's record (atomically); a version too long for a record is not kept
    (the record then says none). ``dir_fd``: ``path``'s folder is this open descriptor."""
    data = json.dumps({"xxh3": digest, "etag": version}).encode()
    if len(data) > RECORD_BYTES:
        data = json.dumps({"xxh3": digest, "etag": None}).encode()
    write_small(path, data, dir_fd=dir_fd)  # (healing what is there first, as new_temp does)


def write_small(path: str, data: bytes, *, dir_fd: int | None = None) -> None:
    """Write a small cache file (a record, ``info.json``) whole and atomically, made as an
    entry's data is (:func:`new_temp`: 0600 while it is written, :data:`ENTRY_MODE` when it
    is renamed into place), so no other user can open it for writing at any moment."""
    tmp = new_temp(path, len(data), dir_fd=dir_fd)
    try:
        write_all(tmp.fd, memoryview(data), 0)
    except OSError as exc:
        end_temp(tmp, commit=False)
        raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        end_temp(tmp, commit=False)
        raise
    end_temp(tmp, commit=True)


def read_record(path: str, *, dir_fd: int | None = None) -> tuple[str, str | None] | None:
    """``(digest, etag)`` of an entry's record; None when there is none or it is unreadable
    (anything but a regular file there is removed)."""
    try:
        fd = open_entry(path, dir_fd=dir_fd)
    except OSError:
        return None
    if fd is None:
        return None
    try:
        doc = json.loads(os.read(fd, RECORD_BYTES))
        digest, version = doc["xxh3"], doc["etag"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        os.close(fd)
    if not isinstance(digest, str) or not (version is None or isinstance(version, str)):
        return None
    return digest, version
