"""``tensorfile convert SRC DST``: anything the registry reads in, any format it writes out
(safetensors, zTensor v1.0/v2, npz, npy: :data:`TARGETS`, from the registry; see
:mod:`tensorfile.ops.convert`); a table, or ``--json``."""

from __future__ import annotations

import argparse
from typing import Any

from ..ops.convert import ConvertResult, convert, targets
from ._output import Output, human_bytes
from ._progress import progress
from ._text import plural

__all__ = ["TARGETS", "run_convert"]

TARGETS = tuple(targets())
"""The ``--to`` choices: the registry's writable formats and aliases (``zt``, ``zt2``)."""


def _json(r: ConvertResult) -> dict[str, Any]:
    return {
        "schema": "tensorfile.convert/1",
        "src": r.src,
        "dst": r.dst,
        "source_format": r.source_format,
        "destination_format": r.destination_format,
        "tensors": r.tensors,
        "bytes_in": r.bytes_in,
        "bytes_out": r.bytes_out,
        "files": list(r.files),
        "densified": list(r.densified),
        "notes": list(r.notes),
    }


def run_convert(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile convert SRC DST [options]``."""
    with progress(out, "converting") as report:
        r = convert(
            args.src,
            args.dst,
            to=args.to,
            compression=args.compression,
            level=args.level,
            checksum=args.checksum,
            align=args.align,
            shard_size=args.shard_size,
            densify=args.densify,
            progress=report,
            allow_full_download=args.allow_full_download or None,
            key=args.key,
        )
    if out.json_mode:
        out.json(_json(r))
        return 0
    out.line(
        f"{r.src} ({r.source_format}) -> {r.dst} ({r.destination_format}): "
        f"{plural(r.tensors, 'tensor')}, {human_bytes(r.bytes_in)} of tensor data, "
        f"{human_bytes(r.bytes_out)} written"
    )
    if len(r.files) > 1:
        out.line(f"files: {', '.join(r.files)}")
    if r.densified:
        out.line(f"densified: {', '.join(r.densified)}")
    for note in r.notes:
        out.line(f"note: {note}")
    return 0
