"""What the import/export entries (npy, npz, PyTorch pickles) share: a file object over a
:class:`~tensorfile.core.source.Source` (for ``zipfile``, numpy's header parser and
``torch.load``), and a source and reader over tensors some of which are decoded rather than
read in place.

An :class:`ArraysSource` serves the bytes of its ``base`` source (the file) as they are, and
after them, at offsets from ``base.size`` on, :class:`Segment` s: tensors that had to be
decoded (a deflated zip member, a big-endian or Fortran-ordered array) or that an
unpickler produced. A segment is decoded when first read, and the last one decoded is kept
(memory: about the largest tensor). An :class:`ArraysReader` decodes a segment before it
allocates the segment's destination, so that the size a file only claims for a decoded
tensor (an npz member's header) is proven by bytes really decoded before it is allocated.
:class:`~._zipcrc.CrcCheck` s make reads of stored zip members check the member's CRC-32
once the reads, in any pieces and any order, have covered the whole member
(:class:`~._zipcrc.MemberCrc`); a read of part of a member (a slice) that never covers it
whole checks nothing, a member found changed fails every later read that touches it.

Example:
    >>> import numpy as np
    >>> from tensorfile.sources import MemorySource
    >>> src = ArraysSource("x", MemorySource(b"abc"), [Segment(3, 2, lambda: b"de")])
    >>> src.read(1, 4), src.size
    (b'bcde', 5)
    >>> f = SourceFile(MemorySource(b"hello"))
    >>> _ = f.seek(1); f.read(3), f.read(99)
    (b'ell', b'o')
"""

from __future__ import annotations

import bisect
import io
import os
import threading
import zipfile
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..core import plan
from ..core.catalog import ByteRange, TensorInfo
from ..core.errors import FormatError, NpzChecksumError, SourceError, UnsupportedError
from ..core.reader import Allocator, Reader, T
from ..core.source import Source, SourceBase
from ._zipcrc import CrcCheck, MemberCrc

__all__ = [
    "ArraysReader",
    "ArraysSource",
    "BufferedSourceFile",
    "Segment",
    "SourceFile",
    "file_stem",
    "zip_names",
]

Buffer = bytes | bytearray | memoryview | np.ndarray[Any, Any]


class SourceFile(io.RawIOBase):
    """A read-only, seekable binary file over a source. A read never asks for more than the
    file holds, so a size a file only claims (a zip directory's) allocates nothing."""

    def __init__(self, source: Source) -> None:
        super().__init__()
        self._source = source
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._source.size}[whence]
        if base + offset < 0:
            raise OSError(f"{self._source.name}: seek before the start of the file")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        left = max(0, self._source.size - self._pos)
        n = left if size is None or size < 0 else min(size, left)
        data = self._source.read(self._pos, n)
        self._pos += n
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(view.nbytes, max(0, self._source.size - self._pos))
        if n:
            self._source.readinto(self._pos, [view[:n]])
            self._pos += n
        return n


class BufferedSourceFile(io.BufferedReader):
    """A buffered :class:`SourceFile` whose ``read(n)`` never asks for more than the file
    holds: ``io.BufferedReader`` allocates ``n`` bytes before it reads, so a length a file
    only claims (a pickle's string) would otherwise be an allocation of that size.

    Example:
        >>> from tensorfile.sources import MemorySource
        >>> with BufferedSourceFile(MemorySource(b"abc")) as f:
        ...     f.read(1 << 62)
        b'abc'
    """

    def __init__(self, source: Source, buffer_size: int = 1 << 20) -> None:
        super().__init__(SourceFile(source), buffer_size)
        self._size = source.size

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size >= 0:
            size = min(size, max(0, self._size - self.tell()))
        return super().read(size)


