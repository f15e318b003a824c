"""A source over a local file: positional reads for copies, a private mapping for views.

Large reads run on several threads. A file that is mostly in the page cache is copied out
of it with ``preadv``; a cold one, on a filesystem of a local block device, is read with
``O_DIRECT`` through reused aligned bounce buffers (:mod:`._direct`), which skips filling
page-cache pages the copy never reads again (the second descriptor, opened with
``O_DIRECT`` through ``/proc/self/fd``, exists only then). :meth:`LocalSource.prefetch`
reads a range of the mapping in ahead, on several threads (``MADV_POPULATE_READ``), so lazy
tensors over it cost no disk read when first touched. :meth:`LocalSource.mount` says which
filesystem the file is on (:mod:`._mounts`) and :meth:`LocalSource.resident_fraction` how
much of it is cached (:mod:`._pagecache`); :meth:`LocalSource.decide` asks the local read
policy (:mod:`.policy`) once, and the reads take its choice instead of asking again.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ...core.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from ...core.parallel import cpu_threads, in_threads, partition
from ...core.source import SourceBase
from . import advice
from .policy import DIRECT_MIN_BYTES, Choice, decide

if TYPE_CHECKING:  # loaded on first use: a plain open or small read needs neither
    from ._direct import DirectFile
    from ._mounts import Mount

__all__ = ["LocalSource"]

IO_CHUNK = 8 << 20
"""Bytes per piece of a large read or prefetch (measured: see docs/benchmarks.md)."""
DISK_THREADS = 8
"""Threads reading a cold file (``O_DIRECT`` pieces, prefetched ranges): the disk's queue,
not the CPUs, bounds them."""

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

    io_chunk: int = IO_CHUNK
    """Bytes per piece of a large read (the read planner's ``io_chunk``)."""

    def __init__(self, path: str | os.PathLike[str], *, direct: bool | None = None) -> None:
        """Open ``path``. ``direct``: read cold ranges with ``O_DIRECT`` (None: decided
        per read from the filesystem and the page cache; True: always, where the filesystem
        takes it; False: never)."""
        super().__init__()
        self._direct_choice = direct
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
        self._direct_choice = None
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
        self._mount: Mount | bool | None = False  # False: not looked up yet
        self._direct: DirectFile | bool | None = False  # False: not opened yet
        self._choice: Choice | None = None  # the read policy's, once decided
        self._populate = advice.populating()
        self._lock = threading.Lock()
        self._threads = cpu_threads()
        self._closed = False
        self._release = _closer(self, fd)

    @property
    def size(self) -> int:
        """File size in bytes, as it was when the source was opened."""
        return self._size

    def fileno(self) -> int:
        """The open descriptor the source reads (the file it opened, whatever its name now
        leads to; ``/proc/self/fd/<fileno>`` opens that file again). Closing the source
        closes it.

        Example:
            >>> import tempfile
            >>> with tempfile.NamedTemporaryFile() as f, LocalSource(f.name) as src:
            ...     os.fstat(src.fileno()).st_ino == os.stat(f.name).st_ino
            True
        """
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        return self._fd

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

    @property
    def io_threads(self) -> int:
        """Threads worth running on this file's pieces at once: more for a cold file read
        with ``O_DIRECT`` (the disk's queue bounds it), one per CPU for a cached one (the
        copy bounds it). Set by :meth:`will_read` for the reads it announces."""
        return self._threads

    def mount(self) -> Mount | None:
        """The mount the file is on (looked up once), None where the mount table cannot
        say. Its ``kind`` sorts it: ``local``, ``network``, ``fuse``, ``memory`` ...

        Example:
            >>> import tempfile
            >>> with tempfile.NamedTemporaryFile() as f, LocalSource(f.name) as src:
            ...     m = src.mount()
            ...     m is None or m.kind in ("local", "memory", "network", "fuse", "unknown")
            True
        """
        from ._mounts import Mount, mount_of

        if self._mount is False:
            if self._closed:
                raise SourceError(f"{self.name}: the source is closed")
            # the descriptor's own path: right for a file opened by descriptor, or renamed
            where = f"/proc/self/fd/{self._fd}" if os.path.isdir("/proc/self/fd") else self.name
            try:
                dev = os.fstat(self._fd).st_dev
            except OSError:
                dev = None
            self._mount = mount_of(where, dev=dev)
        return self._mount if isinstance(self._mount, Mount) else None

    def decide(
        self, backend: str = "auto", *, owned: bool = True, shown: str | None = None
    ) -> Choice:
        """Decide how this file is read (:func:`.policy.decide`: the backend, reading ahead,
        ``O_DIRECT``) and keep the choice for the reads that follow. ``load_file`` asks once,
        right after the open; a source nobody asked decides at its first large read, with
        the defaults (``"auto"``, ``owned``: copies).

        Example:
            >>> import tempfile
            >>> with tempfile.NamedTemporaryFile() as f, LocalSource(f.name) as src:
            ...     src.decide("pread") is src.choice
            True
        """
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        self._choice = decide(self, backend, owned=owned, shown=shown)
        return self._choice

    @property
    def choice(self) -> Choice | None:
        """The read policy's choice for this file, None until :meth:`decide` made it."""
        return self._choice

    def resident_fraction(self, start: int = 0, stop: int | None = None) -> float | None:
        """The fraction of the pages of ``[start, stop)`` (the whole file by default) in
        the page cache now, None where the kernel cannot say.

        Example:
            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
            >>> _ = open(path, "wb").write(b"x" * 10_000)
            >>> with LocalSource(path) as src:
            ...     src.resident_fraction()  # just written: cached
            1.0
        """
        from ._pagecache import resident_fraction

        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        return resident_fraction(self._fd, start, self._size if stop is None else stop)

    def prefetch(self, start: int = 0, stop: int | None = None) -> bool:
        """Read ``[start, stop)`` (the whole file by default) into the page cache and into
        this source's mapping (:meth:`buffer`), in pieces of :attr:`io_chunk` bytes on
        :data:`DISK_THREADS` threads (``MADV_POPULATE_READ``, Linux 5.14+): lazy tensors over
        the mapping then cost no disk read when first touched, and the pages stay the file's
        (nothing is copied; the kernel may drop them again under memory pressure). Returns
        False where the kernel cannot (nothing done, or read-ahead only requested): the
        pages then come on first touch, as they would have.

        Example:
            >>> import tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
            >>> _ = open(path, "wb").write(b"x" * 100_000)
            >>> with LocalSource(path) as src:
            ...     _ = src.prefetch()
            ...     src.resident_fraction()
            1.0
        """
        stop = self._size if stop is None else min(stop, self._size)
        view = self.buffer()
        if stop <= start or not view.nbytes:
            return True
        madvise = advice.libc_madvise() if self._populate else None
        if madvise is None:
            return self._read_ahead(start, stop)
        import ctypes

        try:
            anchor = ctypes.c_char.from_buffer(view)
            base = ctypes.addressof(anchor)
            del anchor  # (the mapping stays: ``view`` holds it)
            return self._populate_range(madvise, base, start, stop)
        finally:
            view.release()

    def _populate_range(
        self, madvise: Callable[[int, int, int], int], base: int, start: int, stop: int
    ) -> bool:
        page = mmap.PAGESIZE
        first = start // page * page
        failed = threading.Event()

        def populate(at: int) -> None:
            if failed.is_set():
                return
            length = min(self.io_chunk, stop - at)
            if madvise(base + at, length, advice.MADV_POPULATE_READ) != 0:
                failed.set()  # EINVAL: an old kernel; EFAULT: the file shrank

        in_threads(DISK_THREADS, range(first, stop, self.io_chunk), populate)
        if failed.is_set():
            self._populate = False
            return self._read_ahead(start, stop)
        return True

    def _read_ahead(self, start: int, stop: int) -> bool:
        """Ask the kernel to read ``[start, stop)`` ahead, in the background."""
        from ._pagecache import advise

        advise(self._fd, start, stop, getattr(os, "POSIX_FADV_WILLNEED", 3))
        return False

    def will_read(self, ranges: list[tuple[int, int]]) -> None:
        """Reads of ``ranges`` (``(start, stop)`` byte ranges, in order) come next: choose
        how many threads they are worth (:attr:`io_threads`)."""
        total = sum(max(0, b - a) for a, b in ranges)
        if total and ranges and self._wants_direct(total):
            self._threads = DISK_THREADS
        else:
            self._threads = cpu_threads()

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset``: a scatter read with no
        copy through the page cache's pages when they are cached, ``O_DIRECT`` through a
        bounce buffer when they are cold; a read larger than :attr:`io_chunk` runs in pieces
        on :attr:`io_threads` threads. Safe to call from several threads at once."""
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if not total:
            return
        direct = self._direct_file() if self._wants_direct(total) else None
        if total > self.io_chunk + self.io_chunk // 2:
            self._threads = DISK_THREADS if direct is not None else cpu_threads()
            self._run_pieces(offset, flat, direct)
        else:
            self._read_piece(offset, flat, direct)
        self.stats.add(total)

    def _wants_direct(self, total: int) -> bool:
        """Whether a read of ``total`` bytes is made with ``O_DIRECT``: when asked to (the
        constructor's ``direct``), or when it is large and the read policy chose direct
        reads for this file (:meth:`decide`, made here, once, if nobody made it)."""
        asked = self._direct_choice
        if asked is not None:
            return asked and self._direct_file() is not None
        if total < DIRECT_MIN_BYTES or self._direct is None:
            return False
        choice = self._choice if self._choice is not None else self.decide()
        return choice.direct and self._direct_file() is not None

    def _direct_file(self) -> DirectFile | None:
        """The ``O_DIRECT`` twin of the descriptor, opened once (None: refused)."""
        from ._direct import DirectFile, open_direct

        with self._lock:  # pieces on several threads: opened once
            if self._direct is False:
                self._direct = direct = open_direct(self._fd, self.name, self.io_chunk)
                if direct is not None:
                    weakref.finalize(self, direct.close).atexit = False
        return self._direct if isinstance(self._direct, DirectFile) else None

    def _run_pieces(
        self, offset: int, buffers: list[memoryview], direct: DirectFile | None
    ) -> None:
        """Read consecutive ``buffers`` in pieces of about :attr:`io_chunk` bytes, taken in
        turn by :attr:`io_threads` threads (a thread the host deschedules holds up one piece,
        not a share of the load); the first failure is raised once every thread is done."""
        total = sum(b.nbytes for b in buffers)
        runs = partition(buffers, -(-total // self.io_chunk))
        pieces = []
        for run in runs:
            pieces.append((offset, run))
            offset += sum(b.nbytes for b in run)
        in_threads(self._threads, pieces, lambda piece: self._read_piece(*piece, direct))

    def _read_piece(
        self, offset: int, buffers: list[memoryview], direct: DirectFile | None
    ) -> None:
        advice.prefault(buffers)
        if direct is not None:
            direct.readinto(offset, buffers)
            return
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
        if self._direct not in (None, False):
            self._direct.close()  # type: ignore[union-attr]
        self._direct = None
        self._release()


def _of(kind: type[SourceError], name: str, exc: OSError) -> SourceError:
    """``kind`` of error for the file ``name`` that could not be opened: it names the file
    in its message and as ``path`` (not as an ``OSError``'s ``filename``, which would turn
    its text into ``[Errno None] None: 'name'``)."""
    err = kind(f"cannot open {name}: {exc.strerror or exc}")
    err.path = name
    return err
