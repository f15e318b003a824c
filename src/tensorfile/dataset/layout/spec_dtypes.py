"""The dtypes of a manifest's ``schema``, kept valid against the spec's JSON schema.

The manifest JSON schema of the Spark spec allows twelve dtypes in a schema entry
(:data:`SPEC_DTYPES`: F16, F32, F64, BF16 and the 8- to 64-bit integers). tensorfile writes
datasets of every safetensors dtype, BOOL and the F8 types among them. For a column of any
other dtype, the manifest's schema entry holds a **stand-in** from the spec's set
(:func:`stand_in`: the unsigned integer of the same element size, U8 for BOOL and the F8
types, U64 for C64; U8 for the bit-packed F4/F6 types, which no spec dtype matches), and the
manifest's ``tensorfile`` field records the real dtype per column::

    "schema": {"mask": {"dtype": "U8", "shape": [1024, 3]}},
    "tensorfile": {"dtypes": {"mask": "BOOL"}, ...}

A reader of the reference sees a valid manifest (and the shards' headers, which always carry
the real dtype); tensorfile's readers (:func:`tensorfile.dataset.open`, the Spark data source,
the shard-header checks) see the real dtype: :meth:`Manifest.from_json
<tensorfile.dataset.manifest.Manifest.from_json>` puts it back into the schema with
:func:`decode`, after checking it (a known dtype, for a column of the dataset, whose stand-in
is what the schema entry says). A manifest that holds the real dtype in the schema itself
(older tensorfile versions wrote BOOL there) is still read.

Example:
    >>> doc, real = encode({"mask": {"dtype": "BOOL", "shape": [4, 3]},
    ...                     "x": {"dtype": "F32", "shape": [4]}}, {"mask": "mask", "x": "x"})
    >>> doc["mask"], real
    ({'dtype': 'U8', 'shape': [4, 3]}, {'mask': 'BOOL'})
    >>> decode(doc, real, {"mask": "mask", "x": "x"}, "the manifest")["mask"]["dtype"]
    'BOOL'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core import dtypes
from ._json import fail as _fail
from ._json import kind as _kind
from ._json import show as _show

__all__ = ["SPEC_DTYPES", "decode", "encode", "stand_in"]

SPEC_DTYPES: frozenset[str] = frozenset(
    ("F16", "F32", "F64", "BF16", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")
)
"""The dtypes the manifest JSON schema's ``dtype`` pattern allows."""

_BY_BYTES = {1: "U8", 2: "U16", 4: "U32", 8: "U64"}
_WHAT = "tensorfile.dtypes"


def stand_in(dtype: str) -> str:
    """The dtype the manifest's schema field holds for safetensors dtype ``dtype``: itself
    when the JSON schema allows it, else the unsigned integer of the same element size (U8
    for the bit-packed types and any other size).

    Example:
        >>> [stand_in(d) for d in ("F32", "BF16", "BOOL", "F8_E4M3", "F4", "C64")]
        ['F32', 'BF16', 'U8', 'U8', 'U8', 'U64']
    """
    if dtype in SPEC_DTYPES:
        return dtype
    bits = dtypes.from_safetensors(dtype).bits
    return _BY_BYTES.get(bits // 8, "U8")


def encode(
    schema: Mapping[str, Mapping[str, Any]], column_of: Mapping[str, str]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The schema as written (stand-ins for the dtypes the JSON schema lacks) and the real
    dtype of each such column (``column_of`` maps a schema key to its column).

    Example:
        >>> encode({"k__v": {"dtype": "C64", "shape": [2]}}, {"k__v": "v"})
        ({'k__v': {'dtype': 'U64', 'shape': [2]}}, {'v': 'C64'})
    """
    doc: dict[str, dict[str, Any]] = {}
    real: dict[str, str] = {}
    for key, info in schema.items():
        dtype = info["dtype"]
        written = stand_in(dtype)
        if written != dtype:
            real[column_of.get(key, key)] = dtype
        doc[key] = {**info, "dtype": written}
    return doc, real


def decode(
    schema: dict[str, dict[str, Any]],
    raw: Any,
    column_of: Mapping[str, str],
    where: str,
) -> dict[str, dict[str, Any]]:
    """``schema`` (as read, checked) with the real dtypes of ``tensorfile.dtypes`` (``raw``,
    absent or null: none). Each must be a known dtype naming a column of the dataset (a
    value of ``column_of``), and every schema entry of that column must hold its stand-in
    (or the real dtype itself); anything else is a
    :class:`~tensorfile.errors.FormatError` naming ``where``.

    Example:
        >>> from tensorfile.errors import FormatError
        >>> try:
        ...     decode({"x": {"dtype": "F32", "shape": []}}, {"x": "BOOL"}, {"x": "x"}, "m.json")
        ... except FormatError as exc:
        ...     for part in str(exc).split("; "):
        ...         print(part)
        m.json: tensorfile.dtypes says column 'x' is BOOL, whose schema entry should then say U8
        schema entry 'x' says F32
    """
    if raw is None:
        return schema
    if not isinstance(raw, dict):
        _fail(where, f"{_WHAT} is {_kind(raw)}, not an object of column names and dtypes")
    known = set(column_of.values())
    for col, dtype in raw.items():
        if col not in known:
            _fail(where, f"{_WHAT} names {_show(col)}, which is not a column the schema describes")
        if not isinstance(dtype, str) or dtype not in dtypes.SAFETENSORS_NAMES:
            _fail(
                where,
                f"{_WHAT} gives column {col!r} the dtype {_show(dtype)}, which safetensors "
                "does not define",
            )
    out: dict[str, dict[str, Any]] = {}
    for key, info in schema.items():
        col = column_of[key]
        real = raw.get(col)
        if real is None or info["dtype"] == real:
            out[key] = info
            continue
        want = stand_in(real)
        if info["dtype"] != want:
            _fail(
                where,
                f"{_WHAT} says column {col!r} is {real}, whose schema entry should then say "
                f"{want}; schema entry {key!r} says {info['dtype']}",
            )
        out[key] = {**info, "dtype": real}
    return out