def file_stem(source_name: str) -> str:
    """The name a file's lone tensor takes: the file's stem (``tensor`` for bytes in memory).

    Example:
        >>> file_stem("/d/embed.npy"), file_stem("https://h/lone.pt?x=1"), file_stem("<memory>")
        ('embed', 'lone', 'tensor')
    """
    if source_name.startswith("<"):
        return "tensor"
    base = source_name.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return os.path.splitext(base)[0] or "tensor"


def zip_names(source: Source) -> list[str] | None:
    """The member names of the zip archive in ``source``, or None when it is not one a
    reader could open (its central directory is missing or damaged)."""
    try:
        with zipfile.ZipFile(SourceFile(source)) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return None


_ZIP_LOCAL_HEADER = 30
"""The fixed part of a zip member's local header; the member's name follows it (its
length at byte 26)."""


def first_zip_member(source: Source) -> str | None:
    """The name in the first local header of the zip archive in ``source`` (readable even
    when the archive was cut short and its central directory is gone), or None.

    Example:
        >>> import io, zipfile
        >>> from tensorfile.sources import MemorySource
        >>> buf = io.BytesIO()
        >>> with zipfile.ZipFile(buf, "w") as zf:
        ...     zf.writestr("w.npy", bytes(100))
        >>> first_zip_member(MemorySource(buf.getvalue()[:40]))
        'w.npy'
    """
    size = source.size
    if size < _ZIP_LOCAL_HEADER:
        return None
    length = int.from_bytes(source.read(26, 2), "little")
    if not length or _ZIP_LOCAL_HEADER + length > size:
        return None
    return source.read(_ZIP_LOCAL_HEADER, length).decode("utf-8", "replace")


def refuse_cut_zip(source: Source, npy_suffixes: tuple[str, ...]) -> None:
    """Raise a :class:`FormatError` when ``source``, a zip archive with no readable central
    directory, begins with a member that makes it an npz (a name ending in one of
    ``npy_suffixes``) or a PyTorch checkpoint (``*/data.pkl``): it was cut short (the
    directory ends a whole archive), and how long it was cannot be told. Anything else is
    left to detection's message."""
    member = first_zip_member(source)
    if member is not None and member.endswith(npy_suffixes):
        fmt, what = "npz", "an npz archive"
    elif member is not None and member.endswith("/data.pkl") and member.count("/") == 1:
        fmt, what = "pytorch", "a PyTorch checkpoint"
    else:
        return
    raise FormatError(
        f"{source.name} looks truncated: it is a zip archive whose first member is "
        f"{member!r}, {what}, but the central directory that ends a whole zip archive is "
        "missing (how long it was cannot be told)",
        offset=source.size,
        format=fmt,
    )


class Segment(NamedTuple):
    """``length`` bytes at offset ``start`` of an :class:`ArraysSource`, produced by
    ``fetch()`` (a buffer of exactly ``length`` bytes) when first read."""

    start: int
    length: int
    fetch: Callable[[], Buffer]


