"""A PyTorch pickle's bytes, read once: a local file through the descriptor tensorfile
opened, any other source copied once into memory; and a zip's records, read by tensorfile
as strictly as ``torch.save`` writes them.

* :func:`pinned`: the bytes are read once. A local file is read through the descriptor
  tensorfile opened (mapped, so its tensors stay in the page cache), never again by name.
  Any other source (HTTP, S3, a cache) is read once, whole, into an anonymous file in
  memory (``memfd``; an unlinked temporary file where the system has none), which the
  reader maps: a server cannot answer one read with one ``data.pkl`` and a later one with
  another.
* :func:`zip_records`: a zip's records, by tensorfile's own reader of the zips
  ``torch.save`` writes (no torch needed, nothing inflated): exactly one end record, one
  central directory ending where it begins, every record stored in its central entry and
  its local header alike, within the file, none overlapping another and no two named
  alike in any case. A zip that another reader could read otherwise (a second central
  directory, a zip64 locator leading elsewhere, a record compressed in one header and
  stored in the other) is refused, so tensorfile and torch never read two different
  things from one file.

Example:
    >>> import io, torch
    >>> from tensorfile.sources import MemorySource
    >>> buf = io.BytesIO()
    >>> torch.save({"w": torch.zeros(4)}, buf)
    >>> pickle, records = zip_records(buf.getvalue(), "m.pt")
    >>> records["data/0"][1]
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
from ..core.source import Source
from ..sources import LocalSource, MemorySource
from . import EMPTY_ZIP_MAGIC, NPZ

__all__ = ["fold", "pinned", "zip_records"]

_PIECE = 64 << 20  # bytes a copy reads at a time


@contextmanager
def pinned(source: Source) -> Iterator[LocalSource | MemorySource]:
    """``source`` itself where what it reads cannot change under it by name or by server
    (a local file, through its descriptor; bytes in memory); else a copy of its bytes read
    once, in an anonymous file, closed on exit (what the reader mapped of it stays)."""
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
        except (OSError, OverflowError, ValueError) as exc:  # (a size past what a file holds)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise SourceError(
                f"{quoted_name(source.name)}: cannot keep the {source.size:,} bytes of the "
                f"pickle to read them: {why}"
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


_EOCD, _LOCAL = EMPTY_ZIP_MAGIC, NPZ.magic  # (a zip's end record and local header)
_LOCATOR, _EOCD64, _CENTRAL = b"PK\x06\x07", b"PK\x06\x06", b"PK\x01\x02"
_SATURATED = 0xFFFFFFFF


def _end(data: Any, where: str) -> tuple[int, int, int, int]:
    """``(entries, directory offset, directory size, where the directory must end)`` from
    the end-of-central-directory record (and its zip64 record where it has one): the last 22
    bytes of the file, with no comment (every zip reader takes the last end record it finds;
    a comment could hold another), nothing another reader could take for another central
    directory."""
    size = len(data)
    eocd = size - 22  # (torch.save writes no comment: a comment can hide another zip's end)
    if eocd < 0 or bytes(data[eocd : eocd + 4]) != _EOCD or bytes(data[size - 2 :]) != b"\0\0":
        raise _refuse(where, "not a zip torch.save writes: it does not end with its end "
                             "record (a zip comment, or no end record)")  # fmt: skip
    _disk, _cd_disk, _here, entries, cd_size, cd_at = struct.unpack_from("<HHHHII", data, eocd + 4)
    stop = eocd
    if eocd >= 20 and bytes(data[eocd - 20 : eocd - 16]) == _LOCATOR:
        record = struct.unpack_from("<Q", data, eocd - 12)[0]
        if record != eocd - 76 or bytes(data[record : record + 4]) != _EOCD64:
            raise _refuse(where, "not a zip torch.save writes: a zip64 locator leads elsewhere")
        n64, size64, at64 = struct.unpack_from("<QQQ", data, record + 32)
        for short, long in ((entries, n64), (cd_size, size64), (cd_at, at64)):
            if short not in (0xFFFF, _SATURATED, long):
                raise _refuse(where, "not a zip torch.save writes: zip64 and zip records differ")
        entries, cd_size, cd_at, stop = n64, size64, at64, record
    if cd_at + cd_size != stop:
        raise _refuse(where, "not a zip torch.save writes: its central directory does not "
                             "end where the end record begins")  # fmt: skip
    return entries, cd_at, cd_size, stop


def _zip64(extra: bytes, values: list[int]) -> list[int]:
    """``values`` (uncompressed size, compressed size, local header offset) with each
    saturated one taken, in order, from the zip64 extra field."""
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, at)
        if tag == 1:
            field = extra[at + 4 : at + 4 + length]
            out, used = [], 0
            for v in values:
                if v == _SATURATED and used + 8 <= len(field):
                    v = struct.unpack_from("<Q", field, used)[0]
                    used += 8
                out.append(v)
            return out
        at += 4 + length
    return values


def zip_records(data: Any, where: str) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The ``data.pkl`` of the zip whose bytes are ``data`` and the offset and size of every
    record, by folded name within the archive (``data/0``), read by tensorfile as strictly
    as ``torch.save`` writes: one central directory, ending where the end record begins;
    every record under one archive folder, stored (not compressed, not encrypted, its sizes
    equal) in its central entry and its local header alike, named alike in both, within the
    file before the central directory, none overlapping another (headers included) and no
    two named alike in any case (torch's reader finds names in any case). Anything else is
    a :class:`FormatError`: no other reader could find other records in such a file."""
    entries, at, cd_size, stop = _end(data, where)
    directory = at  # (every record lies before it)
    if entries > cd_size // 46:
        raise _refuse(where, f"not a zip torch.save writes: {entries:,} entries claimed")
    spans: list[tuple[int, int, int, str]] = []  # (header, data start, size, name)
    for _ in range(entries):
        head = bytes(data[at : at + 46])
        if len(head) != 46 or head[:4] != _CENTRAL:
            raise _refuse(where, f"not a zip torch.save writes: no central entry at {at:,}")
        flags, method = struct.unpack_from("<HH", head, 8)
        csize, usize, n, m, k = struct.unpack_from("<IIHHH", head, 20)
        offset = struct.unpack_from("<I", head, 42)[0]
        raw = bytes(data[at + 46 : at + 46 + n])
        extra = bytes(data[at + 46 + n : at + 46 + n + m])
        usize, csize, offset = _zip64(extra, [usize, csize, offset])
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:  # (torch refuses such a name too)
            raise _refuse(where, f"a record's name is not UTF-8: {raw[:100]!r}") from None
        at += 46 + n + m + k
        local = bytes(data[offset : offset + 30])
        if len(local) != 30 or local[:4] != _LOCAL:
            raise _refuse(where, f"record {name!r} has no local header at {offset:,}")
        lflags, lmethod = struct.unpack_from("<HH", local, 6)
        ln, lm = struct.unpack_from("<HH", local, 26)
        if method or lmethod or (flags | lflags) & 1 or csize != usize:
            raise _refuse(where, f"record {name!r} is compressed or encrypted; torch.save "
                                 "stores every record as it is")  # fmt: skip
        if b"\0" in raw:  # (torch looks records up by C strings: cut at the NUL)
            raise _refuse(where, f"record {name!r} has a NUL in its name")
        if bytes(data[offset + 30 : offset + 30 + ln]) != raw:
            raise _refuse(where, f"record {name!r} is named otherwise in its local header")
        spans.append((offset, offset + 30 + ln + lm, usize, name))
    if at != stop:
        raise _refuse(where, "not a zip torch.save writes: its central directory holds more "
                             "than its entries")  # fmt: skip
    prefix = spans[0][3].split("/", 1)[0] + "/" if spans else ""
    records: dict[str, tuple[int, int]] = {}
    end = 0
    for header, start, size, name in sorted(spans):
        if not name.startswith(prefix) or fold(name[len(prefix) :]) in records:
            raise _refuse(where, f"record {name!r} is outside the archive's folder or named "
                                 "like another")  # fmt: skip
        if header < end or start + size > directory:
            raise _refuse(
                where,
                f"record {name!r} ({size:,} bytes at offset {start:,}) overlaps another or "
                "the central directory; torch.save writes each record once, one after another",
            )
        records[fold(name[len(prefix) :])] = (start, size)
        end = start + size
    if "data.pkl" not in records:
        raise _refuse(where, "no data.pkl in the archive")
    if "constants.pkl" in records:  # (torch.load hands such a zip to torch.jit.load)
        raise _refuse(where, "a TorchScript archive (it has constants.pkl), which torch.load "
                             "reads as a program, not as weights")  # fmt: skip
    start, size = records["data.pkl"]
    return bytes(data[start : start + size]), records
