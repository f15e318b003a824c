"""The chunk cache's folder: the settings, where a remote file's chunks live, what a chunk
file holds, and how the folder stays under its size limit (:mod:`._chunkcache` reads and
writes the chunks).

Layout, under the cache folder (``cache_dir=`` or ``$TENSORFILE_CACHE_DIR``)::

    chunks-v1/.lock                 flock'ed by whoever sweeps (evicts)
    chunks-v1/.swept                touched by each sweep
    chunks-v1/<key>/info.json       the file's redacted URL, version, size, chunk size
    chunks-v1/<key>/<index>.chunk   chunk <index>: a 32-byte header, then its bytes
    chunks-v1/<key>/.<index>.chunk.tensorfile-<hex>.tmp   a chunk being written

``key`` is a SHA-256 of the URL (its credentials and fragment removed; the query string
kept: it can name another file), the file's version (ETag), its size and the chunk size:
a changed file has another key, so its old chunks are never served, and nothing secret is
stored in a name. A chunk file's header says what it holds (:data:`HEADER`: a magic, the
key, the chunk's offset and length, and a CRC-32 of its bytes when the writer was asked to
verify); a reader checks the header and the file's length before using it. Chunks are
written to a temporary file that is renamed into place
(:class:`~tensorfile.core.atomic.AtomicFile`), so a killed writer leaves at most a
temporary file, which a later sweep removes (its writer's ``flock`` is gone).

:func:`sweep` keeps the folder under its limit: under an exclusive ``flock`` of ``.lock``
(one sweeper at a time, across processes) it removes dead writers' temporary files and the
least recently used chunks (by modification time: readers touch the chunks they use) until
the chunks fit.

Example:
    >>> key = cache_key("https://me:pw@host/m.safetensors#x", '"abc"', 1000, 1 << 20)
    >>> key == cache_key("https://host/m.safetensors", '"abc"', 1000, 1 << 20), len(key)
    (True, 40)
    >>> key == cache_key("https://host/m.safetensors", '"abd"', 1000, 1 << 20)
    False
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import struct
import time
import warnings
from dataclasses import dataclass

from ...core.atomic import atomic_write, remove_stale_temps, write_all
from ...core.errors import InvalidArgumentError
from ...core.sizes import parse_size
from ..http._urls import _split, _userinfo

__all__ = [
    "CACHE_CHUNK_ENV",
    "CACHE_DIR_ENV",
    "CACHE_SIZE_ENV",
    "CACHE_VERIFY_ENV",
    "DEFAULT_CHUNK",
    "DEFAULT_LIMIT",
    "HAS_CRC",
    "HEADER",
    "LAYOUT",
    "MAGIC",
    "CacheSettings",
    "CacheWarning",
    "ChunkHeader",
    "SweepResult",
    "cache_key",
    "chunk_name",
    "default_cache_dir",
    "resolve_cache_dir",
    "settings",
    "sweep",
]

CACHE_DIR_ENV = "TENSORFILE_CACHE_DIR"
"""The cache folder for every remote load that does not pass ``cache_dir=``."""
CACHE_SIZE_ENV = "TENSORFILE_CACHE_SIZE"
"""The cache's size limit (``"20GiB"``, ``"500MB"``, a number of bytes)."""
CACHE_CHUNK_ENV = "TENSORFILE_CACHE_CHUNK"
"""The chunk size of newly cached files (a file cached with another size is a miss)."""
CACHE_VERIFY_ENV = "TENSORFILE_CACHE_VERIFY"
"""``1``: write each chunk with a CRC-32 and check it when the chunk is read (a chunk
without one is fetched again); costs ~0.5 s per GiB of one core each way."""

DEFAULT_LIMIT = 20 << 30
"""The size limit when ``$TENSORFILE_CACHE_SIZE`` is unset: 20 GiB."""
DEFAULT_CHUNK = 16 << 20
"""The chunk size when ``$TENSORFILE_CACHE_CHUNK`` is unset: 16 MiB."""
MAX_CHUNK = 1 << 30
RESERVE = 1 << 30
"""Free space a chunk write leaves on the cache's file system (else it is not written)."""
STALE_SWEEP = 3600.0
"""A cache not swept for this many seconds is swept when a file is opened through it."""

