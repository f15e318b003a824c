"""An independent reference of weight-inspect's structural hash (``tensorfile id``).

Written from weight-inspect's rules (its Rust source, src/types.rs and src/hash.rs, as of its
commit "Fix Unicode escaping"), not from tensorfile's code: ``serde_json::to_string`` of
BTreeMaps (keys sorted bytewise), metadata values canonicalised to text first by
``escape_string``, which escapes quotes, backslashes and ``char::is_ascii_control`` characters
only (U+0000-U+001F and U+007F) and keeps every other character, non-ASCII ones included.

:func:`binary` finds the real weight-inspect executable (``$WEIGHT_INSPECT`` or
``weight-inspect`` on PATH) for the tests that compare against it when it is installed; it is
not on PyPI, so those tests skip where it is absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import safetensors.numpy as ref_st

from tensorfile.safetensors.numpy import save_file

# -- weight-inspect's canonical strings -----------------------------------------------------


def wi_escape(text: str) -> str:
    """weight-inspect's escape_string(): ``"`` and ``\\`` backslash-escaped, \\n \\r \\t by
    name, the other ASCII control characters (``c.is_ascii_control()``: U+0000-U+001F, U+007F)
    as ``\\u{:04x}`` of the code point (so \\b is ``\\u0008``), everything else, non-ASCII
    included, pushed as it is."""
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
        elif cp < 0x20 or cp == 0x7F:
            out.append("\\u" + format(cp, "04x"))
        else:
            out.append(ch)
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


def binary() -> str | None:
    """The real weight-inspect executable: ``$WEIGHT_INSPECT``, else ``weight-inspect`` on
    PATH, else None."""
    found = os.environ.get("WEIGHT_INSPECT") or shutil.which("weight-inspect")
    return found if found and os.access(found, os.X_OK) else None


# -- known answers, printed by the real weight-inspect -----------------------------------------
# (commit 7e16458 of las7/weight-inspect, built from source; `weight-inspect id --json FILE`)

# every vector is a safetensors file of these tensors and the metadata below
VECTOR_TENSORS = {"w": np.zeros((2, 3), np.float32), "é": np.zeros(1, np.int8)}
KNOWN_ANSWERS: dict[str, tuple[dict[str, str], str]] = {
    "ascii": ({"format": "pt"}, "d7bb5cb8969987b0549159255cad538cd409fec572d529c5ca568130444a287f"),
    "latin": ({"k": "café"}, "f46e8bb9fd5b8a26f00d2b5a25bd1d58d750faf50d39ed85bf7dafc93e0f8535"),
    "cjk": ({"k": "日本語"}, "085e3023e68d4691b8c578fc2525e38e5e87561df7a571faa654c8b0ade21b88"),
    "emoji": ({"k": "🙂😀"}, "c53501c6559b6f76f44c22074c7f76cc228daa5ecd512471f53e7304e773cd01"),
    "en-dash": ({"k": "–"}, "40f8ee00e8fb82aa134605f0ae69b335f198d79b58e33296859e2beaac353942"),
    "ascii-controls": (
        {"k": 'a\x00\x01\b\f\x1f\x7f\n\r\t"\\z'},
        "e76f1006924f76af87a621f866dc22814627fb4bd74ff8afb48a69521a329371",
    ),
    "c1-controls": (
        {"k": "\x80\x85\x9f"},
        "bb653647102ca8a50cbb3da2ad3eacaee025c160cdbf162babaa23dd739c28f6",
    ),
    "line-separators": (
        {"k": "\u2028\u2029"},
        "68fcc44a6efd0cb7e639b03a869cff3ab011afc6fc77609f8f50efd9983dc717",
    ),
    "non-ascii-keys": (
        {"é_key": "v", "键": "值"},
        "d605048d4b685f6e5ba54421427369917ce45a027c33968d21166c7bd201686b",
    ),
}
GGUF_ANSWER = "b521b253d55e5f650d5a5363d719290a3bac262d92548cb01648e519904fc755"


def write_vector(path: str | Path, metadata: dict[str, str], writer: str = "tensorfile") -> str:
    """A known-answer file: :data:`VECTOR_TENSORS` with ``metadata``."""
    target = str(path)
    if writer == "tensorfile":
        save_file(dict(VECTOR_TENSORS), target, metadata=dict(metadata))
    else:
        ref_st.save_file(dict(VECTOR_TENSORS), target, metadata=dict(metadata))
    return target


def write_gguf_vector(path: str | Path) -> str:
    """The GGUF known-answer file: non-ASCII strings, a string array and one tensor."""
    target = str(path)
    w = gguf.GGUFWriter(target, arch="llama")
    w.add_string("general.name", "Modèle – 日本語 🙂 \x7f\x85\u2028\b")
    w.add_array("tok.list", ["é", "a\tb", "😀"])
    w.add_tensor("tok.weight", np.ones((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return target
