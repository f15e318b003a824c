"""The reference connector's dataset layout (SemyonSinchenko/safetensors-spark), as its
source writes it: what tensorfile needs to read such a dataset and to write one.

The reference's ``dataset_manifest.json`` has only the fields of the JSON schema, in the order
of its ``DatasetManifest`` case class, printed by Jackson's default pretty printer (two-space
indent, ``" : "`` between a name and its value, arrays on one line, no final newline); its
``schema`` is a Scala ``immutable.HashMap``, so its keys come in that map's order
(:func:`scala_order`), and it names neither the write mode nor the columns nor the KV
separator. :func:`infer_mode` tells them from a shard's header; :func:`manifest_bytes` prints
a manifest the way the reference does.

Example:
    >>> print(manifest_bytes({"format_version": "1.0", "shards": [],
    ...                       "schema": {"x": {"dtype": "F32", "shape": [2, 3]}}}).decode())
    {
      "format_version" : "1.0",
      "shards" : [ ],
      "schema" : {
        "x" : {
          "dtype" : "F32",
          "shape" : [ 2, 3 ]
        }
      }
    }
    >>> infer_mode({"x": {"dtype": "F32", "shape": [2, 3]}}, 2, [("x", [2, 3])])
    ('batch', ['x'])
    >>> infer_mode({"a__v": {"dtype": "F32", "shape": [3]}}, 1, [("a__v", [3])])
    ('kv', ['v'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.errors import FormatError

__all__ = [
    "KV_SEPARATOR",
    "REFERENCE_DTYPES",
    "infer_mode",
    "java_hash",
    "manifest_bytes",
    "scala_order",
]

KV_SEPARATOR = "__"
"""The reference's default ``kv_separator`` (its manifest does not record the one used)."""

