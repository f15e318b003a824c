"""Short, bounded reprs of any value for error messages and names (:func:`brief`), and the
type and size of a value whose repr could be long (:func:`sized`): both take time bounded
by what they show, whatever the value (a 1 MiB bytes key, a storage whose repr shows every
element, a dict of a million keys).

Example:
    >>> brief(b"x" * 1000)[:12], brief({"b": 1, "a": 2})
    ("b'xxxxxxxxxx", "{'b': 1, 'a': 2}")
"""

from __future__ import annotations

import itertools
import reprlib
from typing import Any

__all__ = ["brief", "sized"]


class _BriefRepr(reprlib.Repr):
    """reprlib's bounded repr, bounded in time too: a text or bytes is cut before its repr
    is made, a dict or set is not sorted, an object with a size (a storage, a tensor, an
    array) is its type and size (:func:`sized`), an integer too long to print its size,
    and once the leaves shown take :data:`_ROOM` characters the rest is ``...``."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 100
        self.maxlong = 40
        self.room = _ROOM

    def repr1(self, x: Any, level: int) -> str:
        if self.room <= 0:
            return self.fillvalue
        if isinstance(x, tuple | list | dict | set | frozenset):
            base = next(b for b in (tuple, list, dict, frozenset, set) if isinstance(x, b))
            text: str = getattr(self, f"repr_{base.__name__}")(x, level)
            return text if type(x) is base else f"{type(x).__name__}({text})"
        if isinstance(x, str | bytes | bytearray):
            text = self._text(x)
        elif isinstance(x, int):
            text = self.repr_int(x, level)
        else:
            text = sized(x) or self.repr_instance(x, level)
        self.room -= len(text)
        return text

    def _text(self, x: Any) -> str:
        text = repr(x[: self.maxstring])
        if len(text) > self.maxstring:  # (reprlib's cut of a text, which bytes lack)
            i = max(0, (self.maxstring - 3) // 2)
            j = max(0, self.maxstring - 3 - i)
            text = repr(x[:i] + x[len(x) - j :])
            text = text[:i] + self.fillvalue + text[len(text) - j :]
        return text

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of {x.bit_length():,} bits>"
        return super().repr_int(x, level)

    def repr_dict(self, x: Any, level: int) -> str:
        return self._members(x.items(), len(x), level, "{}", self.maxdict)

    def repr_set(self, x: Any, level: int) -> str:
        return self._members(x, len(x), level, "set()", self.maxset)

    def repr_frozenset(self, x: Any, level: int) -> str:
        return f"frozenset({self._members(x, len(x), level, '', self.maxfrozenset)})"

    def _members(self, items: Any, n: int, level: int, empty: str, most: int) -> str:
        """A dict's or set's first ``most`` members in their order (reprlib sorts them
        all first: a million keys' sort for six shown)."""
        if not n:
            return empty
        if level <= 0:
            return "{...}"
        shown = [
            f"{self.repr1(m[0], level - 1)}: {self.repr1(m[1], level - 1)}"
            if empty == "{}"
            else self.repr1(m, level - 1)
            for m in itertools.islice(items, most)
        ]
        return "{" + ", ".join(shown + ["..."] * (n > most)) + "}"


_ROOM = 100
"""Characters the leaves of one :func:`brief` repr may take (past them: ``...``)."""


def _type_name(kind: type) -> str:
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def sized(value: object) -> str | None:
    """A value that may be big, by its type and size, without its repr (a storage's repr
    shows every element): its bytes if it has ``nbytes``, else its length; None for a value
    of no size (a scalar, a 0-d array or tensor, a device).

    Example:
        >>> import numpy as np
        >>> sized(np.zeros(4)), sized(range(3)), sized(np.float64(1.5))
        ('<numpy.ndarray of 32 bytes>', '<range of 3 items>', None)
    """
    try:
        if getattr(value, "shape", None) == ():
            return None
        # (a TypedStorage's nbytes() warns that the class is deprecated; its _nbytes() not)
        n = getattr(value, "_nbytes", None) or getattr(value, "nbytes", None)
        n = n() if callable(n) else n
        unit = "bytes"
        if not isinstance(n, int):
            if not hasattr(value, "__len__"):
                return None
            n, unit = len(value), "items"
    except Exception:
        return None
    return f"<{_type_name(type(value))} of {n:,} {unit}>"


def brief(value: object) -> str:
    """A short repr of any value, for an error message: bounded in length and time, and it
    never fails (an integer past Python's 4,300-digit limit is shown by its size, a storage
    or array by its type and size, an object whose repr raises by its type).

    Example:
        >>> brief(10**5000), brief(list(range(100))), len(brief("x" * 10_000))
        ('<an integer of 16,610 bits>', '[0, 1, 2, 3, 4, 5, ...]', 100)
        >>> import numpy as np
        >>> brief(np.zeros(1 << 20)), len(brief(b"\\x01" * (1 << 20)))
        ('<numpy.ndarray of 8,388,608 bytes>', 100)
    """
    try:
        return _BriefRepr().repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
