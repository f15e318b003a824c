"""An independent reference of weight-inspect's structural hash (``tensorfile id``).

Written from weight-inspect's rules (its Rust source), not from tensorfile's code:
``serde_json::to_string`` of BTreeMaps (keys sorted bytewise), metadata values canonicalised
to text first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# -- weight-inspect's canonical strings -----------------------------------------------------


def wi_escape(text: str) -> str:
    """weight-inspect's escape(): quotes, backslash, \\n \\r \\t escaped, printable ASCII kept,
    everything else ``\\u{:04x}`` of the code point."""
    out = []
    for ch in text:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= cp <= 0x7E:
            out.append(ch)
        else:
            out.append("\\u" + format(cp, "04x"))
    return "".join(out)


def wi_text(text: str) -> str:
    """Canonical string of a text value."""
    return '"' + wi_escape(text) + '"'


def _f32_bits(value: Any) -> int:
    if isinstance(value, int):  # already a bit pattern
        return value
    return int(np.array(value, dtype="<f4").view("<u4"))


def wi_gguf(kind: str, value: Any, elem: str | None = None) -> str:
    """Canonical string of a typed GGUF value. float32 values may be given as a python float
    or directly as their u32 bit pattern (an int)."""
    if kind == "array":
        assert elem is not None
        return "[" + ",".join(wi_gguf(elem, v) for v in value) + "]"
    if kind == "string":
        return wi_text(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float32":
        return f"f32:{_f32_bits(value)}"
    if kind == "float64":
        return str(int(np.array(value, dtype="<f8").view("<u8")))
    if kind == "uint64":
        return str(int(np.array(value, dtype="<u8").view("<i8")))
    return str(int(value))


# -- serde_json::to_string, written out by hand ------------------------------------------


def _sj_str(text: str) -> str:
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif cp < 0x20:
            out.append("\\u" + format(cp, "04x"))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def serde_json(obj: Any, *, sort: bool = True) -> str:
    """Compact JSON as serde_json writes it; dict keys sorted bytewise (BTreeMap) when
    ``sort``, else in insertion order (a struct's field order)."""
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, str):
        return _sj_str(obj)
    if isinstance(obj, list | tuple):
        return "[" + ",".join(serde_json(v) for v in obj) + "]"
    if isinstance(obj, dict):
        keys = sorted(obj, key=lambda k: k.encode("utf-8")) if sort else list(obj)
        return "{" + ",".join(_sj_str(k) + ":" + serde_json(obj[k]) for k in keys) + "}"
    raise TypeError(type(obj))


def expected_canonical(
    fmt: str,
    metadata: Mapping[str, str],
    tensors: Sequence[tuple[str, str, Sequence[int], int]],
    gguf_version: int | None = None,
) -> str:
    """The canonical document weight-inspect hashes. ``metadata`` maps keys to canonical
    strings; ``tensors`` holds (name, dtype, shape, byte_length)."""
    parts = ['"format":' + serde_json(fmt)]
    if gguf_version is not None:
        parts.append('"gguf_version":' + str(gguf_version))
    parts.append('"metadata":' + serde_json(dict(metadata)))
    tmap = {}
    for name, dtype, shape, nbytes in tensors:
        # a struct: fields in declaration order
        tmap[name] = {
            "name": name,
            "dtype": dtype.lower(),
            "shape": list(shape),
            "byte_length": nbytes,
        }
    inner = ",".join(
        _sj_str(k) + ":" + serde_json(tmap[k], sort=False)
        for k in sorted(tmap, key=lambda k: k.encode("utf-8"))
    )
    parts.append('"tensors":{' + inner + "}")
    return "{" + ",".join(parts) + "}"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
