"""How much of a file's byte range is in the page cache, and read-ahead hints.

:func:`resident_fraction` asks the kernel with ``cachestat()`` (Linux 6.5+: one call, no
memory), and where that is missing or filtered, with ``mincore()`` over a temporary
mapping of each window. A large range is sampled (at most :data:`SAMPLES` windows of
:data:`WINDOW` bytes, evenly spread), so the answer costs bounded time and memory whatever
the file's size. None means the kernel cannot say (not Linux, a file that cannot be mapped).

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b"x" * 8192)
    ...     f.flush()
    ...     resident_fraction(f.fileno(), 0, 8192)  # just written: in the page cache
    1.0
"""

from __future__ import annotations

import errno
import functools
import mmap
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["SAMPLES", "WINDOW", "advise", "resident_fraction"]

_PAGE = mmap.PAGESIZE
_CACHESTAT = 451  # the same number on every architecture (the unified syscall table)
WINDOW = 1 << 20
"""Bytes per window looked at."""
SAMPLES = 32
"""The most windows one answer looks at (evenly spread over a larger range)."""

_state = {"cachestat": sys.platform.startswith("linux")}


@functools.cache
def _libc() -> Any:
    """libc through ctypes, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return None


@functools.cache
def _cachestat_fn() -> Callable[[int, int, int], int | None] | None:
    """``cachestat(fd, start, length) -> pages cached`` (None on failure), or None."""
    libc = _libc()
    if libc is None:
        return None
    import ctypes

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "wb", "ev", "rev")]

    syscall = libc.syscall

    def call(fd: int, start: int, length: int) -> int | None:
        rng, out = Range(start, length), Stat()
        if syscall(_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(out), 0) != 0:
            if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP):
                _state["cachestat"] = False  # an old kernel or a seccomp filter
            return None
        return int(out.cache)

    return call


@functools.cache
def _mincore_fn() -> Any:
    libc = _libc()
    if libc is None:
        return None
    import ctypes

    fn = libc.mincore
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    fn.restype = ctypes.c_int
    return fn


def _mincore_window(fd: int, start: int, length: int) -> tuple[int, int] | None:
    """``(pages resident, pages)`` of one window (page-aligned ``start``), or None.

    The window is mapped copy-on-write (ctypes takes the address of a writable buffer
    only); nothing writes to it, so its pages stay the file's cached ones."""
    fn = _mincore_fn()
    if fn is None or length <= 0:
        return None
    import ctypes

    try:
        window = mmap.mmap(fd, length, access=mmap.ACCESS_COPY, offset=start)
    except (OSError, ValueError, OverflowError):
        return None
    try:
        pages = -(-length // _PAGE)
        vec = ctypes.create_string_buffer(pages)
        anchor = ctypes.c_char.from_buffer(window)
        try:
            failed = fn(ctypes.addressof(anchor), length, vec) != 0
        finally:
            del anchor
        return None if failed else (sum(b & 1 for b in vec.raw), pages)
    finally:
        window.close()


def _windows(first: int, stop: int) -> list[tuple[int, int]]:
    """``(start, length)`` of the windows looked at over ``[first, stop)``: all of it up to
    :data:`SAMPLES` windows, else that many spread evenly from the first to the last."""
    count = -(-(stop - first) // WINDOW)
    picks: list[int] | range
    if count <= SAMPLES:
        picks = range(count)
    else:
        picks = sorted({i * (count - 1) // (SAMPLES - 1) for i in range(SAMPLES)})
    out = []
    for index in picks:
        at = first + index * WINDOW
        out.append((at, min(WINDOW, stop - at)))
    return out


def resident_fraction(fd: int, start: int, stop: int) -> float | None:
    """The fraction (0.0-1.0) of the pages of bytes ``[start, stop)`` of the open file
    ``fd`` that are in the page cache; 1.0 for an empty range; None where the kernel cannot
    say. A range over :data:`SAMPLES` windows of :data:`WINDOW` bytes is sampled (that many,
    evenly spread): the kernel's answer costs time in proportion to the pages asked about.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     resident_fraction(f.fileno(), 0, 0)
        1.0
    """
    if stop <= start:
        return 1.0
    first = start // _PAGE * _PAGE
    windows = _windows(first, stop)
    resident = seen = 0
    call = _cachestat_fn() if _state["cachestat"] else None
    for at, length in windows:
        pages = -(-length // _PAGE)
        cached = None if call is None or not _state["cachestat"] else call(fd, at, length)
        if cached is not None:
            resident, seen = resident + min(cached, pages), seen + pages
            continue
        got = _mincore_window(fd, at, length)
        if got is None:
            return None
        resident, seen = resident + got[0], seen + got[1]
    return resident / seen if seen else None


def advise(fd: int, start: int, stop: int, advice: int) -> None:
    """``posix_fadvise`` over ``[start, stop)``, best effort (a filesystem may refuse it).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     advise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    """
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None or stop < start:
        return
    try:
        fadvise(fd, start, stop - start, advice)
    except OSError:
        pass