class ArraysSource(SourceBase):
    """``base``'s bytes, then decoded segments (see the module docstring)."""

    def __init__(
        self,
        name: str,
        base: Source,
        segments: Sequence[Segment] = (),
        checks: Sequence[CrcCheck] = (),
    ) -> None:
        super().__init__()
        self.name = name
        self._base = base
        self._segments = sorted((s for s in segments if s.length), key=lambda s: s.start)
        self._starts = [s.start for s in self._segments]
        self._checks = {c.start: MemberCrc(c) for c in checks if c.stop > c.start}
        self._check_starts = sorted(self._checks)  # a read finds its checks by bisection
        self._checked: set[int] = set()
        self._bad: dict[int, str] = {}  # the members found changed: their message
        self._base_size = base.size
        last = self._segments[-1] if self._segments else None
        self._size = max(self._base_size, last.start + last.length if last else 0)
        self._cache: tuple[int, memoryview] | None = None
        self._lock = threading.Lock()
        self.coalesce_gap = base.coalesce_gap

    @property
    def size(self) -> int:
        return self._size

    def segment_at(self, offset: int) -> int | None:
        """The index of the segment that starts at ``offset``, or None."""
        i = bisect.bisect_left(self._starts, offset)
        return i if i < len(self._starts) and self._starts[i] == offset else None

    def segment_bytes(self, index: int) -> memoryview:
        """The bytes of segment ``index`` (decoded now unless they are the last decoded)."""
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        with self._lock:
            if self._cache is not None and self._cache[0] == index:
                return self._cache[1]
        seg = self._segments[index]
        try:
            data = seg.fetch()
        except MemoryError:  # real data too big for this process: say so, by size
            raise UnsupportedError(
                f"{self.name}: a tensor of {seg.length:,} bytes must be decoded whole here "
                "(a compressed member or a pickle), and memory cannot hold it"
            ) from None
        view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else None
        if view is None:
            flat: Any = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            view = memoryview(flat)
        if view.nbytes != seg.length:
            raise FormatError(
                f"{self.name}: a tensor decoded to {view.nbytes:,} bytes, not {seg.length:,}"
            )
        with self._lock:
            self._cache = (index, view)
        return view

    def _read(self, offset: int, length: int) -> bytes:
        out = bytearray(length)
        self._fill(offset, [memoryview(out)])
        self.stats.add(length)
        return bytes(out)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        flat = self.byte_buffers(offset, buffers)
        total = sum(b.nbytes for b in flat)
        if total:
            self._fill(offset, flat)
            self.stats.add(total)

    def _fill(self, offset: int, flat: list[memoryview]) -> None:
        pos = offset
        for buf in flat:
            done = 0
            while done < buf.nbytes:
                n = self._fill_one(pos + done, buf[done:])
                done += n
            pos += buf.nbytes
        self._verify(offset, flat)

    def _fill_one(self, offset: int, out: memoryview) -> int:
        """Fill the start of ``out`` from ``offset`` up to the next boundary; bytes filled."""
        if offset < self._base_size:
            n = min(out.nbytes, self._base_size - offset)
            self._base.readinto(offset, [out[:n]])
            return n
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self._starts[i] + self._segments[i].length:
            seg = self._segments[i]
            data = self.segment_bytes(i)
            at = offset - seg.start
            n = min(out.nbytes, seg.length - at)
            out[:n] = data[at : at + n]
            return n
        nxt = self._starts[i + 1] if i + 1 < len(self._starts) else self._size
        n = min(out.nbytes, nxt - offset)
        out[:n] = bytes(n)  # between segments: never described by a catalog
        return n

    def _verify(self, offset: int, flat: list[memoryview]) -> None:
        """Feed the bytes a read of ``flat`` at ``offset`` put in its destinations (not the
        plan's scratch) to the CRC-32 of every stored member they fall in; check each
        member they complete."""
        stop = offset + sum(b.nbytes for b in flat)
        first = max(0, bisect.bisect_right(self._check_starts, offset) - 1)
        last = bisect.bisect_left(self._check_starts, stop)
        for start in self._check_starts[first:last]:  # the members this read can touch only
            member = self._checks[start]
            if start in self._bad and member.check.stop > offset:
                raise NpzChecksumError(self._bad[start])
            if start in self._checked or member.check.stop <= offset:
                continue
            pos = offset
            for buf in flat:
                if not plan.is_scratch(buf):
                    crc = member.add(pos, buf)
                    if crc is not None:
                        self.check_crc(member.check, crc)
                pos += buf.nbytes

    def verify_range(self, rng: ByteRange) -> None:
        """Check the CRC-32 of the stored member whose data is ``rng``, once, on the mapped
        file (for a zero-copy view, which no read goes through)."""
        member = self._checks.get(rng.start)
        if member is None or rng.start in self._checked:
            return
        check = member.check
        if rng.start in self._bad:
            raise NpzChecksumError(self._bad[rng.start])
        whole = self._base.buffer()
        if whole is None:
            data = self._base.read(check.start, check.stop - check.start)
            self.check_crc(check, zlib.crc32(data, check.prefix_crc))
        else:
            self.check_crc(check, zlib.crc32(whole[check.start : check.stop], check.prefix_crc))

    def check_crc(self, check: CrcCheck, crc: int) -> None:
        """Record ``check`` as passed, or raise (and remember) a
        :class:`~tensorfile.errors.NpzChecksumError`: the member's bytes are not what was
        stored."""
        if crc != check.expected:
            self._bad[check.start] = message = (
                f"{self.name}: {check.what}: Bad CRC-32 (the archive says {check.expected:08x}, "
                f"the bytes give {crc:08x}): the file is damaged"
            )
            raise NpzChecksumError(message)
        self._checked.add(check.start)

    def buffer(self) -> memoryview | None:
        if self._closed:
            raise SourceError(f"{self.name}: the source is closed")
        return self._base.buffer()

    def close(self) -> None:
        super().close()
        self._cache = None
        self._segments = []
        self._starts = []
        self._base.close()


