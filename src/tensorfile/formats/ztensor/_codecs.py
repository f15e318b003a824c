"""zTensor component codecs: zstd compression and the ``algorithm:value`` digests.

Decompression never trusts a size the file claims: output grows chunk by chunk with the
bytes really inflated, and goes into a buffer of the tensor's declared size only once an
eighth of it has come out (when no size is declared, up to a limit); a stream that would
produce more is stopped there, so neither a decompression bomb nor a small stream under a
huge claim costs more than eight times what the stream really holds. Digests cover the stored bytes
of a component (after compression), as the v1.0 reference computes them; crc32c is written
as ``crc32c:0x`` + 8 upper-case hex digits.

Example:
    >>> packed = compress(b"a" * 1000, level=3)
    >>> bytes(decompress_limited(packed, 4096, what="x")) == b"a" * 1000
    True
    >>> make_digest("crc32c", b"abc")
    'crc32c:0x364B3FB7'
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from tensorfile.core.errors import ZTensorChecksumError, ZTensorError, ZTensorUnsupportedError

__all__ = [
    "CHECKSUMS",
    "ENCODINGS",
    "MAX_LEVEL",
    "MAX_ZSTD_RATIO",
    "MIN_LEVEL",
    "Digester",
    "StreamCompressor",
    "check_digest",
    "check_frames",
    "compress",
    "decompress_limited",
    "decompress_to",
    "make_digest",
    "verify_digest",
]

ENCODINGS = ("raw", "zstd")
CHECKSUMS = ("crc32c", "sha256")

MIN_LEVEL = -(1 << 17)
"""zstd's fastest level (``ZSTD_minCLevel``)."""
MAX_LEVEL = 22
"""zstd's strongest level (``ZSTD_maxCLevel``)."""

MAX_ZSTD_RATIO = 1 << 15
"""The most a zstd stream can expand: a 4-byte RLE block yields at most one 128 KiB block.
A component whose declared size exceeds this times its stored length cannot be genuine."""

_THREADED_MIN = 16 << 20  # compress components this large on all cores
_CHUNK = 1 << 20


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError as exc:  # pragma: no cover - zstandard is a core dependency
        raise ZTensorUnsupportedError(
            "zstd components need the 'zstandard' package: pip install zstandard"
        ) from exc
    return zstandard


def compress(data: Any, *, level: int = 3, threads: int | None = None) -> bytes:
    """zstd-compress ``data`` (any buffer) into one frame that records its content size;
    large inputs are compressed on all cores (``threads``: zstd worker threads, 0 for the
    calling thread only; by default chosen by size)."""
    zstd = _zstd()
    view = memoryview(data).cast("B")
    if threads is None:
        threads = -1 if view.nbytes >= _THREADED_MIN else 0
    try:
        cctx = zstd.ZstdCompressor(level=level, threads=threads, write_content_size=True)
        out: bytes = cctx.compress(view)
    except zstd.ZstdError as exc:
        raise ZTensorError(f"zstd compression failed: {exc}") from exc
    return out


_ZSTD_MAGIC = 0xFD2FB528