LAYOUT = "chunks-v1"
"""The folder under the cache folder that holds this layout (another layout, another
folder: nothing is ever misread)."""
MAGIC = b"TFCHUNK1"
HEADER = struct.Struct("<8s7sBQII")
"""A chunk file's header: magic, the first 7 bytes of the key, flags (:data:`HAS_CRC`), the
chunk's offset in the file, its length and the CRC-32 of its bytes."""
HAS_CRC = 1
"""The header's CRC-32 was computed (by a writer with ``verify`` on); else it is 0."""

_KEY = re.compile(r"[0-9a-f]{40}")
_CHUNK = re.compile(r"(0|[1-9][0-9]{0,11})\.chunk")
_TEMP = re.compile(r"\.((?:0|[1-9][0-9]{0,11})\.chunk)\.tensorfile-[0-9a-f]{12}\.tmp")


class CacheWarning(UserWarning):
    """The chunk cache could not be used as asked (a folder that cannot be written, a file
    with no version); the load goes on over the network."""


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """How a cache folder is used: the size limit, the chunk size of new entries and
    whether reads check each chunk's CRC-32."""

    limit: int = DEFAULT_LIMIT
    chunk: int = DEFAULT_CHUNK
    verify: bool = False


def settings(
    limit: int | str | None = None, chunk: int | str | None = None, verify: bool | None = None
) -> CacheSettings:
    """The settings from the arguments, else the environment, else the defaults.

    Example:
        >>> settings(limit="1GiB", chunk="4MiB", verify=False)
        CacheSettings(limit=1073741824, chunk=4194304, verify=False)
    """
    if verify is None:
        verify = os.environ.get(CACHE_VERIFY_ENV, "").strip().lower() in ("1", "true", "yes")
    size = _size(chunk, CACHE_CHUNK_ENV, DEFAULT_CHUNK)
    if size > MAX_CHUNK:
        raise InvalidArgumentError(f"cache chunk size {size:,}: at most 1 GiB")
    return CacheSettings(
        limit=_size(limit, CACHE_SIZE_ENV, DEFAULT_LIMIT), chunk=size, verify=bool(verify)
    )


def _size(value: int | str | None, env: str, default: int) -> int:
    """``value``, else ``$env``, else ``default``, as a byte count; a bad variable is an
    error that names it."""
    if value is not None:
        return parse_size(value)
    text = os.environ.get(env)
    if not text:
        return default
    try:
        return parse_size(text)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"${env}: {exc}") from None


def default_cache_dir() -> str:
    """``$TENSORFILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensorfile`` (``~/.cache/tensorfile``)."""
    found = os.environ.get(CACHE_DIR_ENV)
    if found:
        return found
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorfile")


def resolve_cache_dir(cache_dir: str | bytes | os.PathLike[str] | bool | None) -> str | None:
    """The cache folder a load uses: ``cache_dir`` when given (``False`` or ``""``: none;
    ``True``: :func:`default_cache_dir`), else ``$TENSORFILE_CACHE_DIR`` (unset or empty:
    none).

    Example:
        >>> resolve_cache_dir("/tmp/c"), resolve_cache_dir(False), resolve_cache_dir("")
        ('/tmp/c', None, None)
    """
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_DIR_ENV) or False
    if cache_dir is True:
        return default_cache_dir()
    if cache_dir is False or cache_dir == "":
        return None
    if not isinstance(cache_dir, str | bytes | os.PathLike):
        raise InvalidArgumentError(
            "cache_dir must be a folder (a str, bytes or os.PathLike), a bool or None, got "
            f"{cache_dir!r}"
        )
    text = os.fsdecode(cache_dir)
    if not isinstance(text, str) or "\0" in text:
        raise InvalidArgumentError(f"cache_dir is not a usable folder name: {text!r}")
    return text or None