class ArraysReader(Reader):
    """A reader over an :class:`ArraysSource`: :meth:`view` of a tensor read in place is a
    zero-copy view of the mapped file (its zip member's CRC checked first); of a decoded
    one, a read-only array over the decoded bytes."""

    source: ArraysSource

    def __init__(self, source: ArraysSource, catalog: Any, *, zip_crcs: bool = False) -> None:
        super().__init__(source, catalog)
        self._zip_crcs = zip_crcs

    def checks_digest(self, name: str) -> bool:
        """Whether reading ``name`` compares a digest the file stores: an npz member's zip
        CRC-32 (``zip_crcs``), which a read of the whole tensor always compares (a stored
        member's once its bytes were all read, a deflated one's as it is inflated)."""
        return self._zip_crcs and self.info(name).numel > 0

    def start_read(self, names: list[str], alloc: Allocator[T]) -> plan.Pending[T]:
        """As :meth:`Reader.start_read`, but each decoded tensor is decoded first, then
        its destination allocated and filled from the bytes just decoded (each is decoded
        once, and a size its file only claims is allocated only once that many bytes came
        out); the tensors read in place are planned as usual."""
        infos = [self.info(n) for n in names]
        for info in infos:
            self._dense(info)
        filled: dict[int, Callable[[], T]] = {}
        for k, info in enumerate(infos):
            if self._decode_first(info):
                buf, done = self._allocate(alloc, info)
                self.readinto(info.byte_range.start, [buf])  # the segment just decoded
                filled[k] = done
        rest = super().start_read([n for k, n in enumerate(names) if k not in filled], alloc)

        def finish() -> list[T]:
            read = iter(rest.finish())
            return [filled[k]() if k in filled else next(read) for k in range(len(names))]

        return plan.Pending(rest.pieces, finish)

    def read_slice(self, name: str, key: Any) -> np.ndarray[Any, Any]:
        self._decode_first(self.info(name))
        return super().read_slice(name, key)

    def _decode_first(self, info: TensorInfo) -> bool:
        """Decode ``info``'s bytes now when it is a decoded tensor (they are the ones kept
        then), before anything is allocated for it; whether it is one."""
        index = self.source.segment_at(info.byte_range.start) if info.numel else None
        if index is None:
            return False
        self.source.segment_bytes(index)  # its length checked against the claim
        return True

    def view(self, name: str) -> np.ndarray[Any, Any]:
        info = self.info(name)
        self._dense(info)
        index = self.source.segment_at(info.byte_range.start) if info.numel else None
        if index is None:
            if info.numel:
                self.source.verify_range(info.byte_range)
            return super().view(name)
        data = self.source.segment_bytes(index)
        arr = np.frombuffer(data, dtype=info.dtype.numpy, count=info.numel).reshape(info.shape)
        arr.flags.writeable = False
        return arr
