"""Small pieces of text the commands share: counted nouns, natural order, short floats.

Example:
    >>> plural(1, "tensor"), plural(1_234, "tensor"), plural(2, "entry", "entries")
    ('1 tensor', '1,234 tensors', '2 entries')
    >>> sorted(["layers.10", "layers.2", "layers.1"], key=natural_key)
    ['layers.1', 'layers.2', 'layers.10']
    >>> short_float(9.999999747378752e-06, bits=32), short_float(0.1)
    ('1e-05', '0.1')
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "natural_key",
    "natural_sorted",
    "plural",
    "short_float",
    "shortest32",
]

T = TypeVar("T")


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word``, in the singular for exactly one, else the plural (``many``, or
    ``word + "s"``); ``n`` with thousands separators.

    Example:
        >>> plural(0, "byte"), plural(1, "byte"), plural(1, "shard"), plural(3, "file")
        ('0 bytes', '1 byte', '1 shard', '3 files')
    """
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[list[Any], str]:
    """A sort key that orders runs of digits by their value: ``layers.2`` before
    ``layers.10``. Any number of digits works (no conversion to ``int``: a name holding a
    100,000-digit run sorts as fast as any other); names equal by value (``a01``, ``a1``)
    are ordered by their text.

    Example:
        >>> sorted(["b.10.w", "b.9.w", "a", "b.09.w"], key=natural_key)
        ['a', 'b.09.w', 'b.9.w', 'b.10.w']
    """
    parts: list[Any] = _DIGITS.split(name)
    for i in range(1, len(parts), 2):  # odd places hold digits: by length, then by text
        digits = parts[i].lstrip("0")
        parts[i] = (len(digits), digits)
    return parts, name


def natural_sorted(items: Iterable[T], key: Any = None) -> list[T]:
    """``items`` in :func:`natural_key` order of ``key(item)`` (of the items themselves
    when ``key`` is None).

    Example:
        >>> natural_sorted([("x.10", 1), ("x.9", 2)], key=lambda p: p[0])
        [('x.9', 2), ('x.10', 1)]
    """
    if key is None:
        return sorted(items, key=natural_key)  # type: ignore[arg-type]
    return sorted(items, key=lambda item: natural_key(key(item)))


def shortest32(x: float) -> float:
    """The float32 value nearest ``x``, as the shortest decimal that reads back as that
    float32 (``9.999999747378752e-06`` → ``1e-05``): a float32 written as JSON without the
    digits of its float64 widening.

    Example:
        >>> shortest32(float(np.float32(0.1))), shortest32(float("inf"))
        (0.1, inf)
    """
    if not math.isfinite(x):
        return x
    return float(str(np.float32(x)))


def short_float(x: float, bits: int = 64) -> str:
    """The shortest text that reads back as ``x`` at its own precision (``bits`` 32 or
    less: the float32 nearest ``x``; 64: ``x`` itself); ``inf``, ``-inf``, ``nan``.

    Example:
        >>> short_float(9.999999747378752e-06, bits=32), short_float(0.1), short_float(2.0)
        ('1e-05', '0.1', '2.0')
    """
    if not math.isfinite(x):
        return str(x)
    return repr(shortest32(x) if bits <= 32 else float(x))
