"""``tensorfile dataset gc PATH``: remove what killed writers left in a dataset
(:func:`tensorfile.dataset.gc`) and print what was removed and what was kept, and why; an
fsspec URL is named without its credentials, query string or fragment."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..sources import redact
from ._each import EXIT_OK
from ._output import Output
from ._text import plural

if TYPE_CHECKING:
    from ..dataset.writing.gc import Leftover

__all__ = ["run_dataset_gc"]


def _item(g: Leftover) -> dict[str, object]:
    return {"name": g.name, "what": g.what, "age_seconds": g.age}


def run_dataset_gc(args: argparse.Namespace, out: Output) -> int:
    from ..dataset.writing.gc import DEFAULT_OLDER_THAN, gc, parse_duration  # (not at startup)

    older_than = DEFAULT_OLDER_THAN if args.older_than is None else parse_duration(args.older_than)
    done = gc(args.path, older_than=older_than, dry_run=args.dry_run)
    shown = redact(args.path)
    if out.json_mode:
        out.json(
            {
                "schema": "tensorfile.dataset-gc/1",
                "dataset": shown,
                "dry_run": done.dry_run,
                "older_than_seconds": older_than,
                "removed": [_item(g) for g in done.removed],
                "kept": [_item(g) for g in done.kept],
            }
        )
        return EXIT_OK
    verb = "would remove" if done.dry_run else "removed"
    for g in done.removed:
        out.line(f"{verb:<12}  {g.name}  ({g.what})")
    for g in done.kept:
        out.line(f"{'kept':<12}  {g.name}  ({g.what})")
    done_verb = "would be removed" if done.dry_run else "removed"
    out.line(
        f"{plural(len(done.removed), 'leftover')} {done_verb}, {len(done.kept)} kept in {shown}"
    )
    return EXIT_OK
