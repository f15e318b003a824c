"""The frozen frame of zTensor v2 (spec §2) and the small vocabulary every part of it uses:
magic, footer, alignment, name rules, storage types, logical types and digests.

The footer is the file's last 40 bytes: ``manifest_offset``, ``manifest_length`` and the
XXH3-64 ``manifest_hash`` (u64 LE each), the ``version`` (u32, 2), four reserved bytes and
the magic again. Digests are ``xxh3:<16 hex>`` or ``sha256:<64 hex>``, lowercase, over a
part's **decoded** bytes (zTensor v1.0's cover the stored bytes).

Example:
    >>> footer = encode_footer(65536, 10, 0xABC)
    >>> len(footer), parse_footer(footer, "f")
    (40, Footer(offset=65536, length=10, hash=2748))
    >>> digest_of("xxh3", b"abc")
    'xxh3:78af5f94892f3950'
"""

from __future__ import annotations

import hashlib
import re
import struct
from typing import Any, NamedTuple

import xxhash

from tensorfile.core.errors import ZTensorChecksumError, ZTensorError, ZTensorUnsupportedError
from tensorfile.core.reader import brief
from tensorfile.formats import ZTENSOR_V2_MAGIC

__all__ = [
    "ALIGN_CANONICAL",
    "ALIGN_FLOOR",
    "DIGESTS",
    "FOOTER_SIZE",
    "MAGIC",
    "MAX_MANIFEST_SIZE",
    "MAX_NAME_BYTES",
    "MAX_RANK",
    "MIN_FILE_SIZE",
    "STORAGE_WIDTH",
    "VERSION",
    "Footer",
    "Hasher",
    "check_digest_text",
    "check_name",
    "check_shard_name",
    "digest_of",
    "encode_footer",
    "manifest_hash",
    "parse_footer",
    "verify_digest",
]

MAGIC = ZTENSOR_V2_MAGIC
VERSION = 2
FOOTER_SIZE = 40
MIN_FILE_SIZE = len(MAGIC) + FOOTER_SIZE
ALIGN_FLOOR = 4096
ALIGN_CANONICAL = 65536
MAX_MANIFEST_SIZE = 1 << 30
MAX_NAME_BYTES = 1024
MAX_SHARD_NAME_BYTES = 64
MAX_RANK = 64
MAX_U64 = (1 << 64) - 1
DIGESTS = ("xxh3", "sha256")

STORAGE_WIDTH: dict[str, int] = {
    "f64": 8,
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "i64": 8,
    "i32": 4,
    "i16": 2,
    "i8": 1,
    "u64": 8,
    "u32": 4,
    "u16": 2,
    "u8": 1,
}
"""The 12 storage types (§4.1) and their widths in bytes."""

LOGICAL_TYPES: dict[str, tuple[str, int, int]] = {
    # type: (required storage dtype, bytes per element numerator, denominator)
    "bool": ("u8", 1, 1),
    "f8_e4m3fn": ("u8", 1, 1),
    "f8_e5m2": ("u8", 1, 1),
    "f8_e4m3fnuz": ("u8", 1, 1),
    "f8_e5m2fnuz": ("u8", 1, 1),
    "f8_e8m0": ("u8", 1, 1),
    "f4_e2m1": ("u8", 1, 2),
    "complex64": ("f32", 8, 1),
    "complex128": ("f64", 16, 1),
}
"""The registered logical types (Appendix A): storage type and size function."""


def decoded_size(dtype: str, logical: str | None, count: int) -> int | None:
    """Decoded bytes of ``count`` elements of ``dtype``/``logical``; None for a logical type
    tensorfile does not know (its size is then unknown).

    Example:
        >>> decoded_size("u8", "f4_e2m1", 5), decoded_size("f32", None, 3)
        (3, 12)
    """
    if logical is None:
        return count * STORAGE_WIDTH[dtype]
    entry = LOGICAL_TYPES.get(logical)
    if entry is None:
        return None
    _, num, den = entry
    return (count * num + den - 1) // den


class Footer(NamedTuple):
    """What the footer points at (all zero for a data shard)."""

    offset: int
    length: int
    hash: int


def encode_footer(offset: int, length: int, hash_: int) -> bytes:
    """The 40-byte footer."""
    return struct.pack("<QQQII", offset, length, hash_, VERSION, 0) + MAGIC


