"""``tensorfile dataset gc PATH``: remove what killed writers left in a dataset
(:func:`tensorfile.dataset.gc`) and print what was removed and what was kept, and why; an
fsspec URL is named without its credentials, query string or fragment.
``tensorfile dataset from-parquet|from-hf SOURCE... OUT``: write a dataset from parquet files
or a Hugging Face dataset's folder (:func:`tensorfile.dataset.from_parquet`,
:func:`~tensorfile.dataset.from_hf`) and print what was written."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..sources import redact
from ._each import EXIT_OK
from ._output import Output
from ._text import plural

if TYPE_CHECKING:
    from ..dataset.writing.gc import Leftover

__all__ = ["run_dataset_from", "run_dataset_gc"]


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


def run_dataset_from(args: argparse.Namespace, out: Output) -> int:
    from ..dataset import from_hf, from_parquet  # (not at startup)

    options = {
        "batch_size": args.batch_size,
        "name_col": args.name_col,
        "columns": args.columns,
        "dtype": args.dtype,
        "shapes": args.shapes,
        "tail_strategy": args.tail_strategy,
    }
    options = {k: v for k, v in options.items() if v is not None}
    if args.chunk_mb is not None:
        options["chunk_mb"] = args.chunk_mb
    if args.kind == "hf":
        options["split"] = args.split
    convert = from_parquet if args.kind == "parquet" else from_hf
    manifest = convert(args.sources, args.out, mode=args.mode, **options)
    shown = redact(args.out)
    schema = manifest.sample_schema()
    if out.json_mode:
        out.json(
            {
                "schema": "tensorfile.dataset-from/1",
                "dataset": shown,
                "samples": manifest.real_total,
                "shards": len(manifest.shards),
                "columns": schema,
            }
        )
        return EXIT_OK
    for name, info in schema.items():
        out.line(f"{name:<12}  {info['dtype']:<5} {info['shape']}")
    out.line(
        f"wrote {plural(manifest.real_total, 'sample')} in "
        f"{plural(len(manifest.shards), 'shard')} to {shown}"
    )
    return EXIT_OK
