"""``tensorfile inspect``, ``id`` and ``summary``: render what :mod:`tensorfile.ops` found."""

from __future__ import annotations

import argparse
import os

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..ops import content_hash, inspect, load, structural_hash
from ..ops._structure import Structure, TensorEntry
from ..ops.inspect import InspectResult, ModuleGroup, json_metadata, module_tree
from ._output import Output, human_bytes, printable

__all__ = ["run_id", "run_inspect", "run_summary"]

DEFAULT_ROWS = 200


def _shape(t: TensorEntry) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def meta_text(value: object, limit: int | None = None) -> str:
    """A metadata value for a terminal: made :func:`printable` (``\\n``, ``\\x7f``,
    ``\\u202e``), optionally cut to ``limit`` characters.

    Example:
        >>> meta_text("a\\nb"), meta_text("x" * 10, 6)
        ('a\\\\nb', 'xxx...')
    """
    text = printable(str(value))
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


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


def run_inspect(args: argparse.Namespace, out: Output) -> int:
    r = inspect(args.path)
    if out.json_mode:
        out.json(r.to_json())
        return 0
    _header(r, out)
    if args.tree:
        out.render(_tree(module_tree(r.tensors), r, out.console.width))
        return 0
    _tensors(r, out, verbose=args.verbose)
    return 0


def _header(r: InspectResult, out: Output) -> None:
    version = f" {r.version}" if r.version else ""
    out.line(f"{r.format}{version}  {r.path}")
    out.line(
        f"header {r.header_size:,} bytes · {r.tensor_count:,} tensors · "
        f"{r.parameter_count:,} parameters · {human_bytes(r.total_bytes)} of tensor data"
    )
    out.line(f"structural hash {r.structural_hash}")
    if r.shards:
        out.line(f"{len(r.shards)} shards:")
        for s in r.shards:
            out.line(f"  {os.path.basename(s.path)}  {s.tensor_count:,} tensors, "
                     f"{human_bytes(s.total_bytes)}")  # fmt: skip
    meta = json_metadata(r.metadata)
    out.line(f"metadata ({len(meta)})" + (":" if meta else ""))
    for key in sorted(meta):
        out.line(f"  {key}: {meta_text(meta[key], 120)}")
    table = Table(title=None, show_edge=False)
    table.add_column("dtype")
    table.add_column("parameters", justify="right")
    table.add_column("bytes", justify="right")
    for dt, n in r.parameters_by_dtype.items():
        table.add_row(cell(dt), f"{n:,}", f"{r.bytes_by_dtype[dt]:,}")
    out.render(table)


def _tensors(r: InspectResult, out: Output, *, verbose: bool) -> None:
    table = Table(show_edge=False)
    table.add_column("name", overflow="fold")
    table.add_column("dtype")
    table.add_column("shape")
    table.add_column("bytes", justify="right")
    table.add_column("offsets", justify="right", no_wrap=True)
    shown = r.tensors if verbose or len(r.tensors) <= DEFAULT_ROWS else r.tensors[:DEFAULT_ROWS]
    for t in shown:
        notes = [n for n in (t.layout, t.encoding) if n not in ("dense", "raw")]
        extra = f" ({', '.join(notes)})" if notes else ""
        table.add_row(
            cell(t.name), cell(t.dtype + extra), _shape(t), f"{t.byte_length:,}",
            cell(f"[{t.data_offsets[0]}, {t.data_offsets[1]})"),
        )  # fmt: skip
    out.render(table)
    if len(shown) < len(r.tensors):
        out.line(f"... {len(r.tensors) - len(shown):,} more tensors (--verbose lists them all)")


TREE_DEPTH = 16
"""Module levels ``inspect --tree`` draws; deeper groups are listed flat under the last one
drawn, with a note (each level takes 4 columns of guides)."""


def _tree(root: ModuleGroup, r: InspectResult, width: int) -> Tree:
    tree = Tree(label(f"{os.path.basename(r.path)}  {root.parameters:,} parameters"))
    depth_limit = max(1, min(TREE_DEPTH, (width - 40) // 4))
    stack: list[tuple[Tree, ModuleGroup, int]] = [(tree, root, 0)]
    while stack:  # no recursion: a file can nest names as deep as it likes
        node, group, depth = stack.pop()
        cut = len(group.prefix) + 1 if group.prefix else 0
        if depth >= depth_limit and group.children:
            _flat(node, group, cut)
            continue
        for child in group.children:
            text = (
                f"{child.prefix[cut:]}  {child.parameters:,} parameters, {human_bytes(child.bytes)}"
            )
            stack.append((node.add(label(text)), child, depth + 1))
        for t in group.tensors:
            node.add(label(f"{t.name[cut:]}  {t.dtype} {_shape(t)}  {t.parameters:,}"))
    return tree


def _flat(node: Tree, group: ModuleGroup, cut: int) -> None:
    """Every tensor below ``group``, one line each, after a note saying why."""
    tensors: list[TensorEntry] = []
    pending = [group]
    while pending:
        g = pending.pop()
        tensors.extend(g.tensors)
        pending.extend(g.children)
    node.add(label(f"({len(tensors):,} tensors in modules nested deeper, listed flat)"))
    for t in sorted(tensors, key=lambda t: t.name):
        node.add(label(f"{t.name[cut:]}  {t.dtype} {_shape(t)}  {t.parameters:,}"))


def run_id(args: argparse.Namespace, out: Output) -> int:
    s = load(args.path)
    key = "content_hash" if args.content else "structural_hash"
    digest = _content(args.path, s, out) if args.content else structural_hash(s)
    if out.json_mode:
        counts = {"tensor_count": len(s.tensors), "metadata_count": len(s.metadata)}
        out.json({"schema": 1, "format": s.format, key: digest, **counts})
    else:
        out.line(digest)
    return 0


def _content(path: str, s: Structure, out: Output) -> str:
    total = sum(t.byte_length for t in s.tensors)
    if total < 64 << 20 or not out.err_console.is_terminal:
        return content_hash(path)
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    columns = (BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=out.err_console, transient=True) as bar:
        task = bar.add_task("hashing", total=total)
        return content_hash(path, lambda done, _t: bar.update(task, completed=done))


def run_summary(args: argparse.Namespace, out: Output) -> int:
    s = load(args.path)
    line = (
        f"{s.format},{s.version or 'N/A'},{len(s.tensors)},{len(s.metadata)},{structural_hash(s)}"
    )
    if out.json_mode:
        out.json({"schema": 1, "format": s.format, "version": s.version,
                  "tensor_count": len(s.tensors), "metadata_count": len(s.metadata),
                  "structural_hash": structural_hash(s)})  # fmt: skip
    else:
        out.line(line)
    return 0
