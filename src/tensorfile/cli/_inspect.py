"""``tensorfile inspect``: render what :func:`tensorfile.ops.inspect` found.

Tensors are listed in natural order (``layers.2`` before ``layers.10``), in the table, the
tree and ``--json`` alike; metadata values are cut to :data:`~._values.VALUE_LIMIT`
characters unless ``--verbose``; a table with no rows is not drawn. The table's ``file
offsets`` are absolute offsets in the file for every format (see
:func:`~tensorfile.ops.inspect.file_offsets`), so ``safetensors`` and zTensor rows mean the
same thing; ``--json`` has them as ``offset`` beside the header's own ``data_offsets``. A
file without a header (an npz archive, a PyTorch pickle: ``header_size`` 0) has no
``header`` count in the text. A file with quantized tensors (GGUF) has its tensor data
counted as stored and, beside it, dequantized: the figure ``convert`` reports.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..core.catalog import TensorInfo
from ..ops import inspect
from ..ops.inspect import (
    InspectResult,
    ModuleGroup,
    file_offsets,
    module_tree,
    not_tensors_text,
)
from ._each import for_each
from ._output import Output, human_bytes, printable
from ._progress import HASH_DELAY, progress
from ._text import natural_key, natural_sorted, plural
from ._values import VALUE_LIMIT, plain_metadata, value_text

__all__ = ["cell", "inspect_json", "label", "run_inspect"]

DEFAULT_ROWS = 200


def _shape(t: TensorInfo) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _name(t: TensorInfo) -> str:
    return t.name


def cell(text: str) -> Text:
    """A table cell: :func:`printable` text, never read as markup.

    Example:
        >>> cell("[bold]w\\x1b[2J").plain
        '[bold]w\\\\x1b[2J'
    """
    return Text(printable(text))


def label(text: str) -> Text:
    """A tree label: :func:`printable` text, folded over lines rather than cut at the
    terminal's width (a long module path keeps its dtype and counts).

    Example:
        >>> label("a.b\\u202e").plain, label("x").overflow
        ('a.b\\\\u202e', 'fold')
    """
    return Text(printable(text), overflow="fold", no_wrap=False)


def inspect_json(r: InspectResult) -> dict[str, Any]:
    """The ``--json`` document of one file: :meth:`InspectResult.to_json`, its tensors in
    natural order and float32 metadata values at their own precision.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> save_file({f"l.{i}": np.zeros(1, np.int8) for i in (10, 9)}, path)
        >>> [t["name"] for t in inspect_json(inspect(path))["tensors"]]
        ['l.9', 'l.10']
    """
    doc = r.to_json()
    doc["metadata"] = plain_metadata(r.metadata)
    doc["tensors"] = natural_sorted(doc["tensors"], key=lambda t: t["name"])
    return doc


def run_inspect(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile inspect PATH...``."""

    allow = args.allow_full_download or None

    def read(path: str) -> InspectResult:
        with progress(out, "hashing the header", unit="items", delay=HASH_DELAY) as report:
            return inspect(path, progress=report, allow_full_download=allow, key=args.key)

    def show(r: InspectResult, _label: str | None) -> None:
        _header(r, out, verbose=args.verbose)
        if args.tree:
            out.render(_tree(module_tree(r.tensors), r, out.console.width))
        else:
            _tensors(r, out, verbose=args.verbose)

    return for_each(args.path, out, read, inspect_json, show)