def _identity(url: str) -> str:
    """``url`` without ``user:password@`` and fragment (the query string can name another
    file: it stays)."""
    parts = _split(url)
    if parts is None:
        return url
    scheme, authority, path, after = parts
    whole = authority + path
    user = _userinfo(authority, path)
    if user is not None:
        whole = whole[len(user) + 1 :]
    return f"{scheme.lower()}://{whole}{after.partition('#')[0]}"


def cache_key(url: str, version: str, size: int, chunk: int, extra: str = "") -> str:
    """The folder name of one file's chunks: 40 hex digits of a SHA-256 over the URL (see
    :func:`_identity`), the version, the size, the chunk size and ``extra`` (what else
    names the file: an fsspec endpoint)."""
    text = "\0".join(
        ("tensorfile-chunks-v1", _identity(url), version, str(size), str(chunk), extra)
    )
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


def write_info(folder: str, info: dict[str, object]) -> None:
    """Write ``info.json`` (what the folder caches, for people) unless it is there."""
    path = os.path.join(folder, "info.json")
    if os.path.exists(path):
        return
    with atomic_write(path) as fd:
        write_all(fd, memoryview(json.dumps(info, indent=1).encode()))


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep found and did."""

    chunks: int
    bytes: int
    evicted: int
    evicted_bytes: int
    temps_removed: int


def _scan(root: str) -> tuple[list[tuple[float, int, str]], int, list[str]]:
    """Every chunk file (mtime, size, path), the dead writers' temporary files removed, and
    the object folders that hold no chunk."""
    chunks: list[tuple[float, int, str]] = []
    removed = 0
    empty: list[str] = []
    try:
        with os.scandir(root) as tops:
            folders = [
                e.path for e in tops if _KEY.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return chunks, removed, empty
    for folder in folders:
        found = 0
        bases: set[str] = set()
        try:
            with os.scandir(folder) as entries:
                for e in entries:
                    temp = _TEMP.fullmatch(e.name)
                    if temp is not None:
                        bases.add(temp.group(1))
                        found += 1
                    elif _CHUNK.fullmatch(e.name):
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            chunks.append((st.st_mtime, st.st_size, e.path))
                            found += 1
        except OSError:
            continue
        for base in sorted(bases):
            gone = len(remove_stale_temps(os.path.join(folder, base)))
            removed += gone
            found -= gone
        if found == 0:
            empty.append(folder)
    return chunks, removed, empty


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def sweep(root: str, limit: int) -> SweepResult:
    """Under the folder's lock, remove dead writers' temporary files and the least recently
    used chunks until the chunks fit in ``limit`` bytes, then the folders left empty.

    A reader that has a chunk open keeps reading it after it is removed; one that opens it
    later finds it missing and reads those bytes over the network. Nothing here raises on
    a file it cannot stat or remove (another process may have removed it first).
    """
    lock = os.open(os.path.join(root, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        chunks, removed, empty = _scan(root)
        total = sum(size for _, size, _ in chunks)
        evicted = evicted_bytes = 0
        if total > limit:
            chunks.sort()
            for _, size, path in chunks:
                if total - evicted_bytes <= limit:
                    break
                if _unlink(path):
                    evicted += 1
                    evicted_bytes += size
        for folder in empty:
            _unlink(os.path.join(folder, "info.json"))
            try:
                os.rmdir(folder)  # fails when a writer put a file there meanwhile: kept
            except OSError:
                pass
        _touch(os.path.join(root, ".swept"))
        return SweepResult(len(chunks), total, evicted, evicted_bytes, removed)
    finally:
        os.close(lock)  # (releases the lock)


def _touch(path: str) -> None:
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError:
        pass


def sweep_due(root: str) -> bool:
    """Whether the folder was last swept over :data:`STALE_SWEEP` seconds ago."""
    try:
        return time.time() - os.stat(os.path.join(root, ".swept")).st_mtime > STALE_SWEEP
    except OSError:
        return True


def free_space(root: str) -> int:
    """Bytes an unprivileged writer may still use on ``root``'s file system (huge when it
    cannot be told)."""
    try:
        st = os.statvfs(root)
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize


def warn(message: str) -> None:
    """Warn once per call site and message (the load goes on over the network)."""
    warnings.warn(message, CacheWarning, stacklevel=4)
