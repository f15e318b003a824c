"""Checks of the JSON values of a dataset manifest, each failure a
:class:`~tensorfile.errors.FormatError` saying what is wrong and where (see
:mod:`tensorfile.dataset.layout.manifest` for what is checked).

Example:
    >>> try:
    ...     count(-1, "total_samples", "m.json")
    ... except FormatError as exc:
    ...     print(exc)
    m.json: total_samples must be an integer from 0 to 2**63-1, got -1
"""

from __future__ import annotations

import json
import os
from typing import Any, NoReturn

from ...core.errors import FormatError
from ...formats import SAFETENSORS

__all__ = [
    "MAX_COUNT",
    "MODES",
    "count",
    "fail",
    "kind",
    "parse_json",
    "shard_path",
    "show",
    "tensorfile_block",
]

MAX_COUNT = (1 << 63) - 1
"""The largest count a manifest may hold."""
MODES = ("batch", "kv")
"""The write modes."""


def fail(where: str, what: str) -> NoReturn:
    """Raise the :class:`~tensorfile.errors.FormatError` ``{where}: {what}``."""
    raise FormatError(f"{where}: {what}")


def kind(value: Any) -> str:
    """What a JSON value is, for a message (never the value itself: it may be huge or deep)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if type(value) in (int, float):
        return "a number"
    return names.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    """A short rendering of a JSON scalar (containers by their kind)."""
    if isinstance(value, str | int | float | bool) or value is None:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return kind(value)


def count(value: Any, what: str, where: str) -> int:
    """``value`` if it is an integer (not a boolean or a float) from 0 to 2**63-1."""
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        fail(where, f"{what} must be an integer from 0 to 2**63-1, got {show(value)}")
    return int(value)


def shard_path(value: Any, what: str, where: str) -> str:
    """``value`` if it is a relative ``.safetensors`` path that stays inside the folder.

    Example:
        >>> try:
        ...     shard_path("../x.safetensors", "shard 0", "m.json")
        ... except FormatError as exc:
        ...     print(exc)
        m.json: shard 0 shard_path '../x.safetensors' leaves the dataset folder
    """
    if not isinstance(value, str) or not value:
        fail(where, f"{what} shard_path must be a non-empty string, got {show(value)}")
    if len(value) > 4096 or "\0" in value:
        fail(where, f"{what} shard_path {show(value)} is not a file name")
    if not value.endswith(SAFETENSORS.suffixes):
        fail(where, f"{what} shard_path {show(value)} does not end in {SAFETENSORS.suffixes[0]}")
    if os.path.isabs(value) or any(p in ("", ".", "..") for p in value.split("/")):
        fail(where, f"{what} shard_path {show(value)} leaves the dataset folder")
    return value


def _no_constant(name: str) -> NoReturn:
    raise FormatError(f"{name} is not a JSON number")


def parse_json(raw: bytes, where: str) -> Any:
    """``raw`` as JSON, with every failure (syntax, encoding, NaN or infinities, integers too
    long to convert, nesting that would exhaust the stack) a
    :class:`~tensorfile.errors.FormatError` naming ``where``.

    Example:
        >>> try:
        ...     parse_json(b"[" * 100_000, "m.json")
        ... except FormatError as exc:
        ...     print(exc)
        m.json nests too deeply to be a manifest
    """
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise FormatError(f"{where} nests too deeply to be a manifest") from None
    except FormatError as exc:
        raise FormatError(f"{where} is not valid JSON: {exc}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digits limit
        raise FormatError(f"{where} is not valid JSON: {exc}") from None


def tensorfile_block(raw: Any, where: str) -> dict[str, Any]:
    """The ``tensorfile`` object (every field optional; absent: a batch-mode dataset)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        fail(where, f"tensorfile is {kind(raw)}, not an object")
    mode = raw.get("mode") or "batch"
    if mode not in MODES:
        fail(where, f"tensorfile.mode {show(mode)} is not 'batch' or 'kv'")
    columns = raw.get("columns") or []
    if not isinstance(columns, list) or not all(isinstance(c, str) and c for c in columns):
        fail(where, "tensorfile.columns must be an array of column names")
    if len(set(columns)) != len(columns):
        fail(where, "tensorfile.columns names a column twice")
    sep = raw.get("kv_separator", "__")
    if not isinstance(sep, str) or not sep:
        fail(where, f"tensorfile.kv_separator {show(sep)} is not a non-empty string")
    name_col = raw.get("name_col")
    if name_col is not None and not isinstance(name_col, str):
        fail(where, f"tensorfile.name_col {show(name_col)} is not a string")
    return {
        "mode": mode,
        "columns": list(columns),
        "kv_separator": sep,
        "name_col": name_col or None,
        "real_samples": raw.get("real_samples"),
        "dtypes": raw.get("dtypes"),
    }
