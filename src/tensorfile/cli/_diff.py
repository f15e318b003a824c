"""``tensorfile diff`` and ``tensorfile meta``: render comparisons and metadata edits."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from ..core.errors import InvalidArgumentError
from ..ops import diff, edit_metadata, read_metadata
from ..ops.diff import DiffResult
from ._inspect import meta_text
from ._output import Output

__all__ = ["run_diff", "run_meta"]


def _v(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)


def run_diff(args: argparse.Namespace, out: Output) -> int:
    r = diff(args.a, args.b, data=args.data)
    if out.json_mode:
        out.json(r.to_json())
    elif args.format == "md":
        for line in _markdown(r):
            out.line(line)
    else:
        for line in _text(r):
            out.line(line)
    return 1 if args.fail_on_diff and not r.identical else 0


def _text(r: DiffResult) -> list[str]:
    lines = [f"a: {r.a}", f"b: {r.b}"]
    n_changed = len({c.name for c in r.changed})
    lines.append(f"tensors: {len(r.added)} added, {len(r.removed)} removed, {n_changed} changed")
    lines += [f"  + {name}" for name in r.added]
    lines += [f"  - {name}" for name in r.removed]
    lines += [f"  ~ {c.name}: {c.field} {_v(c.a)} -> {_v(c.b)}" for c in r.changed]
    n_meta = len(r.metadata_added) + len(r.metadata_removed) + len(r.metadata_changed)
    lines.append(
        f"metadata: {len(r.metadata_added)} added, {len(r.metadata_removed)} removed, "
        f"{len(r.metadata_changed)} changed"
    )
    lines += [f"  + {k}: {_v(v)}" for k, v in r.metadata_added.items()]
    lines += [f"  - {k}: {_v(v)}" for k, v in r.metadata_removed.items()]
    lines += [f"  ~ {k}: {_v(a)} -> {_v(b)}" for k, (a, b) in r.metadata_changed.items()]
    if r.data is not None:
        lines.append(f"data: {len(r.data)} of {r.compared} compared tensors differ")
        for d in r.data:
            how = "" if d.max_abs_diff is None else f", max |a - b| = {d.max_abs_diff:g}"
            lines.append(f"  ~ {d.name}: {d.differing_elements:,} elements differ{how}")
    _ = n_meta
    lines.append("identical" if r.identical else "the files differ")
    return lines


def _code(text: str) -> str:
    """``text`` as a markdown code span that a table survives: a fence longer than any run
    of backticks in it, ``|`` escaped (GitHub's tables need that even in code).

    Example:
        >>> _code("a|b"), _code("x`y")
        ('`a\\\\|b`', '`` x`y ``')
    """
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""
    body = text.replace("|", "\\|")
    return f"{fence}{pad}{body}{pad}{fence}"


_MD_SPECIAL = re.compile(r"([\\|<>`*_])")


def _cell(text: str) -> str:
    """A table cell's text with markdown's special characters escaped (no HTML, no table
    break, no emphasis)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def _markdown(r: DiffResult) -> list[str]:
    lines = [f"## diff {_code(r.a)} → {_code(r.b)}", ""]
    if r.identical:
        return [*lines, "Identical."]
    if r.added or r.removed or r.changed:
        lines += ["| tensor | change | a | b |", "|---|---|---|---|"]
        lines += [f"| {_code(n)} | added | | |" for n in r.added]
        lines += [f"| {_code(n)} | removed | | |" for n in r.removed]
        lines += [
            f"| {_code(c.name)} | {c.field} | {_cell(_v(c.a))} | {_cell(_v(c.b))} |"
            for c in r.changed
        ]
        lines.append("")
    if r.metadata_added or r.metadata_removed or r.metadata_changed:
        lines += ["| metadata key | change | a | b |", "|---|---|---|---|"]
        lines += [f"| {_code(k)} | added | | {_cell(_v(v))} |" for k, v in r.metadata_added.items()]
        lines += [
            f"| {_code(k)} | removed | {_cell(_v(v))} | |" for k, v in r.metadata_removed.items()
        ]
        lines += [
            f"| {_code(k)} | changed | {_cell(_v(a))} | {_cell(_v(b))} |"
            for k, (a, b) in r.metadata_changed.items()
        ]
        lines.append("")
    if r.data:
        lines += ["| tensor | differing elements | max abs diff |", "|---|---:|---:|"]
        lines += [
            f"| {_code(d.name)} | {d.differing_elements:,} | "
            f"{'' if d.max_abs_diff is None else f'{d.max_abs_diff:g}'} |"
            for d in r.data
        ]
    return lines


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
    ``\\udcff`` one, so that no output line fails to encode."""
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
    path = _printable(args.path)
    if not (args.set or args.delete or args.clear):
        meta = _printable(read_metadata(args.path))
        if out.json_mode:
            out.json({"schema": 1, "path": path, "metadata": meta})
        else:
            for key in sorted(meta):
                out.line(f"{key}: {meta_text(meta[key])}")
        return 0
    r = edit_metadata(args.path, set=_pairs(args.set), delete=args.delete, clear=args.clear)
    after = _printable(r.after)
    if out.json_mode:
        out.json({"schema": 1, "path": path, "metadata": after, "before": _printable(r.before),
                  "method": r.method, "files": _printable(r.paths)})  # fmt: skip
    else:
        how = "cloned" if r.method == "reflink" else "copied"
        out.line(f"updated {len(r.paths)} file(s) atomically (tensor bytes {how})")
        for key in sorted(after):
            out.line(f"{key}: {meta_text(after[key])}")
    return 0
