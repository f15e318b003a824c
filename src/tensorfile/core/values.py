"""Typed metadata values: a value with the type the file stores it as.

Most formats' metadata is text (safetensors) or plain values (zTensor's CBOR). GGUF types
every value (``uint32``, ``float32``, arrays of them, arrays of arrays...), and the type
matters to the structural hash (weight-inspect canonicalises ``1`` as a ``uint8`` and
``1.0`` as a ``float32`` differently), so a catalog keeps such values as
:class:`TypedValue`. ``tensorfile.open(...).metadata`` gives plain Python values
(:func:`plain`); ``tensorfile.open(...).typed_metadata`` the TypedValues.
``tensorfile.gguf.GGUFValue`` is this class.

A float32 is stored as the float32 nearest what was meant: ``1e-12`` is stored as
``9.999999960041972e-13`` when widened to a Python float. :func:`plain` (and so every place
a float32 becomes a plain value or text: ``.metadata``, convert's metadata, JSON) gives the
shortest decimal that reads back as the same float32 (:func:`short_float32`), ``1e-12``.

Example:
    >>> v = TypedValue("array", [1, 2], "uint32")
    >>> v.value, v.element_type, plain(v), plain("text")
    ([1, 2], 'uint32', [1, 2], 'text')
    >>> plain(TypedValue("float32", 9.999999960041972e-13))
    1e-12

Values are also quoted in error messages and names: :func:`brief` is a short repr of any
value and :func:`sized` the type and size of one whose repr could be long (a storage, whose
repr writes every element), both in time bounded by what they show.
"""

from __future__ import annotations

import itertools
import math
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["STRING_SEP", "LazyStrings", "TypedValue", "brief", "plain", "short_float32", "sized"]

STRING_SEP = "\ud800"
"""What joins the items of a string array in one text (:attr:`LazyStrings.joined`, the
structural hash): a lone surrogate, which no text read from a file holds (every reader
decodes strict UTF-8)."""

_F32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A typed metadata value. For arrays ``value`` is a list and ``element_type`` is set.

    Attributes:
        type: the stored type (GGUF's names: ``uint8`` ... ``float64``, ``bool``,
            ``string``, ``array``).
        value: the Python value as stored (a list for arrays, nested lists for arrays of
            arrays; float32 values widened to a Python float).
        element_type: the type of an array's items (``array`` for an array of arrays).
        bits: for float32 values, the stored bit pattern(s) (a NaN's payload survives no
            float).
        items: for an array of arrays, each inner array as a TypedValue.
    """

    type: str
    value: Any
    element_type: str | None = None
    bits: Any = None
    items: tuple[TypedValue, ...] | None = None


class LazyStrings(TypedValue):
    """A string array (a GGUF vocabulary: hundreds of thousands of tokens) kept as one text,
    its items joined by :data:`STRING_SEP`: ``value``, the list of items, is made on first
    use, so what needs only the array's canonical text (the structural hash, ``tensorfile
    summary``) never makes a list of them. Otherwise a :class:`TypedValue` like any other
    (``type`` ``array``, ``element_type`` ``string``), equal to one with the same items.

    Example:
        >>> v = LazyStrings("a" + STRING_SEP + "b", 2)
        >>> v.materialized, len(v), v.value, v.materialized
        (False, 2, ['a', 'b'], True)
        >>> v == TypedValue("array", ["a", "b"], "string")
        True
        >>> w = LazyStrings("a" + STRING_SEP + "c", 2)
        >>> v == w, w.materialized
        (False, False)
        >>> import pickle
        >>> pickle.loads(pickle.dumps(v)).value
        ['a', 'b']
    """

    __slots__ = ("_items", "count", "joined")

    joined: str
    count: int
    _items: list[str] | None

    def __init__(self, joined: str, count: int) -> None:
        for name, value in (("type", "array"), ("element_type", "string"), ("bits", None),
                            ("items", None), ("joined", joined), ("count", count),
                            ("_items", None)):  # fmt: skip
            object.__setattr__(self, name, value)

    @property
    def value(self) -> list[str]:
        """The items, as a list (made once, on first use)."""
        if self._items is None:
            items = self.joined.split(STRING_SEP) if self.count else []
            object.__setattr__(self, "_items", items)
            return items
        return self._items

    @property
    def materialized(self) -> bool:
        """Whether :attr:`value` has been made."""
        return self._items is not None

    def __len__(self) -> int:
        return self.count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TypedValue):
            return NotImplemented
        if isinstance(other, LazyStrings):  # two vocabularies (diff): their texts, no lists
            return self.count == other.count and self.joined == other.joined
        return TypedValue(self.type, self.value, self.element_type) == TypedValue(
            other.type, other.value, other.element_type, other.bits, other.items
        )

    __hash__ = None  # type: ignore[assignment]  # (a list inside, as any array's)

    def __reduce__(self) -> tuple[type[LazyStrings], tuple[str, int]]:
        return LazyStrings, (self.joined, self.count)  # pickled (Spark) and copied as built

    def __repr__(self) -> str:
        return f"LazyStrings({self.count:,} items)"


def short_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 as ``value``, as a float
    (NaN and infinities as they are).

    Example:
        >>> short_float32(9.999999960041972e-13), short_float32(0.10000000149011612)
        (1e-12, 0.1)
        >>> short_float32(16777217.0), short_float32(-0.0)
        (16777216.0, -0.0)
    """
    x = float(value)
    if not math.isfinite(x) or abs(x) > _F32_MAX:  # (beyond float32: nothing to shorten)
        return x
    return float(str(np.float32(x)))  # numpy's shortest round-trip repr (Dragon4)


def _short_float32s(values: list[Any]) -> list[float]:
    """:func:`short_float32` of each item (a whole array at a time)."""
    try:
        arr = np.asarray(values, np.float64)
    except (TypeError, ValueError):
        return [short_float32(v) for v in values]
    if arr.ndim != 1 or np.any(np.abs(arr[np.isfinite(arr)]) > _F32_MAX):
        return [short_float32(v) for v in values]
    return [float(t) for t in map(str, arr.astype(np.float32))]


def plain(value: Any) -> Any:
    """``value`` without its type: a :class:`TypedValue` as plain Python values (float32
    ones as :func:`short_float32`, arrays as lists, arrays of arrays as nested lists);
    anything else as it is.

    Example:
        >>> inner = (TypedValue("array", [1, 2], "int32"), TypedValue("array", ["a"], "string"))
        >>> plain(TypedValue("array", [[1, 2], ["a"]], "array", items=inner))
        [[1, 2], ['a']]
        >>> plain(TypedValue("array", [0.10000000149011612], "float32"))
        [0.1]
    """
    if not isinstance(value, TypedValue):
        return value
    if value.type == "float32":
        return short_float32(value.value)
    if value.type != "array":
        return value.value
    if value.element_type == "array" and value.items is not None:
        return [plain(v) for v in value.items]
    if value.element_type == "float32":
        return _short_float32s(value.value)
    return list(value.value)


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
