"""Reads that bypass the page cache (``O_DIRECT``), through aligned, reused bounce buffers.

A cold file read through the page cache is read twice over in memory: the kernel fills new
page-cache pages (fresh memory, which on a lazily backed virtual machine costs as much as
the destination's own pages) and then copies them out. ``O_DIRECT`` moves the disk's bytes
straight into the reader's memory, which must be aligned: offsets, lengths and addresses at
multiples of :data:`ALIGN`. A tensor's bytes sit at any offset and go to any address, so each
thread reads aligned blocks into a bounce buffer (page-aligned, reused, from a :data:`POOL`
the process's direct files share) and copies them out with ``memmove`` (which releases the
GIL). Where a destination happens to sit at the same offset modulo :data:`ALIGN` as its bytes
in the file, its aligned middle is read straight into it.

Not every filesystem takes ``O_DIRECT`` (sysfs, procfs, tmpfs before Linux 6.6 refuse it):
:func:`open_direct` returns None there, and the caller reads through the page cache.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
    >>> _ = open(path, "wb").write(bytes(range(256)) * 64)
    >>> fd = os.open(path, os.O_RDONLY)
    >>> direct = open_direct(fd, "f.bin", 1 << 20)
    >>> out = bytearray(5)
    >>> if direct is not None:  # (None where the filesystem refuses O_DIRECT)
    ...     direct.readinto(1000, [memoryview(out)])
    ...     direct.close()
    ... else:
    ...     out[:] = bytes(range(232, 237))
    >>> bytes(out) == bytes(range(232, 237))
    True
    >>> os.close(fd)
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading

from ...core.errors import SourceError

__all__ = ["ALIGN", "POOL", "BouncePool", "DirectFile", "open_direct"]

ALIGN = 4096
"""Offsets, lengths and addresses of direct reads are multiples of this (the strictest
logical block size disks report; 512-byte devices take it too)."""


def _address(view: memoryview) -> int:
    """The address of a writable, contiguous buffer."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def open_direct(fd: int, name: str, window: int) -> DirectFile | None:
    """A :class:`DirectFile` over the file open as ``fd`` (reopened through
    ``/proc/self/fd`` with ``O_DIRECT``, so it works for a file opened by someone else),
    or None where the filesystem or the platform refuses direct reads."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | flag | getattr(os, "O_CLOEXEC", 0))
    except OSError:  # EINVAL: the filesystem refuses O_DIRECT; no /proc
        return None
    try:
        a, b = os.fstat(fd), os.fstat(own)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            os.close(own)
            return None
    except OSError:
        os.close(own)
        return None
    return DirectFile(own, name, window)


Bounce = tuple[mmap.mmap, memoryview, int]
"""A bounce buffer: the mapping, a view of it, its address."""


class BouncePool:
    """Bounce buffers shared by every open :class:`DirectFile` of the process, so that a
    checkpoint of many shards read in one plan holds one buffer per reading thread, not one
    per thread and per shard. Idle buffers are kept (at most ``keep`` of each size) while
    any direct file is open, and freed when the last one closes.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: dict[int, list[Bounce]] = {}
        self._users = 0
        self._lock = threading.Lock()

    def opened(self) -> None:
        with self._lock:
            self._users += 1

    def closed(self) -> None:
        with self._lock:
            self._users -= 1
            drained = [] if self._users else [b for lst in self._free.values() for b in lst]
            if not self._users:
                self._free = {}
        for bounce in drained:
            _free(bounce)

    def idle(self) -> int:
        """Buffers kept for the next read."""
        with self._lock:
            return sum(len(lst) for lst in self._free.values())

    def take(self, size: int) -> Bounce:
        """A free buffer of ``size`` bytes, or a new one (anonymous memory: page-aligned)."""
        with self._lock:
            kept = self._free.get(size)
            if kept:
                return kept.pop()
        buf = mmap.mmap(-1, size)
        view = memoryview(buf)
        return buf, view, _address(view)

    def give(self, size: int, bounce: Bounce) -> None:
        with self._lock:
            kept = self._free.setdefault(size, [])
            if self._users and len(kept) < self.keep:
                kept.append(bounce)
                return
        _free(bounce)


