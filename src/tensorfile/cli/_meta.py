"""``tensorfile meta``: print metadata, or edit it (``--set``, ``--delete``, ``--clear``).

With several files an edit is applied to each in turn, each atomically (a new file renamed
into place); a file that cannot be edited is reported and left as it was, and the others are
still edited. The values an edit echoes back are cut to :data:`~._values.VALUE_LIMIT`
characters (``'xxxx…' (51,200 characters)``); printing (no edit) shows them whole.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import InvalidArgumentError
from ..ops import edit_metadata, load
from ..ops.metadata import MetadataEdit
from ..sources import redact
from ._each import for_each
from ._ident import SCHEMA
from ._output import Output
from ._text import natural_sorted, plural
from ._values import VALUE_LIMIT, plain_metadata, value_text

__all__ = ["run_meta"]


def _pairs(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise InvalidArgumentError(f"--set expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _printable(value: Any) -> Any:
    """``value`` with every string made printable: a file name's non-UTF-8 bytes (which
    Python reads as lone surrogates) become ``\\xff`` escapes, any other lone surrogate a
    ``\\udcff`` one, so that no output line fails to encode.

    Example:
        >>> _printable({"a\\udcff": ["b"]})
        {'a\\\\xff': ['b']}
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            try:
                raw = value.encode("utf-8", "surrogateescape")
                return raw.decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:
                return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


def run_meta(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile meta PATH... [--set K=V] [--delete K] [--clear]``."""
    if not (args.set or args.delete or args.clear):
        return _print(args, out)
    changes = _pairs(args.set)  # a malformed K=V is refused before any file is touched

    def edit(path: str) -> tuple[str, MetadataEdit]:
        return path, edit_metadata(path, set=changes, delete=args.delete, clear=args.clear)

    def to_json(e: tuple[str, MetadataEdit]) -> dict[str, Any]:
        path, r = e
        return {"schema": SCHEMA, "path": _printable(redact(path)),
                "metadata": _printable(r.after), "before": _printable(r.before),
                "method": r.method, "files": _printable(r.paths)}  # fmt: skip

    def show(e: tuple[str, MetadataEdit], _label: str | None) -> None:
        _, r = e
        after = _printable(r.after)
        how = "cloned" if r.method == "reflink" else "copied"
        out.line(f"updated {plural(len(r.paths), 'file')} atomically (tensor bytes {how})")
        for key in natural_sorted(after):
            out.line(f"{key}: {value_text(after[key], VALUE_LIMIT)}")

    return for_each(args.path, out, edit, to_json, show, failure="could not be edited")


def _print(args: argparse.Namespace, out: Output) -> int:
    def read(path: str) -> tuple[str, dict[str, Any]]:
        s = load(path, allow_full_download=args.allow_full_download or None)
        return s.path or path, _printable(plain_metadata(s.metadata))

    def to_json(r: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        return {"schema": SCHEMA, "path": _printable(r[0]), "metadata": r[1]}

    def show(r: tuple[str, dict[str, Any]], _label: str | None) -> None:
        meta = r[1]
        for key in natural_sorted(meta):
            out.line(f"{key}: {value_text(meta[key])}")

    return for_each(args.path, out, read, to_json, show)
