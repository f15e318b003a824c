"""A local, chunk-granular cache in front of a remote file (:class:`CachedSource`).

The file is cut into chunks on a fixed grid (16 MiB by default). A read takes the chunks
it touches from the cache folder when they are there (``pread`` straight into the
destination) and fetches the missing ones from the remote source, several neighbours in one
request, straight into the destination where the read covers them, then publishes each as
a file renamed into place. A partial hit fetches only what is missing; a full hit costs one
small request (the one that tells the file's version and size).

The keys and the chunk files' header are :mod:`._chunkdir`'s; the folder's one budget (the
limit, shared with whole-file entries, the lock and the eviction) is :mod:`.folder`'s: the
chunks of a request are made and sized as temporary files once their room is reserved, so
the folder never holds more than its limit. What is guaranteed:

* A chunk is served only when its header names this file (key, offset, length) and the
  file has exactly the header's length; with ``verify`` (``$TENSORFILE_CACHE_VERIFY=1``)
  chunks are written with a CRC-32 and read only when it matches. A chunk that fails is
  deleted and fetched again; anything but a regular file at a chunk's name (a FIFO, a
  folder, a symlink) is removed (never followed, never waited on) and fetched again.
* A file without a version (a server that sends no ``ETag``) is not cached: a stale hit
  would return wrong bytes. A weak ETag (``W/...``) says "equivalent", not "the same
  bytes", so it is not used either.
* A folder that cannot be written (read-only, full, a permission missing), or whose lock
  another process holds past :data:`~.guards.LOCK_WAIT`, costs a
  :class:`~._chunkdir.CacheWarning` and the load goes on over the network; a request whose
  chunks find no room (whole files in use fill the folder) is read over the network.
* A cache folder (or its ``chunks-v1``) another user could write in is not used at all:
  nothing is read from it nor written (:mod:`.guards`; a warning says what to do); a
  file's chunk folder or a chunk file of another user's is removed, never read.
* Several threads of one process that need the same missing chunk fetch it once; several
  processes may each fetch it (each renames its own copy into place: same bytes).

Example:
    >>> import fsspec, tempfile
    >>> fsspec.filesystem("memory").pipe("/doc/c.bin", bytes(range(200)) * 100)
    >>> from tensorfile.sources import open_path
    >>> folder = tempfile.mkdtemp()
    >>> with open_path("memory://doc/c.bin", cache_dir=folder) as src:
    ...     src.read(10, 3), src.cache_stats.misses
    (b'\\n\\x0b\\x0c', 1)
    >>> with open_path("memory://doc/c.bin", cache_dir=folder) as src:
    ...     src.read(19_990, 3), src.cache_stats.hits, src.cache_stats.misses
    (b'\\xbe\\xbf\\xc0', 1, 0)
"""

from __future__ import annotations

import bisect
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from ...core.atomic import AtomicFile, write_all
from ...core.errors import SourceError
from ...core.parallel import in_threads
from ...core.source import Source, SourceBase
from ..local.advice import prefault
from ._chunkdir import (
    HEADER,
    LAYOUT,
    ChunkHeader,
    cache_key,
    chunk_name,
    info_bytes,
    parts_crc,
    pread_all,
    warn,
    write_info,
)
from .files import close_fd, end_temp, lock_fd, new_temp, open_entry, open_folders
from .folder import RESERVE, CacheFolder, free_space
from .guards import CacheBypass, UntrustedFolder, check_root
from .settings import CacheSettings

__all__ = ["CacheStats", "CachedSource", "with_cache"]

_MAX_RUN = 64 << 20
"""Missing neighbours fetched in one request: at most this many bytes (a transport may
hold a whole reply in memory) and at most :data:`_MAX_CHUNKS` chunks (each is published
once its request is done)."""
_MAX_CHUNKS = 4
_MAX_TRIES = 3
"""Looks for one chunk in the folder before it is fetched without the cache: whatever is
done to the folder meanwhile, a read ends."""


@dataclass(slots=True)
class CacheStats:
    """What a :class:`CachedSource` took from the cache and from the network."""

    hits: int = 0
    """Chunks read from the cache (a chunk read twice counts twice)."""
    misses: int = 0
    """Chunks fetched from the remote source."""
    bytes_from_cache: int = 0
    bytes_fetched: int = 0
    chunks_written: int = 0
    rejected: int = 0
    """Chunk files refused (wrong header, length or checksum) and deleted."""


