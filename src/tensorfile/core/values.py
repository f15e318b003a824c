"""Typed metadata values: a value with the type the file stores it as.

Most formats' metadata is text (safetensors) or plain values (zTensor's CBOR). GGUF types
every value (``uint32``, ``float32``, arrays of them...), and the type matters to the
structural hash (weight-inspect canonicalises ``1`` as a ``uint8`` and ``1.0`` as a
``float32`` differently), so a catalog keeps such values as :class:`TypedValue`:
``tensorfile.open(...).metadata`` of a GGUF file maps keys to them (``.value`` is the plain
Python value). ``tensorfile.gguf.GGUFValue`` is this class.

Example:
    >>> v = TypedValue("array", [1, 2], "uint32")
    >>> v.value, v.element_type, plain(v), plain("text")
    ([1, 2], 'uint32', [1, 2], 'text')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TypedValue", "plain"]


@dataclass(frozen=True, slots=True)
class TypedValue:
    """A typed metadata value. For arrays ``value`` is a list and ``element_type`` is set.

    Attributes:
        type: the stored type (GGUF's names: ``uint8`` ... ``float64``, ``bool``,
            ``string``, ``array``).
        value: the plain Python value (a list for arrays).
        element_type: the type of an array's items.
        bits: for float32 values, the stored bit pattern(s) (a NaN's payload survives no
            float).
    """

    type: str
    value: Any
    element_type: str | None = None
    bits: Any = None


def plain(value: Any) -> Any:
    """``value`` without its type: a :class:`TypedValue`'s ``value``, anything else as it is."""
    return value.value if isinstance(value, TypedValue) else value
