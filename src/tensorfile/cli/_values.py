"""Metadata values as the command line shows them: as JSON values (GGUF's typed values
unwrapped, float32 ones at their own precision) and as one line of text, cut as ``inspect``
cuts them (:func:`tensorfile.ops.inspect.brief_value`) and saying how long they were.

A GGUF float32 such as ``1e-05`` is stored as the float32 nearest it; widened to a Python
float it reads ``9.999999747378752e-06``. Every output shows it as the shortest decimal that
reads back as the same float32 (``1e-05``), in JSON too (a number still).

Example:
    >>> meta = {"eps": TypedValue("float32", 9.999999747378752e-06), "name": "tiny"}
    >>> plain_metadata(meta)
    {'eps': 1e-05, 'name': 'tiny'}
    >>> value_text(list(range(100)), 20), value_text("x" * 50, 10, quoted=True)
    ('[0, 1, 2, 3, 4, 5... (100 items)', "'xxxxxxx...' (50 characters)")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorfile.core.values import TypedValue

from ..ops.inspect import BRIEF_CHARS, brief_value, json_metadata
from ._output import printable
from ._text import plural

__all__ = ["VALUE_LIMIT", "plain_metadata", "short32", "value_text"]

VALUE_LIMIT = BRIEF_CHARS
"""Characters of a metadata value ``inspect``, ``diff`` and ``meta --set`` show (``inspect``
and ``diff`` show it all with ``--verbose``): ``inspect``'s own limit."""


def short32(value: Any, head: int | None = None) -> Any:
    """``value`` with a GGUF float32 (and the items of a float32 array: the first ``head``
    of them, or all) replaced by the shortest float that reads back as the same float32;
    anything else as it is.

    Example:
        >>> short32(TypedValue("array", [0.10000000149011612, 0.20000000298023224], "float32"), 1)
        ... # doctest: +NORMALIZE_WHITESPACE
        TypedValue(type='array', value=[0.1, 0.20000000298023224],
                   element_type='float32', bits=None, items=None)
    """
    if not isinstance(value, TypedValue):
        return value
    if value.type == "float32":
        return TypedValue("float32", float(str(np.float32(value.value))))
    if value.element_type == "array" and value.items is not None:  # arrays of arrays
        inner = tuple(short32(v, head) for v in value.items)
        return TypedValue("array", [v.value for v in inner], "array", items=inner)
    if value.type == "array" and value.element_type == "float32" and value.value:
        items = value.value
        n = len(items) if head is None else min(head, len(items))
        short = [float(text) for text in map(str, np.asarray(items[:n], np.float32))]
        return TypedValue("array", short + items[n:], "float32")
    return value


def plain_metadata(metadata: Mapping[str, Any], head: int | None = None) -> dict[str, Any]:
    """Metadata as JSON values (:func:`tensorfile.ops.inspect.json_metadata`: GGUF values
    unwrapped; NaN and infinities as the strings ``"NaN"``, ``"Infinity"``...), float32
    values at their own precision (:func:`short32`; ``head``: only the first items of
    arrays, for output that shows no more).

    Example:
        >>> plain_metadata({"x": TypedValue("float32", float("nan")), "y": 2})
        {'x': 'NaN', 'y': 2}
    """
    return json_metadata({k: short32(v, head) for k, v in metadata.items()})


def value_text(value: Any, limit: int | None = None, *, quoted: bool = False) -> str:
    """A :func:`plain_metadata` value as one :func:`~._output.printable` line, cut as
    ``inspect`` cuts it (:func:`~tensorfile.ops.inspect.brief_value`, to ``limit``
    characters; None: whole), then told how long it was: ``'xxxx...' (51,200
    characters)``, ``[1, 2, ... (32,000 items)``.

    ``quoted``: strings in quotes and other scalars as JSON (how ``diff`` tells ``'1'``
    from ``1``); else strings as they are (``inspect``, ``meta``).

    Example:
        >>> value_text("a\\nb"), value_text("a", quoted=True), value_text(True, quoted=True)
        ('a\\\\nb', "'a'", 'true')
    """
    if quoted and not isinstance(value, str | list):
        value = json.dumps(value, ensure_ascii=False, default=str)
        quoted = False
    text = brief_value(value, limit is None, limit=limit or BRIEF_CHARS)
    note = ""
    if isinstance(value, list):  # cut: it no longer ends in "]"
        note = "" if text.endswith("]") else f" ({plural(len(value), 'item')})"
    elif limit is not None and len(str(value)) > limit:
        size = len(value) if isinstance(value, str) else len(str(value))
        note = f" ({plural(size, 'character')})"
    if quoted and isinstance(value, str):
        text = repr(text)
    return printable(text + note)