def _header(r: InspectResult, out: Output, *, verbose: bool) -> None:
    version = f" {r.version}" if r.version else ""
    out.line(f"{r.format}{version}  {r.path}")
    header = f"header {plural(r.header_size, 'byte')} · " if r.header_size else ""
    data = f"{human_bytes(r.total_bytes)} of tensor data"
    if r.dequantized_bytes != r.total_bytes:  # what convert's figure counts
        data += f" as stored ({human_bytes(r.dequantized_bytes)} dequantized, as converted)"
    out.line(
        f"{header}{plural(r.tensor_count, 'tensor')} · "
        f"{plural(r.parameter_count, 'parameter')} · {data}"
    )
    out.line(f"structural hash {r.structural_hash}")
    if r.shards:
        out.line(f"{plural(len(r.shards), 'shard')}:")
        for s in r.shards:
            out.line(f"  {os.path.basename(s.path)}  {plural(s.tensor_count, 'tensor')}, "
                     f"{human_bytes(s.total_bytes)}")  # fmt: skip
    limit = None if verbose else VALUE_LIMIT
    meta = plain_metadata(r.metadata, limit)
    if meta:
        out.line(f"metadata ({len(meta):,}):")
        for key in natural_sorted(meta):
            out.line(f"  {key}: {value_text(meta[key], limit)}")
    else:
        out.line("no metadata")
    if r.not_tensors:  # a PyTorch pickle's other entries (their values are the metadata)
        text = not_tensors_text(r.not_tensors, None if verbose else 8)
        out.line(f"not tensors ({len(r.not_tensors):,}, kept as metadata): {text}")
    if not r.parameters_by_dtype:  # no tensors: no table of nothing
        return
    table = Table(title=None, show_edge=False)
    table.add_column("dtype")
    table.add_column("parameters", justify="right")
    table.add_column("bytes", justify="right")
    for dt, n in r.parameters_by_dtype.items():
        table.add_row(cell(dt), f"{n:,}", f"{r.bytes_by_dtype[dt]:,}")
    out.render(table)


def _tensors(r: InspectResult, out: Output, *, verbose: bool) -> None:
    if not r.tensors:
        return
    table = Table(show_edge=False)
    table.add_column("name", overflow="fold")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("bytes", justify="right")
    table.add_column("file offsets", justify="right", no_wrap=True)
    if r.shards:
        table.add_column("shard", overflow="fold")
    ordered = natural_sorted(r.tensors, key=_name)
    shown = ordered if verbose or len(ordered) <= DEFAULT_ROWS else ordered[:DEFAULT_ROWS]
    for t in shown:
        start, end = file_offsets(t)
        notes = [n for n in (t.layout, t.encoding) if n not in ("dense", "quantized", "raw")]
        extra = f" ({', '.join(notes)})" if notes else ""
        row = [
            cell(t.name), cell(r.dtype_of(t) + extra), cell(_shape(t)), cell(f"{t.nbytes:,}"),
            cell(f"[{start}, {end})"),
        ]  # fmt: skip
        if r.shards:
            row.append(cell(os.path.basename(t.file) if t.file else ""))
        table.add_row(*row)
    out.render(table)
    if len(shown) < len(r.tensors):
        more = plural(len(r.tensors) - len(shown), "more tensor")
        out.line(f"... {more} (--verbose lists them all)")


TREE_DEPTH = 16
"""Module levels ``inspect --tree`` draws; deeper groups are listed flat under the last one
drawn, with a note (each level takes 4 columns of guides)."""


def _prefix(g: ModuleGroup) -> str:
    return g.prefix


def _tree(root: ModuleGroup, r: InspectResult, width: int) -> Tree:
    tree = Tree(label(f"{os.path.basename(r.path)}  {plural(root.parameters, 'parameter')}"))
    depth_limit = max(1, min(TREE_DEPTH, (width - 40) // 4))
    stack: list[tuple[Tree, ModuleGroup, int]] = [(tree, root, 0)]
    while stack:  # no recursion: a file can nest names as deep as it likes
        node, group, depth = stack.pop()
        cut = len(group.prefix) + 1 if group.prefix else 0
        if depth >= depth_limit and group.children:
            _flat(node, group, cut, r)
            continue
        for child in natural_sorted(group.children, key=_prefix):
            text = (
                f"{child.prefix[cut:]}  {plural(child.parameters, 'parameter')}, "
                f"{human_bytes(child.bytes)}"
            )
            stack.append((node.add(label(text)), child, depth + 1))
        for t in natural_sorted(group.tensors, key=_name):
            node.add(label(f"{t.name[cut:]}  {r.dtype_of(t)} {_shape(t)}  {t.numel:,}"))
    return tree


def _flat(node: Tree, group: ModuleGroup, cut: int, r: InspectResult) -> None:
    """Every tensor below ``group``, one line each, after a note saying why."""
    tensors: list[TensorInfo] = []
    pending = [group]
    while pending:
        g = pending.pop()
        tensors.extend(g.tensors)
        pending.extend(g.children)
    node.add(label(f"({plural(len(tensors), 'tensor')} in modules nested deeper, listed flat)"))
    for t in sorted(tensors, key=lambda t: natural_key(t.name)):
        node.add(label(f"{t.name[cut:]}  {r.dtype_of(t)} {_shape(t)}  {t.numel:,}"))
