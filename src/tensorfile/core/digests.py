"""Digests of tensor bytes: ``xxh3`` (XXH3-64), ``crc32c`` and ``sha256``, as
``algorithm:hex`` text (lower-case hex: 16, 8 and 64 digits).

The safetensors format has no place for digests; tensorfile stores one per tensor in the
file's ``__metadata__`` under :data:`METADATA_KEY`, as text, so every other reader (the
reference ``safetensors`` library included) loads the file unchanged:

``"tensorfile.digests": "{\\"w\\": \\"xxh3:5f6f2c1a9e3b7d01\\", ...}"`` -- a JSON object
mapping each tensor's name to the digest of its stored bytes (the ``data_offsets`` range).

Example:
    >>> d = Digest("crc32c"); d.update(b"ab"); d.update(b"c"); d.value()
    'crc32c:364b3fb7'
    >>> digest_of("xxh3", b"")
    'xxh3:2d06800538d394c2'
"""

from __future__ import annotations

import hashlib
from typing import Any

from .errors import InvalidArgumentError

__all__ = [
    "ALGORITHMS",
    "HEX_DIGITS",
    "METADATA_KEY",
    "Digest",
    "canonical",
    "digest_of",
    "placeholder",
]

ALGORITHMS = ("xxh3", "crc32c", "sha256")
"""The digests tensorfile writes for safetensors files."""

METADATA_KEY = "tensorfile.digests"
"""The ``__metadata__`` key of a safetensors file's per-tensor digests."""

HEX_DIGITS = {"xxh3": 16, "crc32c": 8, "sha256": 64}
"""Hex digits of each algorithm's digest: fixed, so a header can hold a placeholder of the
final length while the data streams, and be rewritten in place."""


def placeholder(algorithm: str) -> str:
    """A digest text of ``algorithm``'s length, all zeros.

    Example:
        >>> placeholder("crc32c")
        'crc32c:00000000'
    """
    Digest(algorithm)  # an unknown algorithm: the same error as for a real digest
    return f"{algorithm}:{'0' * HEX_DIGITS[algorithm]}"


class Digest:
    """An incremental digest of one of :data:`ALGORITHMS`."""

    def __init__(self, algorithm: str) -> None:
        if algorithm not in ALGORITHMS:
            raise InvalidArgumentError(
                f"checksum {algorithm!r} is not one tensorfile writes (choose "
                f"{', '.join(ALGORITHMS)})"
            )
        self.algorithm = algorithm
        self._crc = 0
        self._h: Any = None
        if algorithm == "xxh3":
            import xxhash

            self._h = xxhash.xxh3_64()
        elif algorithm == "sha256":
            self._h = hashlib.sha256()

    def update(self, data: Any) -> None:
        """Add ``data`` (any byte buffer)."""
        view = memoryview(data).cast("B")
        if self._h is None:
            import crc32c

            self._crc = crc32c.crc32c(view, self._crc)
        else:
            self._h.update(view)

    def value(self) -> str:
        """``algorithm:hex`` of everything added."""
        hexed = f"{self._crc:08x}" if self._h is None else self._h.hexdigest()
        return f"{self.algorithm}:{hexed}"


def digest_of(algorithm: str, data: Any) -> str:
    """The digest of ``data`` in one call."""
    d = Digest(algorithm)
    d.update(data)
    return d.value()


_HEX = frozenset("0123456789abcdefABCDEF")


def canonical(text: str) -> str | None:
    """``text``, a digest some file stores, in the form :meth:`Digest.value` gives (lower-case
    hex of the algorithm's fixed width), or None when it is not a digest of one of
    :data:`ALGORITHMS`. zTensor v1.0 writes crc32c as ``crc32c:0x`` + upper-case hex; the
    value is the same number either way (the CRC as an integer, written most significant
    digit first).

    Example:
        >>> canonical("crc32c:0x364B3FB7"), canonical("xxh3:5f"), canonical("md5:00")
        ('crc32c:364b3fb7', 'xxh3:000000000000005f', None)
    """
    algorithm, sep, value = text.partition(":")
    width = HEX_DIGITS.get(algorithm)
    if not sep or width is None:
        return None
    if algorithm == "crc32c" and value[:2] in ("0x", "0X"):
        value = value[2:]
    if not 0 < len(value) <= width or not set(value) <= _HEX:
        return None
    return f"{algorithm}:{value.lower().rjust(width, '0')}"