POOL = BouncePool(keep=16)
"""The process's bounce buffers (16 of 8 MiB at most while direct files are open)."""


class DirectFile:
    """Direct reads of one file, from any number of threads at once.

    Each read takes a bounce buffer of ``window`` bytes plus two alignment blocks from
    :data:`POOL` and gives it back: the memory held is one buffer per thread reading, shared
    with the other open direct files. A read that hits the end of the file short of what was
    asked means the file was truncated after it was opened: a
    :class:`~tensorfile.errors.SourceError`.
    """

    def __init__(self, fd: int, name: str, window: int) -> None:
        self.fd = fd
        self.name = name
        self.window = max(ALIGN, window // ALIGN * ALIGN)
        self._size = self.window + 2 * ALIGN
        self._lock = threading.Lock()
        self._closed = False
        POOL.opened()

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` (writable, contiguous bytes) from consecutive bytes at
        ``offset``."""
        bounce = POOL.take(self._size)
        try:
            pos = offset
            for buf in buffers:
                addr = _address(buf) if buf.nbytes else 0
                done = 0
                while done < buf.nbytes:
                    here, left = pos + done, buf.nbytes - done
                    if (addr + done - here) % ALIGN == 0 and left >= 2 * ALIGN:
                        done += self._straight(bounce, here, buf[done:], addr + done)
                    else:
                        done += self._bounced(bounce, here, left, addr + done)
                pos += buf.nbytes
        finally:
            POOL.give(self._size, bounce)

    def _straight(self, bounce: Bounce, offset: int, dest: memoryview, addr: int) -> int:
        """Read the aligned middle of ``dest`` (congruent to ``offset``) straight into it;
        the bytes before the first aligned address go through the bounce buffer. Returns
        the bytes filled."""
        head = -offset % ALIGN
        if head:
            return self._bounced(bounce, offset, head, addr)
        length = min(dest.nbytes // ALIGN * ALIGN, self.window)
        self._pread_exact(dest[:length], offset, length)
        return length

    def _bounced(self, bounce: Bounce, offset: int, length: int, addr: int) -> int:
        """Read up to one window covering ``[offset, offset+length)`` into the bounce
        buffer and copy the wanted part to ``addr``. Returns the bytes copied."""
        _, view, base = bounce
        start = offset // ALIGN * ALIGN
        skip = offset - start
        take = min(length, self.window + ALIGN - skip)
        span = -(-(skip + take) // ALIGN) * ALIGN
        self._pread_exact(view[:span], start, skip + take)
        ctypes.memmove(addr, base + skip, take)
        return take

    def _pread_exact(self, view: memoryview, offset: int, need: int) -> None:
        """Read aligned ``view`` from ``offset``; at least ``need`` bytes must come (the
        rest of ``view`` may lie past the end of the file)."""
        got = 0
        while got < need:
            try:
                n = os.preadv(self.fd, [view[got:]], offset + got)
            except OSError as exc:
                raise SourceError(
                    f"{self.name}: read at offset {offset + got} failed: {exc.strerror or exc}"
                ) from exc
            if n <= 0:
                raise SourceError(
                    f"{self.name}: the file ended at offset {offset + got}; it was truncated "
                    "after it was opened"
                )
            got += n
            if got % ALIGN:  # a short read not on a block boundary: the end of the file
                if got < need:
                    raise SourceError(
                        f"{self.name}: the file ended at offset {offset + got}; it was "
                        "truncated after it was opened"
                    )
                return

    def close(self) -> None:
        """Close the descriptor (the pool frees its idle buffers when the last direct file
        closes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.close(self.fd)
        POOL.closed()


def _free(bounce: Bounce) -> None:
    buf, view, _ = bounce
    view.release()
    buf.close()