class _Dest:
    """Consecutive destination buffers that start at ``offset`` of the file."""

    def __init__(self, offset: int, buffers: list[memoryview]) -> None:
        self.starts: list[int] = []
        self.buffers = buffers
        pos = offset
        for b in buffers:
            self.starts.append(pos)
            pos += b.nbytes

    def views(self, start: int, stop: int) -> list[memoryview]:
        """The pieces of the buffers that hold bytes ``[start, stop)`` of the file."""
        out = []
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        while start < stop and i < len(self.buffers):
            b, s = self.buffers[i], self.starts[i]
            lo, hi = start - s, min(stop - s, b.nbytes)
            if hi > lo:
                out.append(b[lo:hi])
                start = s + hi
            i += 1
        return out


class CachedSource(SourceBase):
    """``inner`` (a remote source with a ``version``) read through the chunk cache in
    ``folder`` (see the module docstring). Safe to read from several threads at once.

    Args:
        inner: the remote source; closed with this one.
        url: the file's URL as the caller gave it (only a hash of it, without credentials,
            is stored).
        folder: the cache folder (``chunks-v1/`` is created in it).
        config: the size limit (the folder's, shared with whole-file entries), chunk size
            and whether to check CRCs.
        extra: what else names the file (an fsspec endpoint), part of the key.
    """

    def __init__(
        self, inner: Source, *, url: str, folder: str, config: CacheSettings, extra: str = ""
    ) -> None:
        super().__init__()
        version = getattr(inner, "version", None)
        if not isinstance(version, str) or not version:
            raise SourceError(f"{inner.name}: a file without a version cannot be cached")
        self.inner = inner
        self.name = inner.name
        self.version = version
        self.coalesce_gap = inner.coalesce_gap
        self.config = config
        self.io_chunk = config.chunk
        self.io_threads = max(int(getattr(inner, "io_threads", 1)), 4)
        self.cache_stats = CacheStats()
        self._size = inner.size
        key = cache_key(url, version, self._size, config.chunk, extra)
        self._key = key
        self._key7 = bytes.fromhex(key[:14])
        self.cache = CacheFolder(folder, config.limit)
        self.root = os.path.join(folder, LAYOUT)
        self.folder = os.path.join(self.root, key)
        self._info = info_bytes({"url": inner.name, "version": version, "size": self._size,
                                 "chunk": config.chunk})  # fmt: skip
        self._lock = threading.Lock()
        self._inflight: dict[int, threading.Event] = {}
        self._touched: set[int] = set()
        self.bypass = False
        """Whether the folder is not used at all (another user could write in it)."""
        self._held: int | None = None
        """This file's chunk folder as reads open it (:meth:`_read_folder`), or None."""
        self.writable = self._prepare()
        if self.writable and self.cache.sweep_due():
            self._sweep()

    # -- the folder -----------------------------------------------------------------------

    def _prepare(self) -> bool:
        """Create the layout's folder and the folder's lock; False (with a warning) when
        they cannot be written."""
        try:
            os.makedirs(self.cache.folder, 0o700, exist_ok=True)
            check_root(self.cache.folder)  # (another user's folder: not used at all)
            # (a planted link, FIFO or file as the layout folder: removed, not followed)
            os.close(open_folders(self.cache.folder, LAYOUT))
            self._close_folder(self._open_folder())  # (this file's folder: the same)
            close_fd(lock_fd(os.path.join(self.cache.folder, ".lock"), wait=False))
            return True
        except (OSError, SourceError) as exc:
            self._cannot_write(exc)
            return False

    def _cannot_write(self, exc: BaseException) -> None:
        self.writable = False
        if isinstance(exc, CacheBypass):  # (a lock held by another process, another user's)
            self.bypass = self.bypass or isinstance(exc, UntrustedFolder)
            warn(str(exc))  # (the folder's, not the file's: said once, not for every file)
            return
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and isinstance(exc.filename, str) and exc.filename:
            why = f"{why}: {exc.filename}"  # (the exact entry: the cache folder itself, a file)
        warn(f"{self.name}: the cache folder {self.root} cannot be written ({why}); "
             "reading over the network")  # fmt: skip

    def _sweep(self) -> None:
        try:
            self.cache.sweep()
        except OSError as exc:
            self._cannot_write(exc)

    def _open_folder(self) -> int | None:
        """A descriptor of this file's chunk folder, each folder from the cache folder down
        opened without following a symlink (anything but a real folder there is removed):
        what is done relative to it stays in the cache folder, whatever another process
        swaps its names for meanwhile. None when there is none."""
        return open_folders(self.cache.folder, LAYOUT, self._key, create=False)

    @staticmethod
    def _close_folder(fd: int | None) -> None:
        if fd is not None:
            os.close(fd)

    def _read_folder(self) -> int | None:
        """A descriptor of this file's chunk folder for one read (the caller closes it): a
        copy of one :meth:`_open_folder` opened and checked once for this source, not a
        walk from the cache folder for every chunk (a dozen calls each, a quarter of a
        cached load's time); opened again once that folder is gone (:meth:`_gone`)."""
        with self._lock:
            if self._held is None:
                self._held = self._open_folder()
            return None if self._held is None else os.dup(self._held)

    def _gone(self, folder: int) -> None:
        """Forget the held chunk folder when ``folder`` (a copy of it) was removed (a sweep
        or a heal took it) or moved away (its path names another folder, or none), so the
        next read opens the folder there now (where :meth:`_there` looks)."""
        st = os.fstat(folder)
        try:
            now = os.stat(self.folder, follow_symlinks=False)
            if st.st_nlink and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return
        except OSError:
            pass
        with self._lock:
            held, self._held = self._held, None
        self._close_folder(held)

    def _path(self, index: int) -> str:
        return os.path.join(self.folder, chunk_name(index))

    def _span(self, index: int) -> tuple[int, int]:
        start = index * self.config.chunk
        return start, min(start + self.config.chunk, self._size)

    # -- reading ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """The remote file's size."""
        return self._size

    def _read(self, offset: int, length: int) -> bytes:
        out = bytearray(length)
        self._fill(offset, [memoryview(out)])
        return bytes(out)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` from consecutive bytes at ``offset``: cached chunks from the
        folder, missing ones from the network (and then into the folder)."""
        flat = self.byte_buffers(offset, buffers)
        if sum(b.nbytes for b in flat):
            self._fill(offset, flat)

    def _fill(self, offset: int, flat: list[memoryview]) -> None:
        """Fill ``flat`` from ``offset``: a read of many chunks in pieces of
        :data:`_MAX_CHUNKS` chunks on :attr:`io_threads` threads (a read planner that
        hands out pieces of :attr:`io_chunk` bytes never gets here with more than two)."""
        total = sum(b.nbytes for b in flat)
        if self.bypass:  # (a folder another user could write in: not read)
            self.inner.readinto(offset, flat)
            with self._lock:
                self.stats.add(total)
            return
        dest = _Dest(offset, flat)
        stop = offset + total
        per = self.config.chunk * _MAX_CHUNKS
        pieces = []
        a = offset
        while a < stop:
            b = min(stop, (a // per + 1) * per)
            pieces.append((a, b))
            a = b
        threads = min(self.io_threads, len(pieces))
        if threads > 1:
            _in_threads(threads, pieces, lambda a, b: self._fill_range(a, b, dest))
        else:
            self._fill_range(offset, stop, dest)
        with self._lock:
            self.stats.add(total)

    def _fill_range(self, start: int, stop: int, dest: _Dest) -> None:
        prefault(dest.views(start, stop))  # (fresh pages: faster in one go, as local files)
        k, last = start // self.config.chunk, (stop - 1) // self.config.chunk
        tries = 0  # (looks for chunk k)
        while k <= last:
            found = self._hit(k, start, stop, dest)
            if found is True:
                k, tries = k + 1, 0
                continue
            tries += 1
            if tries > _MAX_TRIES:  # (the folder changes under us: never a spin)
                self._fetch([k], start, stop, dest, keep=False)
                k, tries = k + 1, 0
                continue
            run, busy = self._claim(k, last, recheck=found is None)
            if busy is not None:
                busy.wait()  # another thread fetches it: then it is a hit (or ours to fetch)
                continue
            if not run:
                continue  # it appeared meanwhile: read it
            try:
                self._fetch(run, start, stop, dest)
            finally:
                self._release(run)
            k, tries = run[-1] + 1, 0

    def _hit(self, index: int, start: int, stop: int, dest: _Dest) -> bool | None:
        """Read the part of chunk ``index`` in ``[start, stop)`` from its file: True; None
        when there is no such file; False when it cannot be read or is not right (then it
        is deleted, where it can be)."""
        try:  # (never blocks, never follows a link; anything else there is removed)
            folder = self._read_folder()
            if folder is None:
                return None
            try:
                found = open_entry(self._path(index), dir_fd=folder)
                if found is None:
                    self._gone(folder)
            finally:
                os.close(folder)
        except OSError:
            return False
        if found is None:
            return None
        fd = found
        try:
            ok = self._read_chunk(fd, index, start, stop, dest)
            if not ok:
                self._reject(index, fd)
            return ok
        except OSError:
            return False
        finally:
            os.close(fd)

    def _read_chunk(self, fd: int, index: int, start: int, stop: int, dest: _Dest) -> bool:
        cs, ce = self._span(index)
        n = ce - cs
        if os.fstat(fd).st_size != HEADER.size + n:
            return False
        head = ChunkHeader.unpack(os.pread(fd, HEADER.size, 0))
        if head is None or (head.key, head.start, head.length) != (self._key7, cs, n):
            return False
        ws, we = max(cs, start), min(ce, stop)
        if not self.config.verify:
            if not pread_all(fd, dest.views(ws, we), HEADER.size + ws - cs):
                return False
        elif ws == cs and we == ce:
            views = dest.views(ws, we)
            if head.crc is None:
                return False  # written without a CRC: fetched again (with one)
            if not pread_all(fd, views, HEADER.size) or parts_crc(views) != head.crc:
                return False
        else:
            if head.crc is None:
                return False
            whole = memoryview(bytearray(n))
            if not pread_all(fd, [whole], HEADER.size) or zlib.crc32(whole) != head.crc:
                return False
            pos = ws - cs
            for v in dest.views(ws, we):
                v[:] = whole[pos : pos + v.nbytes]
                pos += v.nbytes
        with self._lock:
            self.cache_stats.hits += 1
            self.cache_stats.bytes_from_cache += we - ws
            touch = index not in self._touched
            self._touched.add(index)
        if touch:  # least recently used goes first: this one was used now
            try:
                os.utime(fd)
            except OSError:
                pass
        return True

    def _reject(self, index: int, fd: int) -> None:
        """Delete chunk ``index``'s file (the one open as ``fd``, not a newer one)."""
        with self._lock:
            self.cache_stats.rejected += 1
        name = chunk_name(index)
        try:
            folder = self._open_folder()
            if folder is None:
                return
            try:
                st, now = os.fstat(fd), os.stat(name, dir_fd=folder, follow_symlinks=False)
                if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                    os.unlink(name, dir_fd=folder)
            finally:
                os.close(folder)
        except OSError:
            pass

    def _claim(
        self, index: int, last: int, recheck: bool
    ) -> tuple[list[int], threading.Event | None]:
        """Mark chunk ``index`` and its missing neighbours up to ``last`` as being fetched
        by this thread: ``(run, None)``; ``([], event)`` when another thread fetches
        ``index``; ``([], None)`` when (``recheck``: it was missing) its file appeared
        meanwhile. A chunk whose file was there but unusable is fetched without a look."""
        per = self.config.chunk
        with self._lock:
            busy = self._inflight.get(index)
            if busy is not None:
                return [], busy
            if recheck and self._there(index):
                return [], None
            run = [index]
            while (
                run[-1] < last
                and len(run) < _MAX_CHUNKS
                and (len(run) + 1) * per <= _MAX_RUN
                and run[-1] + 1 not in self._inflight
                and not self._there(run[-1] + 1)
            ):
                run.append(run[-1] + 1)
            for k in run:
                self._inflight[k] = threading.Event()
        return run, None

    def _there(self, index: int) -> bool:
        """Whether chunk ``index`` has a file where :meth:`_hit` looks (the held folder, else
        the path; under :attr:`_lock`): looks through the path alone spun (review 35 j01)."""
        held = self._held
        name = self._path(index) if held is None else chunk_name(index)
        try:
            os.stat(name, dir_fd=held, follow_symlinks=False)
        except OSError:
            return False
        return True

    def _release(self, run: list[int]) -> None:
        with self._lock:
            for k in run:
                self._inflight.pop(k).set()

    def _fetch(self, run: list[int], start: int, stop: int, dest: _Dest, keep: bool = True) -> None:
        """Fetch chunks ``run`` (neighbours) in one request: the wanted part straight into
        ``dest``, the rest of the first and last chunk into scratch buffers (only the wanted
        part when the cache is not written, or not ``keep``); then reserve room and publish
        each chunk."""
        rs, re_ = self._span(run[0])[0], self._span(run[-1])[1]
        ws, we = max(rs, start), min(re_, stop)
        views = dest.views(ws, we)
        if not self.writable or not keep:
            self.inner.readinto(ws, views)
            with self._lock:
                self.cache_stats.misses += len(run)
                self.cache_stats.bytes_fetched += we - ws
            return
        if ws > rs:
            views.insert(0, memoryview(bytearray(ws - rs)))
        if re_ > we:
            views.append(memoryview(bytearray(re_ - we)))
        self.inner.readinto(rs, views)
        with self._lock:
            self.cache_stats.misses += len(run)
            self.cache_stats.bytes_fetched += re_ - rs
        # room is reserved (and the temporary files made and sized) once the bytes are here:
        # reserving first queued every reading thread for the folder's lock before its
        # request went out, a third of a cold load's time with 16 threads
        temps = self._reserve(run)
        if temps is None:
            return
        got = _Dest(rs, views)
        try:
            for k, tmp in zip(run, temps, strict=True):
                cs, ce = self._span(k)
                if not self._publish(k, tmp, got.views(cs, ce)):
                    break
        finally:
            for tmp in temps:  # (those not renamed into place: removed)
                end_temp(tmp, commit=False)

    # -- writing ----------------------------------------------------------------------------

    def _reserve(self, run: list[int]) -> list[AtomicFile] | None:
        """The temporary files of chunks ``run``, made and sized once the folder has room
        for them (and this file's ``info.json``); None when it has none, or (with a warning,
        and the cache is not written again by this source) when it cannot be written."""
        sizes = [HEADER.size + self._span(k)[1] - self._span(k)[0] for k in run]
        info = os.path.join(self.folder, "info.json")
        need = sum(sizes) + len(self._info)

        def room() -> int:  # (under the lock, after the scan: info.json is there or not)
            return sum(sizes) + (0 if os.path.lexists(info) else len(self._info))

        def start() -> list[AtomicFile]:
            if free_space(self.root) < need + RESERVE:
                raise OSError(28, "less than 1 GiB would be left free")
            # under the lock, after the scan: this file's folder, each folder on the way
            # opened without following a symlink; every file is made and renamed relative
            # to it, never through its path (which another process may swap meanwhile)
            folder = open_folders(self.cache.folder, LAYOUT, self._key)
            temps: list[AtomicFile] = []
            try:
                write_info(self.folder, self._info, dir_fd=folder)
                for k, size in zip(run, sizes, strict=True):
                    temps.append(new_temp(self._path(k), size, dir_fd=folder))
            except BaseException:
                for t in temps:
                    end_temp(t, commit=False)
                raise
            finally:
                os.close(folder)
            return temps

        try:
            return self.cache.reserve(room, start)
        except (OSError, SourceError) as exc:
            self._cannot_write(exc)
            return None

    def _publish(self, index: int, tmp: AtomicFile, parts: list[memoryview]) -> bool:
        """Write chunk ``index`` into its temporary file and rename it into place; a failure
        costs a warning and the cache is not written again by this source (False)."""
        cs, ce = self._span(index)
        crc = parts_crc(parts) if self.config.verify else None  # (~0.5 s per GiB: only if asked)
        head = ChunkHeader(self._key7, cs, ce - cs, crc).pack()
        try:
            write_all(tmp.fd, memoryview(head))
            for p in parts:
                write_all(tmp.fd, p)
            end_temp(tmp, commit=True)
        except (OSError, SourceError) as exc:
            end_temp(tmp, commit=False)
            self._cannot_write(exc)
            return False
        with self._lock:
            self.cache_stats.chunks_written += 1
        return True

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the remote source."""
        if self._closed:
            return
        super().close()
        self.inner.close()
        with self._lock:
            held, self._held = self._held, None
        self._close_folder(held)

    def __repr__(self) -> str:
        return f"<CachedSource {self.name} in {self.folder}>"


def _in_threads(
    threads: int, pieces: list[tuple[int, int]], job: Callable[[int, int], None]
) -> None:
    """Run ``job(*piece)`` for every piece on ``threads`` threads (in order; the first
    failure stops the others and is raised)."""
    in_threads(threads, pieces, lambda piece: job(*piece))


def with_cache(
    inner: Source, *, url: str, folder: str, config: CacheSettings, extra: str = ""
) -> Source:
    """``inner`` behind the chunk cache in ``folder``; ``inner`` itself (with a
    :class:`~._chunkdir.CacheWarning`) when its file has no strong version to key on."""
    version = getattr(inner, "version", None)
    if not isinstance(version, str) or not version or version.startswith("W/"):
        why = "a weak ETag" if isinstance(version, str) and version else "no ETag or version"
        warn(f"{inner.name}: not cached: the server gives {why} (a cached copy could not be "
             "told from a changed file)")  # fmt: skip
        return inner
    return CachedSource(inner, url=url, folder=folder, config=config, extra=extra)
