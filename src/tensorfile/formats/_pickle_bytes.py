"""A PyTorch pickle's bytes, read once: a local file through the descriptor tensorfile
opened, any other source copied once into memory; and a zip's records, found by torch's
own zip reader.

* :func:`pinned`: the bytes are read once. A local file is read through the descriptor
  tensorfile opened (mapped, so its tensors stay in the page cache), never again by name.
  Any other source (HTTP, S3, a cache) is read once, whole, into an anonymous file in
  memory (``memfd``; an unlinked temporary file where the system has none), which the
  reader maps: a server cannot answer one read with one ``data.pkl`` and a later one with
  another.
* :func:`zip_records`: a zip's records are found by torch's own zip reader
  (``torch._C.PyTorchFileReader``, the one ``torch.load`` uses), so tensorfile reads the
  ``data.pkl`` and storages torch would, never those another parser could find (a zip64
  locator leading elsewhere, a gap read as prepended data). Every record must lie within
  the file, stored, none overlapping another and no two named alike (torch finds names in
  any case).

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.zeros(4)}, buf)
    >>> with pinned(MemorySource(buf.getvalue(), "m.pt")) as held:
    ...     pickle, records = zip_records(held)
    ...     records["data/0"][1]
    16
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.errors import FormatError, SourceError, quoted_name
from ..core.extras import require
from ..core.source import Source
from ..sources import LocalSource, MemorySource
from ._arrays import BufferedSourceFile

__all__ = ["fold", "pinned", "zip_records"]

_PIECE = 64 << 20  # bytes a copy reads at a time


@contextmanager
def pinned(source: Source) -> Iterator[LocalSource | MemorySource]:
    """``source`` itself where what it reads cannot change under it by name or by server
    (a local file, through its descriptor; bytes in memory); else a copy of its bytes read
    once, in an anonymous file, closed on exit (what torch mapped of it stays)."""
    if isinstance(source, LocalSource | MemorySource):
        yield source
        return
    fd = _anonymous()
    try:
        try:
            os.ftruncate(fd, source.size)
            if source.size:
                with mmap.mmap(fd, source.size) as whole, memoryview(whole) as view:
                    for at in range(0, source.size, _PIECE):  # (a piece in memory at most)
                        with view[at : at + _PIECE] as piece:
                            source.readinto(at, [piece])
        except OSError as exc:
            raise SourceError(
                f"{quoted_name(source.name)}: cannot keep the {source.size:,} bytes of the "
                f"pickle to scan and load them: {exc.strerror or exc}"
            ) from exc
        copy = LocalSource.from_fd(fd, source.name)
    finally:
        os.close(fd)
    with copy:
        yield copy


def _anonymous() -> int:
    """A new file no other process can open by name: in memory where the system can."""
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create("tensorfile-pickle", os.MFD_CLOEXEC)
        except OSError:
            pass
    fd, path = tempfile.mkstemp(prefix="tensorfile-pickle-")
    os.unlink(path)
    return fd


_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """``name`` as torch's zip reader (miniz) compares names: ASCII letters in any case.

    Example:
        >>> fold("Archive/DATA.pkl")
        'archive/data.pkl'
    """
    return name.translate(_FOLD)


def _refuse(where: str, what: str) -> FormatError:
    return FormatError(f"{quoted_name(where)}: {what}", format="pytorch")


def zip_records(source: Source) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The ``data.pkl`` torch would read from the zip in ``source`` (torch's own reader
    finds it) and the offset and size of every record, by folded name within the archive
    (``data/0``); a :class:`FormatError` for a zip torch cannot read, or with a record
    outside the file, compressed or encrypted, overlapping another, or named like another."""
    torch: Any = require(
        "torch", f"{quoted_name(source.name)}: reading a zipped PyTorch pickle", extra="torch"
    )
    where = source.name
    with BufferedSourceFile(source) as f:
        try:
            reader = torch._C.PyTorchFileReader(f)
            spans = sorted(
                (reader.get_record_offset(name), reader.get_record_size(name), name)
                for name in reader.get_all_records()
            )
            headers = {name: reader.get_record_header_offset(name) for _, _, name in spans}
        except (RuntimeError, ValueError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise _refuse(where, f"not a zip torch.load reads: {first}") from None
        sizes: dict[str, tuple[int, int]] = {}
        end = 0
        for start, size, name in spans:
            if fold(name) in sizes:
                raise _refuse(where, f"two records are named {name!r} (torch reads one of them)")
            if start < end or start + size > source.size:
                raise _refuse(
                    where,
                    f"record {name!r} ({size:,} bytes at offset {start:,}) overlaps another "
                    "or goes past the end of the file; torch.save writes each record once, "
                    "stored, one after another",
                )
            head = source.read(headers[name], 30) if headers[name] + 30 <= source.size else b""
            flags, method = struct.unpack("<HH", head[6:10]) if len(head) == 30 else (1, 0)
            if method != 0 or flags & 1:
                raise _refuse(
                    where,
                    f"record {name!r} is compressed or encrypted; torch.save stores every "
                    "record as it is",
                )
            sizes[fold(name)] = (start, size)
            end = start + size
        if "data.pkl" not in sizes:
            raise _refuse(where, "no data.pkl in the archive")
        try:
            pickle: bytes = reader.get_record("data.pkl")  # (at most the file's size)
        except RuntimeError as exc:
            raise _refuse(where, f"data.pkl cannot be read: {exc}") from None
    return pickle, sizes
