"""JSON numbers the standard ``json`` module cannot take as they come, for the exact (slow)
checks of a safetensors header: integers past Python's 4,300-digit limit for ``int()``, and
numbers beyond a double's range, which the reference's JSON parser refuses.

Example:
    >>> import json
    >>> json_type(json.loads("1" + "0" * 5000, parse_int=json_int))
    'a number of 5,001 digits'
    >>> json.loads("[1e400]", parse_float=finite)
    Traceback (most recent call last):
    ...
    tensorfile.formats.safetensors._numbers.OutOfRange: 1e400
"""

from __future__ import annotations

import math

__all__ = ["LongNumber", "OutOfRange", "exact_int", "finite", "json_int", "json_type", "no_number"]

_MAX_INT_DIGITS = 4000  # under Python's 4,300-digit limit for int(str)
_MAX_DOUBLE_DIGITS = 300  # fewer digits always fit a double (its range ends near 1.8e308)


class LongNumber:
    """A JSON integer too long for ``int()`` (Python refuses over 4,300 digits)."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def json_int(text: str) -> int | LongNumber:
    """``parse_int`` for values that are only described: a long integer is a LongNumber."""
    return int(text) if len(text) <= _MAX_INT_DIGITS else LongNumber(len(text))


def no_number(text: str) -> None:
    """``parse_int``/``parse_float`` where numbers are not needed (only keys are)."""
    return None


def json_type(value: object) -> str:
    """What a decoded JSON value is, for a message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, LongNumber):
        return f"a number of {value.digits:,} digits"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    return "a string"


class OutOfRange(Exception):
    """A JSON number beyond a double's range: the reference's JSON parser refuses it."""


def exact_int(text: str) -> int | float:
    """``parse_int`` for tensor entries: JSON ``-0`` is a float to the reference; the sizes
    that matter were checked by the typed decoder, so an integer too long for ``int()`` (an
    unknown field's) is only checked for range (:class:`OutOfRange` past a double's)."""
    if text == "-0":
        return -0.0
    if len(text) > _MAX_DOUBLE_DIGITS:
        finite(text)
        return 0
    return int(text)


def finite(text: str) -> float:
    """``parse_float`` that raises :class:`OutOfRange` for a number past a double's range."""
    value = float(text)
    if math.isinf(value):
        raise OutOfRange(text)
    return value
