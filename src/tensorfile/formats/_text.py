"""Metadata as text, for the formats whose metadata holds only text (safetensors, zTensor
v1.0): one rule for every writer, re-exported as :func:`tensorfile.formats.metadata_text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["metadata_text"]


def metadata_text(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Metadata as text, for a format that holds only text: text values as they are,
    others (numbers, lists, GGUF values) as JSON; a GGUF float32 as the shortest number
    that reads back as the same float32 (:func:`tensorfile.core.values.plain`).

    Example:
        >>> from tensorfile.core.values import TypedValue
        >>> metadata_text({"a": "x", "n": 3, "l": [1, "ü"]})
        {'a': 'x', 'n': '3', 'l': '[1, "ü"]'}
        >>> metadata_text({"eps": TypedValue("float32", 9.999999960041972e-13)})
        {'eps': '1e-12'}
    """
    import json

    from tensorfile.core.values import plain

    out: dict[str, str] = {}
    for key, value in metadata.items():
        inner = plain(value)  # GGUFValue
        if isinstance(inner, str):
            out[str(key)] = inner
        else:
            out[str(key)] = json.dumps(inner, ensure_ascii=False, default=str)
    return out
