"""``tensorfile samples DIR``: write the sample files the documentation's examples use
(:mod:`tensorfile.samples`) and print what was done with each."""

from __future__ import annotations

import argparse
import os

from ..samples import make
from ._each import EXIT_OK
from ._output import Output
from ._text import plural

__all__ = ["run_samples"]


def run_samples(args: argparse.Namespace, out: Output) -> int:
    written = make(args.dir, force=args.force)
    if out.json_mode:
        out.json(
            {
                "schema": "tensorfile.samples/1",
                "folder": args.dir,
                "files": [{"name": w.name, "action": w.action, "bytes": w.size} for w in written],
            }
        )
        return EXIT_OK
    for w in written:
        path = os.path.join(args.dir, w.name)
        shown = path + os.sep if os.path.isdir(path) else path
        out.line(f"{w.action:<9} {shown}  ({plural(w.size, 'byte')})")
    return EXIT_OK
