"""Sizes written as text, as huggingface_hub reads them (``"5GB"``, ``"500MiB"``).

Example:
    >>> parse_size("5GB"), parse_size("2KiB"), parse_size(100)
    (5000000000, 2048, 100)
"""

from __future__ import annotations

import re

from .errors import InvalidArgumentError

__all__ = ["parse_size"]

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
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_size(value: str | int) -> int:
    """A byte count from an int or a text like ``"5GB"`` (decimal units) or ``"5GiB"``
    (binary units); at least 1 byte."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidArgumentError(
            f"a size is a number of bytes or a text like '5GB', got {value!r}"
        )
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.fullmatch(value)
        unit = m.group(2).upper() if m else None
        if m is None or unit not in _UNITS:
            raise InvalidArgumentError(
                f"size {value!r}: expected a number with an optional unit (B, KB, MB, GB, TB, "
                "KiB, MiB, GiB, TiB)"
            )
        n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise InvalidArgumentError(f"size {value!r}: must be at least 1 byte")
    return n
