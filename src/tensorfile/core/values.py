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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["STRING_SEP", "LazyStrings", "TypedValue", "plain", "short_float32"]

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
