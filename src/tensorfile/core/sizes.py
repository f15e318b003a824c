"""Sizes written as text, as huggingface_hub reads them (``"5GB"``, ``"500MiB"``).

Example:
    >>> parse_size("5GB"), parse_size("2KiB"), parse_size(100), parse_size("1.5KiB")
    (5000000000, 2048, 100, 1536)
"""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import InvalidArgumentError

__all__ = ["MAX_SIZE", "parse_size", "shown_size"]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
# (stripped of the outer spaces first: every part of the pattern then has one way to match,
# so a text that does not fit fails in one pass, never by trying each split of its spaces)
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", re.ASCII)
_SPACES = " \t\n\r\f\v"  # (what the pattern's ASCII \s matches: a no-break space is no space)
MAX_SIZE = (1 << 63) - 1
"""The largest size (what a signed 64-bit offset holds)."""
_MAX_DIGITS = 40
_MAX_CHARS = 64
"""The longest size text (spaces around it aside) that is read at all."""


def parse_size(value: str | int) -> int:
    """A byte count from an int or a text like ``"5GB"`` (decimal units) or ``"5GiB"``
    (binary units; ASCII digits, a fraction only where it makes whole bytes); from 1 byte
    to :data:`MAX_SIZE`, else an :class:`~tensorfile.errors.InvalidArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(
            f"a size is a number of bytes or a text like '5GB', got {value!r}"
        )
    if isinstance(value, int):
        n = value
    else:
        text = value.strip(_SPACES)
        if len(text) > _MAX_CHARS:
            raise InvalidArgumentError(
                f"size {shown_size(value)}: too long ({len(text):,} characters; a size is at "
                f"most {_MAX_CHARS})"
            )
        m = _SIZE.fullmatch(text)
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise InvalidArgumentError(
                f"size {shown_size(value)}: expected a number with an optional unit (B, KB, MB, "
                "GB, TB, KiB, MiB, GiB, TiB)"
            )
        if len(m.group(1)) > _MAX_DIGITS:
            raise _too_large(value)
        exact = Fraction(m.group(1)) * _UNITS[unit]  # (exact: no float rounding, no overflow)
        if exact.denominator != 1:
            raise InvalidArgumentError(
                f"size {shown_size(value)}: not a whole number of bytes (a fraction goes with "
                "a unit: '1.5GiB')"
            )
        n = int(exact)
    if n < 1:
        raise InvalidArgumentError(f"size {shown_size(value)}: must be at least 1 byte")
    if n > MAX_SIZE:
        raise _too_large(value)
    return n


def _too_large(value: str | int) -> InvalidArgumentError:
    return InvalidArgumentError(f"size {shown_size(value)}: too large (at most {MAX_SIZE:,} bytes)")


def shown_size(value: object) -> str:
    """``value`` for a message (a long one cut).

    Example:
        >>> shown_size("9" * 100)[-6:]
        '999...'
    """
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."
