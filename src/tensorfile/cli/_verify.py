"""``tensorfile verify``: check files and checkpoints, print what holds and what does not.

Status 0 when every rule holds for every path, 1 when something fails (the first failing
tensor and its rule on stderr; every failure in ``--json``), 2 when a path cannot be read
at all (with several paths: after the others were verified). A rule failing for more than
:data:`~tensorfile.ops.verify.GROUP_OVER` subjects is one line (how many, the first and
last) and the first one's message, not a line each; ``--json`` lists every failure and the
groups beside. Tensors no stored digest covers, in a file whose digests cover others (or
with ``--strict``, in any file), fail rule ``uncovered``: one line names them
(``2 tensors not covered by a digest: a, b``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.digests import not_covered
from ..ops.verify import FailureGroup, VerifyReport, verify
from ._each import EXIT_OK, for_each
from ._output import Output
from ._progress import progress
from ._text import plural

__all__ = ["run_verify"]

EXIT_FAILED = 1


def _json(r: VerifyReport) -> dict[str, Any]:
    return {
        "schema": "tensorfile.verify/1",
        "path": r.path,
        "format": r.format,
        "shards": r.shards,
        "ok": r.ok,
        "deep": r.deep,
        "strict": r.strict,
        "tensors_checked": r.tensors_checked,
        "failures": [
            {"subject": f.subject, "rule": f.rule, "message": f.message} for f in r.failures
        ],
        "groups": [
            {
                "rule": g.rule,
                "count": len(g.failures),
                "summary": g.summary,
                "first": g.first.subject,
                "last": g.last.subject,
            }
            for g in r.grouped()
            if isinstance(g, FailureGroup)
        ],
        "stats": [
            {"name": s.name, "nan": s.nan, "inf": s.inf, "bad_bool": s.bad_bool} for s in r.stats
        ],
        "digests_checked": r.digests_checked,
        "uncovered": list(r.uncovered),
        "tensors": [{"name": c.name, "checked": list(c.checked)} for c in r.checks],
    }


def _what(r: VerifyReport) -> str:
    """What an OK verdict means for this file, in words."""
    parts = ["structure and every byte read"]
    if r.digests_checked:
        kind = " (the zip's CRC-32s)" if r.format == "npz" else ""
        parts.append(f"{plural(r.digests_checked, 'digest')} compared{kind}")
    if r.deep:
        parts.append("values checked (NaN/Inf, BOOL)")
    said = ", ".join(parts)
    if not r.digests_checked and r.tensors_checked:
        said += "; the file stores no digests, so changed bytes of valid values cannot be seen"
    return said


def run_verify(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile verify PATH... [--deep] [--strict]``."""
    reports: list[VerifyReport] = []

    allow = args.allow_full_download or None

    def read(path: str) -> VerifyReport:
        with progress(out, "verifying", unit="items") as report:
            r = verify(
                path,
                deep=args.deep,
                strict=args.strict,
                progress=report,
                allow_full_download=allow,
            )
        reports.append(r)
        return r

    def show(r: VerifyReport, label: str | None) -> None:
        kind = f"{r.format}, {plural(r.shards, 'shard')}" if r.shards else r.format
        if r.ok:
            n = plural(r.tensors_checked, "tensor")
            out.line(f"{r.path}: OK ({kind}, {n}: {_what(r)})")
            return
        out.line(
            f"{r.path}: FAILED ({kind}, {plural(len(r.failures), 'failure')}, "
            f"{plural(r.tensors_checked, 'tensor')} read)"
        )
        grouped = False
        uncovered = [f.subject for f in r.failures if f.rule == "uncovered"]
        for f in r.grouped():
            if f.rule == "uncovered":  # one line, however many, naming them
                if isinstance(f, FailureGroup) or f.subject == uncovered[0]:
                    out.line(f"  uncovered: {not_covered(uncovered)}")
            elif isinstance(f, FailureGroup):
                grouped = True
                out.line(f"  {f.rule}: {f.summary}")
                out.line(f"    {f.first.subject}: {f.first.message}")
            else:
                out.line(f"  {f.subject}: {f.rule}: {f.message}")
        if grouped:
            out.line("  (--json lists every failure)")

    status = for_each(args.path, out, read, _json, show, headings=False)
    bad = [r for r in reports if not r.ok]
    for r in bad:
        first = r.failures[0]
        out.error(f"{r.path}: {first.subject} fails rule {first.rule}: {first.message}")
    if status != EXIT_OK:
        return status
    return EXIT_FAILED if bad else EXIT_OK
