"""A source over a local file: positional reads for copies, a private mapping for views."""

from __future__ import annotations

import errno
import functools
import mmap
import os
import stat
import sys
import weakref
from collections.abc import Callable, Iterator

from ..core.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from ..core.parallel import PARALLEL_MIN_BYTES, PIECE_BYTES, run_parallel, workers
from ..core.source import SourceBase

__all__ = ["LocalSource"]

# Linux moves at most ~2 GiB per read call and takes at most IOV_MAX buffers per preadv.
_MAX_CALL_BYTES = 1 << 30
_MAX_IOV = 1024

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
)

_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_special(name: str, mode: int) -> None:
    """Raise SourceError unless ``mode`` is a regular file's, saying what the path is."""
    if stat.S_ISREG(mode):
        return
    kind = next((text for test, text in _SPECIAL_KINDS if test(mode)), None)
    raise SourceError(
        f"{name} is {kind + ', not' if kind else 'not'} a regular file; tensorfile reads "
        "tensor files from regular files only"
    )


# Prefaulting destinations: MADV_POPULATE_WRITE (Linux 5.14+) allocates a range's pages in
# one call, cheaper than taking one page fault after another inside the read's copy.
_MADV_POPULATE_WRITE = 23
_PREFAULT_MIN_BYTES = 1 << 20
_populate = sys.platform.startswith("linux")  # cleared when the kernel refuses the advice


