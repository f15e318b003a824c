"""``tensorfile diff`` and ``tensorfile meta``: render comparisons and metadata edits."""

from __future__ import annotations

import argparse
import json
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


def _markdown(r: DiffResult) -> list[str]:
    lines = [f"## diff `{r.a}` → `{r.b}`", ""]
    if r.identical:
        return [*lines, "Identical."]
    if r.added or r.removed or r.changed:
        lines += ["| tensor | change | a | b |", "|---|---|---|---|"]
        lines += [f"| `{n}` | added | | |" for n in r.added]
        lines += [f"| `{n}` | removed | | |" for n in r.removed]
        lines += [f"| `{c.name}` | {c.field} | {_v(c.a)} | {_v(c.b)} |" for c in r.changed]
        lines.append("")
    if r.metadata_added or r.metadata_removed or r.metadata_changed:
        lines += ["| metadata key | change | a | b |", "|---|---|---|---|"]
        lines += [f"| `{k}` | added | | {_v(v)} |" for k, v in r.metadata_added.items()]
        lines += [f"| `{k}` | removed | {_v(v)} | |" for k, v in r.metadata_removed.items()]
        lines += [
            f"| `{k}` | changed | {_v(a)} | {_v(b)} |" for k, (a, b) in r.metadata_changed.items()
        ]
        lines.append("")
    if r.data:
        lines += ["| tensor | differing elements | max abs diff |", "|---|---:|---:|"]
        lines += [
            f"| `{d.name}` | {d.differing_elements:,} | "
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


def run_meta(args: argparse.Namespace, out: Output) -> int:
    if not (args.set or args.delete or args.clear):
        meta = read_metadata(args.path)
        if out.json_mode:
            out.json({"schema": 1, "path": args.path, "metadata": meta})
        else:
            for key in sorted(meta):
                out.line(f"{key}: {meta_text(meta[key])}")
        return 0
    r = edit_metadata(args.path, set=_pairs(args.set), delete=args.delete, clear=args.clear)
    if out.json_mode:
        out.json({"schema": 1, "path": args.path, "metadata": r.after, "before": r.before,
                  "in_place": r.in_place, "files": list(r.paths)})  # fmt: skip
    else:
        how = "in place" if r.in_place else "by rewriting the file"
        out.line(f"updated {len(r.paths)} file(s) {how}")
        for key in sorted(r.after):
            out.line(f"{key}: {meta_text(r.after[key])}")
    return 0
