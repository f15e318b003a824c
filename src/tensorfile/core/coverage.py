"""Which tensors a verified read checks against a digest the file stores, and the warning
for those it cannot check.

``verify=True`` compares each digest a file stores with the bytes read (safetensors'
``tensorfile.digests``, zTensor's per-component digests). A tensor no digest covers (a file
saved without ``checksum=``, a format that has none, a digest map that leaves a tensor out)
is still read whole, but a changed byte inside a valid value cannot be seen: the entry
points that take ``verify=True`` say so with a
:class:`~tensorfile.errors.NoDigestsWarning` naming those tensors, and
``tensorfile verify`` prints them.

Example:
    >>> print(not_covered(["b"]))
    1 tensor not covered by a digest: b
    >>> print(not_covered([f"t{i}" for i in range(8)]))
    8 tensors not covered by a digest: t0, t1, t2, t3, t4 and 3 more
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import TypeVar

from .errors import NoDigestsWarning
from .reader import Reader

__all__ = ["SHOWN", "not_covered", "uncovered", "verified", "warn_outside", "warn_uncovered"]

R = TypeVar("R", bound=Reader)

SHOWN = 5
"""How many tensor names a message lists before ``and N more``."""

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def uncovered(reader: Reader) -> list[str]:
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


def warn_uncovered(reader: Reader, where: str) -> None:
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
