"""Digests of tensor bytes: ``xxh3`` (XXH3-64), ``crc32c`` and ``sha256``, as
``algorithm:hex`` text (lower-case hex: 16, 8 and 64 digits).

The safetensors format has no place for digests; tensorfile stores one per tensor in the
file's ``__metadata__`` under :data:`METADATA_KEY`, as text, so every other reader (the
reference ``safetensors`` library included) loads the file unchanged:

``"tensorfile.digests": "{\\"w\\": \\"xxh3:5f6f2c1a9e3b7d01\\", ...}"`` -- a JSON object
mapping each tensor's name to the digest of its stored bytes (the ``data_offsets`` range).

**Coverage.** ``verify=True`` compares each digest a file stores with the bytes read (safetensors'
``tensorfile.digests``, zTensor's per-component digests). A tensor no digest covers (a file
saved without ``checksum=``, a format that has none, a digest map that leaves a tensor out)
is still read whole, but a changed byte inside a valid value cannot be seen: the entry
points that take ``verify=True`` say so with a
:class:`~tensorfile.errors.NoDigestsWarning` naming those tensors, and
``tensorfile verify`` prints them.

Example:
    >>> d = Digest("crc32c"); d.update(b"ab"); d.update(b"c"); d.value()
    'crc32c:364b3fb7'
    >>> digest_of("xxh3", b"")
    'xxh3:2d06800538d394c2'
    >>> print(not_covered(["b"]))
    1 tensor not covered by a digest: b
    >>> print(not_covered([f"t{i}" for i in range(8)]))
    8 tensors not covered by a digest: t0, t1, t2, t3, t4 and 3 more
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, TypeVar

from .errors import InvalidArgumentError, NoDigestsWarning

__all__ = [
    "ALGORITHMS",
    "HEX_DIGITS",
    "METADATA_KEY",
    "SHOWN",
    "STORED",
    "Digest",
    "Verify",
    "canonical",
    "checking",
    "digest_of",
    "not_covered",
    "placeholder",
    "uncovered",
    "verified",
    "warn_outside",
    "warn_uncovered",
    "warns",
]

ALGORITHMS = ("xxh3", "crc32c", "sha256")
"""The digests tensorfile writes for safetensors files."""

METADATA_KEY = "tensorfile.digests"
"""The ``__metadata__`` key of a safetensors file's per-tensor digests."""

HEX_DIGITS = {"xxh3": 16, "crc32c": 8, "sha256": 64}
"""Hex digits of each algorithm's digest: fixed, so a header can hold a placeholder of the
final length while the data streams, and be rewritten in place."""


STORED: Literal["stored"] = "stored"
"""``verify=STORED``: check every digest a file stores as its tensors are read, and say
nothing of the tensors none covers (what ``tensorfile.convert`` does: it does not verify a
file, it refuses to copy bytes the file's own digests prove changed)."""

Verify = bool | Literal["stored"] | None
"""What the readers' ``verify=`` takes: True checks the stored digests and warns
(:func:`warn_uncovered`) about tensors none covers, :data:`STORED` checks them without the
warning, False checks none, None is each format's default (zTensor checks its own)."""


def checking(verify: Verify) -> bool | None:
    """The ``verify`` a format's reader takes (a bool, or None for its default).

    Example:
        >>> checking(STORED), checking(None), checking(False)
        (True, None, False)
    """
    return None if verify is None else bool(verify)


def warns(verify: Verify) -> bool:
    """Whether a reader opened with ``verify`` warns about tensors no digest covers.

    Example:
        >>> warns(True), warns(STORED), warns(None)
        (True, False, False)
    """
    return bool(verify) and verify != STORED


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


class _Sized(Protocol):
    @property
    def numel(self) -> int: ...


class Checked(Protocol):
    """What coverage needs of a reader (:class:`~tensorfile.core.reader.Reader` has it; the
    reader imports this module, so it is named by shape)."""

    def keys(self) -> Iterable[str]: ...
    def checks_digest(self, name: str) -> bool: ...
    def info(self, name: str) -> _Sized: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...


R = TypeVar("R", bound=Checked)

SHOWN = 5
"""How many tensor names a message lists before ``and N more``."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def uncovered(reader: Checked) -> list[str]:
    """The tensors of ``reader`` whose reads compare no digest the file stores, in its
    order (every tensor of a reader that does not verify), but those with no elements: no
    byte of them could change unseen."""
    return [
        name
        for name in reader.keys()
        if not reader.checks_digest(name) and reader.info(name).numel != 0
    ]


def not_covered(names: Sequence[str]) -> str:
    """``N tensors not covered by a digest: a, b`` (the first :data:`SHOWN` names)."""
    n = len(names)
    shown = ", ".join(names[:SHOWN])
    more = f" and {n - SHOWN:,} more" if n > SHOWN else ""
    return f"{n:,} tensor{'' if n == 1 else 's'} not covered by a digest: {shown}{more}"


def warn_outside(message: str, category: type[Warning]) -> None:
    """Issue a warning attributed to the first caller outside tensorfile (the line of the
    program that called ``load_file``, ``safe_open``...), however deep it is raised."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def warn_uncovered(reader: Checked, where: str) -> None:
    """A :class:`~tensorfile.errors.NoDigestsWarning` when ``reader`` (opened with
    ``verify=True``) has tensors no stored digest covers; ``where`` names the file."""
    names = uncovered(reader)
    if not names:
        return
    covered = sum(reader.checks_digest(name) for name in reader.keys())
    if not covered:
        n = len(names)
        message = (
            f"{where} stores no digests: verify=True cannot check the bytes of its "
            f"{n:,} tensor{'' if n == 1 else 's'} (a changed byte inside a valid value "
            "goes unseen)"
        )
    else:
        message = (
            f"{where}: {not_covered(names)}; verify=True cannot check their bytes (the "
            f"file's digests cover {covered:,} of {len(reader):,} tensors)"
        )
    warn_outside(message, NoDigestsWarning)


def verified(reader: R, where: str) -> R:
    """``reader``, opened with ``verify=True``, once :func:`warn_uncovered` has had its say
    (closed when a filter makes the warning an error, so that nothing is left open)."""
    try:
        warn_uncovered(reader, where)
    except BaseException:
        reader.close()
        raise
    return reader