def check_frames(stored: Any, *, what: str) -> None:
    """Walk the zstd frames of ``stored`` (headers and block headers only) and raise
    ZTensorError unless they are complete and end exactly at the end of the component.

    The decompressor reports a corrupt block, but a stream cut at a block boundary simply
    ends: this catches truncation before any data is trusted.
    """
    view = memoryview(stored).cast("B")
    n = view.nbytes
    pos = 0
    while pos < n:
        if pos + 4 > n:
            raise ZTensorError(f"{what}: the zstd stream ends inside a frame header")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > n:
                raise ZTensorError(f"{what}: the zstd stream ends inside a skippable frame")
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            if pos > n:
                raise ZTensorError(f"{what}: the zstd stream ends inside a skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise ZTensorError(f"{what}: not a zstd stream (bad frame magic at byte {pos})")
        if pos + 5 > n:
            raise ZTensorError(f"{what}: the zstd stream ends inside a frame header")
        fhd = view[pos + 4]
        single = (fhd >> 5) & 1
        fcs = (0, 2, 4, 8)[fhd >> 6] if (fhd >> 6) or not single else 1
        did = (0, 1, 2, 4)[fhd & 3]
        checksum = (fhd >> 2) & 1
        pos += 5 + (0 if single else 1) + did + fcs
        while True:
            if pos + 3 > n:
                raise ZTensorError(f"{what}: the zstd stream is truncated (ends inside a block)")
            header = int.from_bytes(view[pos : pos + 3], "little")
            last, kind, size = header & 1, (header >> 1) & 3, header >> 3
            if kind == 3:
                raise ZTensorError(f"{what}: the zstd stream has a reserved block type")
            pos += 3 + (1 if kind == 1 else size)
            if pos > n:
                raise ZTensorError(f"{what}: the zstd stream is truncated (ends inside a block)")
            if last:
                break
        pos += 4 * checksum
        if pos > n:
            raise ZTensorError(f"{what}: the zstd stream is truncated (its checksum is missing)")


# decompress_to asks for a tensor's buffer once 1/HELD_SHARE of its declared size came out
HELD_SHARE = 8


def decompress_to(stored: Any, size: int, allocate: Callable[[], memoryview], *, what: str) -> None:
    """Decompress ``stored``, which the manifest says holds ``size`` bytes, into the buffer
    ``allocate()`` returns (``size`` bytes), calling it only once an eighth of ``size``
    (:data:`HELD_SHARE`) has really come out of the stream: until then the output is kept
    in memory that grows with the bytes inflated, so a claimed size never decides an
    allocation (at most eight times the bytes the stream really holds), and an honest
    tensor pays a copy of an eighth of its bytes (half cost zt_load_zstd a quarter).

    Raises ZTensorError when the stream is corrupt, ends early, or holds more than
    ``size``: decoding stops at that size.

    Example:
        >>> out = bytearray(1000)
        >>> decompress_to(compress(b"a" * 1000), 1000, lambda: memoryview(out), what="x")
        >>> bytes(out) == b"a" * 1000
        True
    """
    zstd = _zstd()
    check_frames(stored, what=what)
    held: list[bytes] = []
    target: memoryview | None = None
    got = 0
    try:
        reader = zstd.ZstdDecompressor().stream_reader(
            memoryview(stored), read_size=_CHUNK, read_across_frames=True, closefd=False
        )
        with reader:
            while got < size:
                if target is None and HELD_SHARE * got >= size:
                    target = _filled(allocate(), held)
                if target is not None:
                    n = reader.readinto(target[got:])
                else:
                    chunk = reader.read(min(_CHUNK, size - got))
                    held.append(chunk)
                    n = len(chunk)
                if n == 0:
                    break
                got += n
            extra = reader.read(1) if got == size else b""
    except zstd.ZstdError as exc:
        raise ZTensorError(f"{what}: the zstd stream is corrupt: {exc}") from exc
    if got < size:
        raise ZTensorError(
            f"{what}: the zstd stream decompresses to {got:,} bytes, the manifest declares {size:,}"
        )
    if extra:
        raise ZTensorError(
            f"{what}: the zstd stream decompresses to more than the {size:,} bytes the "
            "manifest declares; decoding stopped there"
        )
    if target is None:  # (nothing declared)
        _filled(allocate(), held)


def _filled(out: memoryview, held: list[bytes]) -> memoryview:
    """``out`` as bytes, with ``held`` copied to its start (and dropped)."""
    target = out.cast("B") if out.format != "B" or out.ndim != 1 else out
    pos = 0
    for chunk in held:
        target[pos : pos + len(chunk)] = chunk
        pos += len(chunk)
    held.clear()
    return target


def decompress_limited(stored: Any, limit: int, *, what: str) -> bytearray:
    """Decompress ``stored`` whose size is not declared, refusing to produce over ``limit``
    bytes; memory grows with the actual output, never with a claimed size."""
    zstd = _zstd()
    check_frames(stored, what=what)
    chunks: list[bytes] = []
    total = 0
    try:
        reader = zstd.ZstdDecompressor().stream_reader(
            memoryview(stored), read_size=_CHUNK, read_across_frames=True, closefd=False
        )
        with reader:
            while True:
                chunk = reader.read(min(_CHUNK, limit - total + 1))
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise ZTensorError(
                        f"{what}: the zstd stream decompresses to more than {limit:,} bytes, "
                        "the most this component can hold; decoding stopped there"
                    )
                chunks.append(chunk)
    except zstd.ZstdError as exc:
        raise ZTensorError(f"{what}: the zstd stream is corrupt: {exc}") from exc
    return bytearray().join(chunks)


def _crc32c(data: Any) -> int:
    try:
        import crc32c
    except ImportError as exc:  # pragma: no cover - crc32c is a core dependency
        raise ZTensorUnsupportedError(
            "crc32c digests need the 'crc32c' package: pip install crc32c"
        ) from exc
    value: int = crc32c.crc32c(data)
    return value


def make_digest(algorithm: str, data: Any) -> str:
    """The ``algorithm:value`` digest of ``data`` (``crc32c`` or ``sha256``)."""
    if algorithm == "crc32c":
        return f"crc32c:0x{_crc32c(memoryview(data).cast('B')):08X}"
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(memoryview(data).cast("B")).hexdigest()
    raise ZTensorUnsupportedError(
        f"unknown checksum {algorithm!r}; zTensor defines {', '.join(CHECKSUMS)}"
    )


def check_digest(digest: str, *, what: str) -> tuple[str, str]:
    """Split and validate a manifest digest string: ``(algorithm, normalised value)``."""
    algorithm, sep, value = digest.partition(":")
    if not sep:
        raise ZTensorError(f"{what}: digest {digest!r} is not of the form 'algorithm:value'")
    if algorithm == "crc32c":
        hexpart = value[2:] if value[:2] in ("0x", "0X") else value
        if not 1 <= len(hexpart) <= 8 or not _is_hex(hexpart):
            raise ZTensorError(f"{what}: crc32c digest {digest!r} is not 32-bit hex")
        return algorithm, f"{int(hexpart, 16):08X}"
    if algorithm == "sha256":
        if len(value) != 64 or not _is_hex(value):
            raise ZTensorError(f"{what}: sha256 digest {digest!r} is not 64 hex digits")
        return algorithm, value.lower()
    raise ZTensorUnsupportedError(
        f"{what}: unknown digest algorithm {algorithm!r} (zTensor defines crc32c and sha256)"
    )


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


def verify_digest(digest: str, data: Any, *, what: str, tensor: str | None = None) -> None:
    """Raise ZTensorChecksumError (naming ``tensor``, when given) unless ``data`` has the
    digest the manifest records."""
    algorithm, expected = check_digest(digest, what=what)
    if algorithm == "crc32c":
        actual = f"{_crc32c(memoryview(data).cast('B')):08X}"
        shown_expected, shown_actual = f"0x{expected}", f"0x{actual}"
    else:
        actual = hashlib.sha256(memoryview(data).cast("B")).hexdigest()
        shown_expected, shown_actual = expected, actual
    if actual != expected:
        raise ZTensorChecksumError(
            f"{what}: {algorithm} mismatch: the manifest records {shown_expected}, the stored "
            f"bytes give {shown_actual}; the file is corrupt",
            tensor=tensor,
        )


class Digester:
    """An incremental ``algorithm:value`` digest (``crc32c`` or ``sha256``).

    Example:
        >>> d = Digester("crc32c"); d.update(b"ab"); d.update(b"c"); d.value()
        'crc32c:0x364B3FB7'
    """

    def __init__(self, algorithm: str) -> None:
        if algorithm not in CHECKSUMS:
            raise ZTensorUnsupportedError(
                f"unknown checksum {algorithm!r}; zTensor defines {', '.join(CHECKSUMS)}"
            )
        self.algorithm = algorithm
        self._crc = 0
        self._sha = hashlib.sha256() if algorithm == "sha256" else None

    def update(self, data: Any) -> None:
        """Add ``data`` (any byte buffer)."""
        view = memoryview(data).cast("B")
        if self._sha is not None:
            self._sha.update(view)
        else:
            import crc32c

            self._crc = crc32c.crc32c(view, self._crc)

    def value(self) -> str:
        """The digest of everything added, in the manifest's form."""
        if self._sha is not None:
            return "sha256:" + self._sha.hexdigest()
        return f"crc32c:0x{self._crc:08X}"


class StreamCompressor:
    """zstd-compress a component chunk by chunk into one frame of known content size."""

    def __init__(self, total: int, *, level: int) -> None:
        zstd = _zstd()
        threads = -1 if total >= _THREADED_MIN else 0
        try:
            cctx = zstd.ZstdCompressor(level=level, threads=threads, write_content_size=True)
        except zstd.ZstdError as exc:
            raise ZTensorError(f"zstd level {level} is not usable: {exc}") from exc
        self._obj = cctx.compressobj(size=total)

    def compress(self, data: Any) -> bytes:
        """Compressed bytes for ``data`` (possibly empty until enough input arrives)."""
        out: bytes = self._obj.compress(memoryview(data).cast("B"))
        return out

    def flush(self) -> bytes:
        """The end of the frame."""
        out: bytes = self._obj.flush()
        return out
