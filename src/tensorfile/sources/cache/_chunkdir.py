"""The chunk layout of the cache folder: where a remote file's chunks live, what a chunk
file holds, and the keys (:mod:`._chunkcache` reads and writes the chunks; the folder's
budget, lock and eviction are :mod:`.folder`'s, shared with whole-file entries).

Layout, under the cache folder (``cache_dir=`` or ``$TENSORFILE_CACHE_DIR``)::

    chunks-v1/<key>/info.json       the file's redacted URL, version, size, chunk size
    chunks-v1/<key>/<index>.chunk   chunk <index>: a 32-byte header, then its bytes
    chunks-v1/<key>/.<index>.chunk.tensorfile-<hex>.tmp   a chunk being written

``key`` is a SHA-256 of the URL (its credentials, fragment and the signing parameters of a
presigned URL removed; the other query parameters kept: they can name another file), the
file's version (ETag), its size and the chunk size: a changed file has another key, so its
old chunks are never served, a re-signed URL finds the chunks of the last signing, and
nothing secret is stored in a name. A chunk file's header says what it holds
(:data:`HEADER`: a magic, the key, the chunk's offset and length, and a CRC-32 of its bytes
when the writer was asked to verify); a reader checks the header and the file's length
before using it. Chunks are written to a temporary file (made and sized while the folder's
room is reserved) that is renamed into place, so a killed writer leaves at most a
temporary file, which a later scan removes (its writer's ``flock`` is gone).

Example:
    >>> key = cache_key("https://me:pw@host/m.safetensors#x", '"abc"', 1000, 1 << 20)
    >>> key == cache_key("https://host/m.safetensors", '"abc"', 1000, 1 << 20), len(key)
    (True, 40)
    >>> key == cache_key("https://host/m.safetensors", '"abd"', 1000, 1 << 20)
    False
    >>> signed = "https://b.s3.amazonaws.com/m?versionId=3&X-Amz-Signature=ab&X-Amz-Date=1"
    >>> key == cache_key(signed, '"abc"', 1000, 1 << 20)
    False
    >>> cache_key(signed, '"a"', 1, 1) == cache_key(signed.replace("=ab", "=cd"), '"a"', 1, 1)
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
import zlib
from dataclasses import dataclass

from .files import heal, write_small
from .folder import CHUNKS
from .keys import identity

__all__ = [
    "HAS_CRC",
    "HEADER",
    "LAYOUT",
    "MAGIC",
    "CacheWarning",
    "ChunkHeader",
    "cache_key",
    "chunk_name",
    "info_bytes",
    "parts_crc",
    "pread_all",
    "write_info",
]

LAYOUT = CHUNKS
"""The folder under the cache folder that holds this layout (another layout, another
folder: nothing is ever misread)."""
MAGIC = b"TFCHUNK1"
HEADER = struct.Struct("<8s7sBQII")
"""A chunk file's header: magic, the first 7 bytes of the key, flags (:data:`HAS_CRC`), the
chunk's offset in the file, its length and the CRC-32 of its bytes."""
HAS_CRC = 1
"""The header's CRC-32 was computed (by a writer with ``verify`` on); else it is 0."""


class CacheWarning(UserWarning):
    """The chunk cache could not be used as asked (a folder that cannot be written, a file
    with no version); the load goes on over the network."""


def cache_key(url: str, version: str, size: int, chunk: int, extra: str = "") -> str:
    """The folder name of one file's chunks: 40 hex digits of a SHA-256 over the URL (see
    :func:`identity`), the version, the size, the chunk size and ``extra`` (what else
    names the file: an fsspec endpoint)."""
    text = "\0".join(("tensorfile-chunks-v1", identity(url), version, str(size), str(chunk), extra))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def chunk_name(index: int) -> str:
    """The file name of chunk ``index``.

    Example:
        >>> chunk_name(7)
        '7.chunk'
    """
    return f"{index}.chunk"


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    """What a chunk file says it holds."""

    key: bytes
    start: int
    length: int
    crc: int | None
    """None: not computed."""

    def pack(self) -> bytes:
        """The header's bytes.

        Example:
            >>> h = ChunkHeader(b"k" * 7, 16, 4, None)
            >>> ChunkHeader.unpack(h.pack()) == h, len(h.pack())
            (True, 32)
        """
        flags = 0 if self.crc is None else HAS_CRC
        return HEADER.pack(MAGIC, self.key, flags, self.start, self.length, self.crc or 0)

    @staticmethod
    def unpack(data: bytes) -> ChunkHeader | None:
        """The header in ``data``; None when it is not one."""
        if len(data) != HEADER.size:
            return None
        magic, key, flags, start, length, crc = HEADER.unpack(data)
        if magic != MAGIC:
            return None
        return ChunkHeader(key, start, length, crc if flags & HAS_CRC else None)


def parts_crc(parts: list[memoryview]) -> int:
    """The CRC-32 of ``parts`` one after the other (a chunk's bytes, as the header holds it).

    Example:
        >>> parts_crc([memoryview(b"ab"), memoryview(b"c")]) == zlib.crc32(b"abc")
        True
    """
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return crc


def pread_all(fd: int, views: list[memoryview], pos: int) -> bool:
    """Fill ``views`` from ``fd`` at ``pos`` (a chunk file's bytes); False when the file
    ends first."""
    views = [v for v in views if v.nbytes]
    while views:
        n = os.preadv(fd, views[:1024], pos)
        if n <= 0:
            return False
        pos += n
        while views and n >= views[0].nbytes:
            n -= views[0].nbytes
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return True


def info_bytes(info: dict[str, object]) -> bytes:
    """What ``info.json`` holds (what the folder caches, for people)."""
    return json.dumps(info, indent=1).encode()


def write_info(folder: str, data: bytes, *, dir_fd: int) -> None:
    """Write ``info.json`` (:func:`info_bytes`) into ``folder`` (open as ``dir_fd``: its
    path is only for messages) unless it is there (anything but a regular file there is
    removed first)."""
    path = os.path.join(folder, "info.json")
    heal(path, dir_fd=dir_fd)
    try:
        os.stat("info.json", dir_fd=dir_fd, follow_symlinks=False)
        return
    except FileNotFoundError:
        pass
    write_small(path, data, dir_fd=dir_fd)


def warn(message: str) -> None:
    """Warn once per call site and message (the load goes on over the network)."""
    warnings.warn(message, CacheWarning, stacklevel=4)