def parse_footer(raw: bytes, name: str) -> Footer:
    """Check the footer's magic and version, and return what it points at."""
    if raw[32:40] != MAGIC:
        raise ZTensorError(
            f"{name}: the footer does not end with the zTensor v2 magic (got {raw[32:40]!r})",
            offset=None,
        )
    offset, length, hash_, version, _reserved = struct.unpack("<QQQII", raw[:32])
    if version != VERSION:
        raise ZTensorUnsupportedError(
            f"{name}: zTensor container version {version} is not supported (tensorfile reads "
            f"version {VERSION})"
        )
    return Footer(offset, length, hash_)


def manifest_hash(data: Any) -> int:
    """The XXH3-64 of the manifest bytes."""
    value: int = xxhash.xxh3_64_intdigest(data)
    return value


def check_name(name: Any, where: object, what: str = "a name") -> str:
    """``name`` when it is a valid object, part or attribute name (§3.5): non-empty text of
    at most 1024 UTF-8 bytes without U+0000 (``where``: the place, for a message)."""
    if type(name) is str and 0 < len(name) <= 256 and "\0" not in name:
        return name  # (256 characters are at most 1024 UTF-8 bytes)
    if not isinstance(name, str):
        raise ZTensorError(f"{where}: {what} must be text, got {brief(name)}")
    if not name or "\0" in name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problem = "is empty" if not name else "holds U+0000" if "\0" in name else "is too long"
        raise ZTensorError(
            f"{where}: {what} {brief(name)} {problem}; names are 1 to 1024 UTF-8 bytes without "
            "U+0000"
        )
    return name


_SHARD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def check_shard_name(name: Any, what: object) -> str:
    """``name`` when it is a valid shard name (§7.1): 1 to 64 of ``A-Z a-z 0-9 . _ -``, not
    starting with ``.`` (so it is always a single, harmless path component)."""
    if not isinstance(name, str):
        raise ZTensorError(f"{what}: a shard name must be text, got {brief(name)}")
    if (
        not name
        or len(name) > MAX_SHARD_NAME_BYTES
        or name.startswith(".")
        or not set(name) <= _SHARD_CHARS
    ):
        raise ZTensorError(
            f"{what}: shard name {brief(name)} is not 1 to 64 of A-Z a-z 0-9 . _ - (not "
            "starting with '.')"
        )
    return name


def check_digest_text(digest: Any, what: object) -> str:
    """``digest`` when it has the form ``algorithm:lowercase-hex`` (§3.4). An algorithm
    tensorfile cannot compute is still well formed: it is refused only when verified."""
    if not isinstance(digest, str):
        raise ZTensorError(f"{what}: a digest must be text, got {brief(digest)}")
    if _DIGEST.fullmatch(digest) is None:
        raise ZTensorError(f"{what}: digest {brief(digest)} is not 'algorithm:lowercase-hex'")
    return digest


_DIGEST = re.compile(r"[a-z0-9]+:[0-9a-f]+")


class Hasher:
    """An incremental ``xxh3:`` or ``sha256:`` digest.

    Example:
        >>> h = Hasher("sha256"); h.update(b"a"); h.update(b"bc"); h.value()[:15]
        'sha256:ba7816bf'
    """

    def __init__(self, algorithm: str) -> None:
        if algorithm not in DIGESTS:
            raise ZTensorUnsupportedError(
                f"digest algorithm {algorithm!r} is not one zTensor v2 defines (xxh3, sha256)"
            )
        self.algorithm = algorithm
        self._h: Any = xxhash.xxh3_64() if algorithm == "xxh3" else hashlib.sha256()

    def update(self, data: Any) -> None:
        """Add ``data`` (any byte buffer)."""
        self._h.update(memoryview(data).cast("B"))

    def value(self) -> str:
        """``algorithm:hex`` of everything added."""
        return f"{self.algorithm}:{self._h.hexdigest()}"


def digest_of(algorithm: str, data: Any) -> str:
    """``algorithm:hex`` of ``data``."""
    h = Hasher(algorithm)
    h.update(data)
    return h.value()


def verify_digest(digest: str, data: Any, *, what: str, tensor: str | None = None) -> None:
    """Raise :class:`ZTensorChecksumError` unless ``data`` (decoded bytes) has ``digest``;
    :class:`ZTensorUnsupportedError` for an algorithm tensorfile cannot compute."""
    algorithm = digest.partition(":")[0]
    if algorithm not in DIGESTS:
        raise ZTensorUnsupportedError(
            f"{what}: digest algorithm {algorithm!r} cannot be verified (tensorfile computes "
            "xxh3 and sha256)",
            tensor=tensor,
        )
    actual = digest_of(algorithm, data)
    if actual != digest:
        raise ZTensorChecksumError(
            f"{what}: {algorithm} mismatch: the manifest records {digest}, the decoded bytes "
            f"give {actual}; the file is corrupt",
            tensor=tensor,
        )