@functools.cache
def _libc_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes (imported on first use), or None."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _prefault(buffers: list[memoryview]) -> None:
    """Fault in the whole pages of each large buffer before it is read into.

    Fresh memory is allocated on its first write. Inside ``preadv`` that costs a page fault
    per page, each interrupting the copy; one ``madvise(MADV_POPULATE_WRITE)`` per buffer
    allocates them in a loop in the kernel instead (a 1 GiB load ~15% faster, in a fresh
    process and in a warm one). The pages are the ones the read writes next, so nothing
    more is held. Best effort: where the kernel or the memory does not support it, the read
    faults the pages in as before.
    """
    global _populate
    if not _populate:
        return
    madvise = _libc_madvise()
    if madvise is None:
        _populate = False
        return
    import ctypes

    page = mmap.PAGESIZE
    for buf in buffers:
        if buf.nbytes < _PREFAULT_MIN_BYTES:
            continue
        try:
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        except (TypeError, ValueError, BufferError):  # read-only or not contiguous
            continue
        start = -(-addr // page) * page
        stop = (addr + buf.nbytes) // page * page
        if stop > start and madvise(start, stop - start, _MADV_POPULATE_WRITE) != 0:
            if ctypes.get_errno() == errno.EINVAL:  # a kernel before 5.14
                _populate = False
                return


def _split(buffers: list[memoryview]) -> Iterator[list[memoryview]]:
    """Group buffers into preadv-sized batches, cutting buffers larger than one call."""
    batch: list[memoryview] = []
    size = 0
    for buf in buffers:
        for start in range(0, max(buf.nbytes, 1), _MAX_CALL_BYTES):
            piece = buf[start : start + _MAX_CALL_BYTES]
            if piece.nbytes == 0:
                continue
            if batch and (len(batch) == _MAX_IOV or size + piece.nbytes > _MAX_CALL_BYTES):
                yield batch
                batch, size = [], 0
            batch.append(piece)
            size += piece.nbytes
    if batch:
        yield batch


def _closer(owner: object, fd: int) -> weakref.finalize[[int], object]:
    """What closes ``fd``, exactly once: called by ``close()``, or run when ``owner`` is
    collected while the program runs (a source nobody closed).

    ``os.close`` is bound here, when the file opens, and nothing is looked up when it runs: a
    ``__del__`` that calls ``os.close`` can run during interpreter shutdown, after the module's
    globals are torn down, and prints ``Exception ignored in ... 'NoneType' object has no
    attribute 'close'`` on stderr. Nor does it run at exit (``atexit`` off): the finalizers of
    :mod:`weakref` stop when the interpreter starts to exit, and the process's exit closes the
    descriptor. A mapping needs no finalizer: :class:`mmap.mmap` unmaps itself when the last
    array over it is gone.
    """
    release = weakref.finalize(owner, os.close, fd)
    release.atexit = False
    return release


class LocalSource(SourceBase):
    """Read a local file with ``pread``/``preadv``; map it privately for zero-copy views.

    The mapping is copy-on-write (``MAP_PRIVATE``): arrays built on it may even be written
    to without ever touching the file.

    Only a regular file is read: a FIFO, a device, a directory or a socket is refused with a
    :class:`~tensorfile.errors.SourceError` that says what it is, before anything can block
    (it is checked before the open, and the open itself is non-blocking); a path of the wrong
    type, or one the OS cannot take (a NUL byte), is an
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
        >>> _ = open(path, "wb").write(b"hello world")
        >>> with LocalSource(path) as src:
        ...     src.read(6, 5)
        b'world'
        >>> LocalSource(os.path.dirname(path))
        Traceback (most recent call last):
        ...
        tensorfile.core.errors.SourceError: ... is a directory, not a regular file; ...
    """

    io_chunk = PIECE_BYTES
    """Bytes per piece of a planned read (:mod:`tensorfile.core.plan`)."""

    @property
    def io_threads(self) -> int:
        """Pieces read at once: one thread per core, at most 8 (copies out of the page cache
        are CPU-bound; the kernel releases the GIL during ``preadv``)."""
        return workers(PARALLEL_MIN_BYTES)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._closed = True  # until the file is open
        try:
            target = os.fspath(path)
        except TypeError:
            raise InvalidArgumentError(
                f"a path must be a str or os.PathLike, got {type(path).__name__}"
            ) from None
        self.name = os.fsdecode(target)
        try:
            # refuse a FIFO, device or directory before opening it: opening can block (a FIFO
            # waits for a writer) or have effects (a tape rewinds)
            _refuse_special(self.name, os.stat(target).st_mode)
            # O_NONBLOCK: if the path was swapped for a FIFO since, the open cannot block
            fd = os.open(target, _OPEN_FLAGS)
        except FileNotFoundError as exc:
            raise _of(SourceNotFoundError, self.name, exc) from exc
        except OSError as exc:
            raise _of(SourceError, self.name, exc) from exc
        except (ValueError, UnicodeError) as exc:  # a NUL byte, an unencodable name
            raise InvalidArgumentError(f"cannot open {self.name!r}: {exc}") from None
        self._adopt(fd)

    @classmethod
    def from_fd(cls, fd: int, name: str) -> LocalSource:
        """A source over a duplicate of the open descriptor ``fd`` (the caller keeps its own
        and may close it). ``name`` is what messages call the file.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryFile() as f:
            ...     _ = f.write(b"hello")
            ...     f.flush()
            ...     LocalSource.from_fd(f.fileno(), "tmp").read(1, 3)
            b'ell'
        """
        self = cls.__new__(cls)
        SourceBase.__init__(self)
        self._closed = True
        self.name = name
        try:
            own = os.dup(fd)
        except OSError as exc:
            raise SourceError(f"cannot use the file of {name}: {exc.strerror or exc}") from exc
        self._adopt(own)
        return self

    def _adopt(self, fd: int) -> None:
        """Take ownership of the open descriptor ``fd`` of a regular file."""
        try:
            st = os.fstat(fd)
            _refuse_special(self.name, st.st_mode)
            os.set_blocking(fd, True)  # regular files ignore it; clear it all the same
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise SourceError(f"cannot stat {self.name}: {exc.strerror or exc}") from exc
            raise
        self._fd = fd
        self._size = st.st_size
        self._map: mmap.mmap | None = None
        self._closed = False
        self._release = _closer(self, fd)

    @property
    def size(self) -> int:
        """File size in bytes, as it was when the source was opened."""
        return self._size

    def _read(self, offset: int, length: int) -> bytes:
        # one pread straight into a new bytes object (no second copy of a large header)
        try:
            data = os.pread(self._fd, min(length, _MAX_CALL_BYTES), offset)
        except OSError as exc:
            raise SourceError(
                f"{self.name}: read at offset {offset} failed: {exc.strerror or exc}"
            ) from exc
        if len(data) < length:  # a short read: the rest by the exact loop
            out = bytearray(length)
            out[: len(data)] = data
            self._preadv_exact([memoryview(out)[len(data) :]], offset + len(data))
            data = bytes(out)
        self.stats.add(length)
        return data

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset`` (scatter read, no copies)."""
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if total:
            run_parallel(offset, flat, self._readinto_serial)
            self.stats.add(total)

    def _readinto_serial(self, offset: int, buffers: list[memoryview]) -> None:
        _prefault(buffers)
        for batch in _split(buffers):
            self._preadv_exact(batch, offset)
            offset += sum(b.nbytes for b in batch)

    def _preadv_exact(self, bufs: list[memoryview], offset: int) -> None:
        bufs = [b for b in bufs if b.nbytes]
        while bufs:
            try:
                n = os.preadv(self._fd, bufs, offset)
            except OSError as exc:
                raise SourceError(
                    f"{self.name}: read at offset {offset} failed: {exc.strerror or exc}"
                ) from exc
            if n == 0:
                raise SourceError(
                    f"{self.name}: the file ended at offset {offset}; it was truncated "
                    "after it was opened"
                )
            offset += n
            while bufs and n >= bufs[0].nbytes:
                n -= bufs[0].nbytes
                bufs = bufs[1:]
            if n:
                bufs = [bufs[0][n:], *bufs[1:]]

    def buffer(self) -> memoryview:
        """The whole file, privately mapped (zero-copy, copy-on-write)."""
        super().buffer()  # refuses when closed
        if self._size == 0:
            return memoryview(b"")
        if self._map is None:
            try:
                self._map = mmap.mmap(self._fd, self._size, access=mmap.ACCESS_COPY)
            except (OSError, ValueError) as exc:
                raise SourceError(f"cannot map {self.name}: {exc}") from exc
        return memoryview(self._map)

    def close(self) -> None:
        """Close the file. Views already handed out keep their mapping alive."""
        if self._closed:
            return
        self._closed = True
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # arrays still use the mapping; it is released when they are
            self._map = None
        self._release()


def _of(kind: type[SourceError], name: str, exc: OSError) -> SourceError:
    """``kind`` of error for the file ``name`` that could not be opened: it names the file
    in its message and as ``path`` (not as an ``OSError``'s ``filename``, which would turn
    its text into ``[Errno None] None: 'name'``)."""
    err = kind(f"cannot open {name}: {exc.strerror or exc}")
    err.path = name
    return err