REFERENCE_DTYPES = frozenset(
    ("F16", "F32", "F64", "BF16", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")
)
"""The dtypes the reference writes and its manifest schema allows."""

_MASK32 = 0xFFFFFFFF


# -- reading: the mode and columns a reference manifest does not record ----------------------


def infer_mode(
    schema: dict[str, dict[str, Any]], samples: int, tensors: Sequence[tuple[str, list[int]]]
) -> tuple[str, list[str]]:
    """``(mode, columns)`` of a reference dataset whose shard of ``samples`` rows holds
    ``tensors`` (name, shape; in header order): ``batch`` when its tensors are the schema's
    keys (or the manifest has no schema), each of ``samples`` rows, and are not named as
    ``samples`` keys' tensors are (columns in header order: the reference writes the
    DataFrame's); else
    ``kv``, whose tensor names are ``{key}__{column}`` (columns in the order of a key's
    tensors). A KV name without the separator (a dataset written with another
    ``kv_separator``, which the manifest does not record) is a :class:`FormatError`.

    Example:
        >>> try:
        ...     infer_mode({"a-v": {"dtype": "F32", "shape": [3]}}, 1, [("a-v", [3])])
        ... except FormatError as exc:
        ...     print(str(exc)[:60])
        tensor 'a-v' is neither a batch column (the schema and the h
    """
    names = [n for n, _ in tensors]
    same = set(names) == set(schema) or not schema  # (the schema is optional)
    rows = all(shape[:1] == [samples] for _, shape in tensors)
    if same and rows and not _kv_grid(names, samples):
        return "batch", names
    columns: list[str] = []
    for name in names:
        _, sep, col = name.rpartition(KV_SEPARATOR)
        if not sep or not col:
            raise FormatError(
                f"tensor {name!r} is neither a batch column (the schema and the header "
                f"disagree) nor a KV tensor named {{key}}{KV_SEPARATOR}{{column}}; a KV "
                "dataset written with another kv_separator cannot be read"
            )
        if col not in columns:
            columns.append(col)
    return "kv", columns


def _kv_grid(names: Sequence[str], samples: int) -> bool:
    """Whether ``names`` are ``{key}__{column}`` for ``samples`` keys times some columns:
    a KV shard, even where its tensors' first axis happens to be ``samples`` long."""
    split = [n.rpartition(KV_SEPARATOR) for n in names]
    if not split or any(not sep or not col for _, sep, col in split):
        return False
    keys = {k for k, _, _ in split}
    return len(keys) == samples and len(names) == samples * len({c for _, _, c in split})


# -- writing: the manifest as the reference prints it --------------------------------------


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit integer.

    Example:
        >>> java_hash("x"), java_hash("hello"), java_hash("")
        (120, 99162322, 0)
    """
    h = 0
    for unit in _utf16_units(text):
        h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h >> 31 else h


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-le", "surrogatepass")
    return [raw[i] | raw[i + 1] << 8 for i in range(0, len(raw), 2)]


def _improve(h: int) -> int:
    """Scala 2.13's ``Hashing.improve`` of a 32-bit hash (unsigned result)."""
    h &= _MASK32
    h = (h + (~(h << 9) & _MASK32)) & _MASK32
    h ^= h >> 14
    h = (h + (h << 4)) & _MASK32
    return h ^ (h >> 10)


def scala_order(keys: Sequence[str]) -> list[str]:
    """``keys`` (distinct) in the iteration order of a Scala 2.13 ``immutable.HashMap``
    holding them (a CHAMP trie over the improved hash, five bits a level: a node's own
    entries by slot, then its sub-nodes by slot; equal hashes in insertion order).

    Example:
        >>> scala_order(["x", "y", "label", "image"])
        ['x', 'label', 'image', 'y']
    """
    hashed = [(_improve(java_hash(k)), k) for k in keys]
    return _champ(hashed, 0)


def _champ(entries: list[tuple[int, str]], shift: int) -> list[str]:
    if shift >= 32:  # a collision node: insertion order
        return [k for _, k in entries]
    slots: dict[int, list[tuple[int, str]]] = {}
    for entry in entries:
        slots.setdefault((entry[0] >> shift) & 31, []).append(entry)
    out = [group[0][1] for _, group in sorted(slots.items()) if len(group) == 1]
    for _, group in sorted(slots.items()):
        if len(group) > 1:
            if all(h == group[0][0] for h, _ in group):
                out += [k for _, k in group]
            else:
                out += _champ(group, shift + 5)
    return out


def manifest_bytes(doc: dict[str, Any]) -> bytes:
    """``doc`` printed as the reference prints its manifest: Jackson's default pretty printer
    (UTF-8, no final newline), the ``schema`` object's keys in :func:`scala_order`, the rest
    in the order given."""
    out: list[str] = []
    _value(doc, 0, out, top=True)
    return "".join(out).encode("utf-8")


def _value(value: Any, depth: int, out: list[str], *, top: bool = False) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{ }")
            return
        pad = "  " * (depth + 1)
        keys = list(value)
        out.append("{")
        for i, key in enumerate(keys):
            out.append(("," if i else "") + "\n" + pad + _string(key) + " : ")
            child = value[key]
            if top and key == "schema" and isinstance(child, dict):
                child = {k: child[k] for k in scala_order(list(child))}
            _value(child, depth + 1, out)
        out.append("\n" + "  " * depth + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[ ]")
            return
        out.append("[ ")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _value(item, depth, out)
        out.append(" ]")
    elif isinstance(value, str):
        out.append(_string(value))
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int):
        out.append(str(value))
    else:
        raise TypeError(f"the reference manifest holds no {type(value).__name__}")


_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    """A JSON string as Jackson writes it: ``"`` and ``\\`` escaped, control characters as
    short escapes or ``\\u00XX`` (upper-case hex), everything else as is."""
    parts = ['"']
    for ch in text:
        if ch in _SHORT:
            parts.append(_SHORT[ch])
        elif ord(ch) < 0x20:
            parts.append(f"\\u{ord(ch):04X}")
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)
