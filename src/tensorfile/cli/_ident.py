"""``tensorfile id`` and ``tensorfile summary``: one line per file.

With several files each line names its file: ``id`` prints ``<hash>  <path>`` (as
``sha256sum`` does), ``summary`` puts the path first: ``<path>,<format>,...``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..core.catalog import Catalog
from ..ops import content_hash, load, structural_hash
from ..ops.inspect import not_tensors
from ._each import for_each
from ._output import Output
from ._progress import HASH_DELAY, progress

__all__ = ["SCHEMA", "run_id", "run_summary"]

SCHEMA = 1
"""The ``schema`` of every ``--json`` document the command line prints."""


def _structural(s: Catalog, out: Output) -> str:
    """The structural hash, with a bar on a terminal's stderr when it takes long."""
    with progress(out, "hashing the header", unit="items", delay=HASH_DELAY) as report:
        return structural_hash(s, progress=report)


@dataclass(frozen=True)
class _Ident:
    structure: Catalog
    key: str  # "structural_hash" or "content_hash"
    digest: str
    algorithm: str | None = None  # the content id's per-tensor digest


def run_id(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile id [--content [--digest ALG] [--verify | --trust-stored-digests]]
    PATH...``."""

    allow = args.allow_full_download or None
    algorithm = args.digest or "sha256"

    def read(path: str) -> _Ident:
        s = load(path, allow_full_download=allow)
        if not args.content:
            return _Ident(s, "structural_hash", _structural(s, out))
        with progress(out, "hashing") as report:
            digest = content_hash(
                path,
                report,
                algorithm=algorithm,
                verify=args.verify,
                trust_stored_digests=args.trust_stored_digests,
                allow_full_download=allow,
            )
            return _Ident(s, "content_hash", digest, algorithm)

    def to_json(r: _Ident) -> dict[str, Any]:
        s = r.structure
        doc = {"schema": SCHEMA, "format": s.format, "path": s.path, r.key: r.digest}
        if r.algorithm is not None:
            doc["content_algorithm"] = r.algorithm
        doc.update(tensor_count=len(s.tensors), metadata_count=len(s.metadata))
        return doc

    def show(r: _Ident, label: str | None) -> None:
        out.line(r.digest if label is None else f"{r.digest}  {label}")

    return for_each(args.path, out, read, to_json, show, headings=False)


def run_summary(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile summary PATH...``: ``format,version,tensors,metadata,hash``."""

    allow = args.allow_full_download or None

    def read(path: str) -> tuple[Catalog, str]:
        s = load(path, allow_full_download=allow, key=args.key)
        return s, _structural(s, out)

    def to_json(r: tuple[Catalog, str]) -> dict[str, Any]:
        s, digest = r
        doc = {"schema": SCHEMA, "format": s.format, "path": s.path, "version": s.version,
               "tensor_count": len(s.tensors), "metadata_count": len(s.metadata),
               "structural_hash": digest}  # fmt: skip
        others = not_tensors(r[0])
        if others:  # a PyTorch pickle's entries that are not tensors (in the metadata)
            doc["not_tensor_count"] = len(others)
        return doc

    def show(r: tuple[Catalog, str], label: str | None) -> None:
        s, digest = r
        line = f"{s.format},{s.version or 'N/A'},{len(s.tensors)},{len(s.metadata)},{digest}"
        out.line(line if label is None else f"{label},{line}")

    return for_each(args.path, out, read, to_json, show, headings=False)
