"""``tensorfile diff``: render a comparison as text, markdown or JSON.

Names are listed in natural order (``layers.2`` before ``layers.10``); metadata values are
cut to :data:`~._values.VALUE_LIMIT` characters as ``inspect`` cuts them (``--verbose``: whole);
float32 values and statistics are shown at their own precision (``1e-05``). How the tensors
are stored (encoding, stored bytes) is a section of its own, after the verdict's inputs and
never counted as a difference: one summary line, each tensor with ``--verbose``.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from ..core import dtypes
from ..core.catalog import Catalog
from ..ops import diff, load
from ..ops.diff import DataDiff, DiffResult, StoredChange
from ._ident import SCHEMA
from ._output import Output
from ._progress import progress
from ._text import natural_key, natural_sorted, plural, short_float, shortest32
from ._values import VALUE_LIMIT, plain_metadata, value_text

__all__ = ["run_diff"]


class _View:
    """A :class:`DiffResult` as shown: names in natural order, metadata values as JSON
    values (float32 at their own precision), statistics at their tensor's precision."""

    def __init__(
        self, r: DiffResult, sa: Catalog, sb: Catalog, limit: int | None, verbose: bool = False
    ) -> None:
        self.r = r
        self.limit = limit  # None: values whole (JSON, --verbose)
        self.verbose = verbose
        a_keys = {*r.metadata_removed, *r.metadata_changed}  # only the values shown
        b_keys = {*r.metadata_added, *r.metadata_changed}
        ma = plain_metadata({k: sa.metadata[k] for k in a_keys}, limit)
        mb = plain_metadata({k: sb.metadata[k] for k in b_keys}, limit)
        self.added = natural_sorted(r.added)
        self.removed = natural_sorted(r.removed)
        self.changed = sorted(r.changed, key=lambda c: natural_key(c.name))  # stable
        self.meta_added = {k: mb[k] for k in natural_sorted(r.metadata_added)}
        self.meta_removed = {k: ma[k] for k in natural_sorted(r.metadata_removed)}
        self.meta_changed = {k: (ma[k], mb[k]) for k in natural_sorted(r.metadata_changed)}
        self.data = None if r.data is None else natural_sorted(r.data, key=_data_name)
        self.stored = natural_sorted(r.stored, key=_stored_name)
        self.kinds = {t.name: t.common_dtype for t in sa.tensors.values()}

    def v(self, value: Any) -> str:
        """A value: strings quoted, others as JSON, cut to the limit."""
        return value_text(value, self.limit, quoted=True)

    def stat(self, d: DataDiff) -> float | int | None:
        """``max |a - b|`` at the precision of the tensor's dtype: an integer for integer
        tensors, the float32-shortest value for floats of 32 bits or less."""
        x = d.max_abs_diff
        if x is None or not math.isfinite(x):
            return x
        bits, kind = _precision(self.kinds.get(d.name, ""))
        if kind in ("int", "uint", "bool"):
            return int(x)
        return shortest32(x) if bits <= 32 else x

    def stat_text(self, d: DataDiff) -> str:
        x = self.stat(d)
        if x is None:
            return ""
        return str(x) if isinstance(x, int) else short_float(x)

    def to_json(self) -> dict[str, Any]:
        doc = self.r.to_json()
        doc["tensors"] = {
            "added": self.added,
            "removed": self.removed,
            "changed": [{"name": c.name, "field": c.field, "a": c.a, "b": c.b}
                        for c in self.changed],
        }  # fmt: skip
        doc["metadata"] = {
            "added": self.meta_added,
            "removed": self.meta_removed,
            "changed": {k: list(v) for k, v in self.meta_changed.items()},
        }
        doc["stored"]["differing"] = [
            {"name": c.name, "a": {"encoding": c.a_encoding, "bytes": c.a_bytes},
             "b": {"encoding": c.b_encoding, "bytes": c.b_bytes}}
            for c in self.stored
        ]  # fmt: skip
        if self.data is not None:
            doc["data"]["differing"] = [
                {"name": d.name, "differing_elements": d.differing_elements,
                 "max_abs_diff": _json_number(self.stat(d))}
                for d in self.data
            ]  # fmt: skip
        return {"schema": SCHEMA, **doc}


def _data_name(d: DataDiff) -> str:
    return d.name


def _stored_name(c: StoredChange) -> str:
    return c.name


def _encodings(found: list[str]) -> str:
    """The encodings of one side, each once, in order of first use."""
    return " + ".join(dict.fromkeys(found))


def _stored_summary(w: _View, arrow: str = "->") -> str | None:
    """One line on how the tensors present in both are stored, where that differs: a
    section apart, labelled as no difference; None when they are stored alike."""
    if not w.stored:
        return None
    a_bytes, b_bytes = w.r.stored_bytes
    ea = _encodings([c.a_encoding for c in w.stored])
    eb = _encodings([c.b_encoding for c in w.stored])
    n = len(w.stored)
    return (
        f"stored (how the bytes are kept, not a difference): {n:,} of "
        f"{plural(w.r.shared, 'tensor')} stored differently ({ea} {arrow} {eb}); "
        f"{a_bytes:,} {arrow} {plural(b_bytes, 'stored byte')} in all"
    )


def _stored_lines(w: _View) -> list[str]:
    head = _stored_summary(w)
    if head is None:
        return []
    if not w.verbose:
        return [head, "  (--verbose lists each tensor)"]
    return [head] + [
        f"  ~ {c.name}: {c.a_encoding} {plural(c.a_bytes, 'byte')} -> "
        f"{c.b_encoding} {plural(c.b_bytes, 'byte')}"
        for c in w.stored
    ]


def _precision(common_dtype: str) -> tuple[int, str]:
    """Bits of precision of a float dtype's components (complex64: 32) and its kind."""
    try:
        dt = dtypes.from_name(common_dtype)
    except KeyError:
        return 64, "float"
    bits = dt.bits // 2 if dt.kind == "complex" else dt.bits
    return bits, dt.kind


def _json_number(x: float | int | None) -> float | int | str | None:
    if isinstance(x, float) and not math.isfinite(x):
        return "Infinity"  # |a - b|: never negative, and NaN is reported as infinite
    return x


def run_diff(args: argparse.Namespace, out: Output) -> int:
    """``tensorfile diff A B``."""
    allow = args.allow_full_download or None
    sa, sb = load(args.a, allow_full_download=allow), load(args.b, allow_full_download=allow)
    r = _diff(sa, sb, args.data, out, allow)
    whole = out.json_mode or args.verbose
    view = _View(r, sa, sb, None if whole else VALUE_LIMIT, verbose=args.verbose)
    if out.json_mode:
        out.json(view.to_json())
    else:
        for line in _markdown(view) if args.format == "md" else _text(view):
            out.line(line)
    return 1 if args.fail_on_diff and not r.identical else 0


def _diff(sa: Catalog, sb: Catalog, data: bool, out: Output, allow: bool | None) -> DiffResult:
    """:func:`tensorfile.ops.diff`, with a progress bar on a terminal's stderr while the
    data is compared (``--data``)."""
    if not data:
        return diff(sa, sb)
    with progress(out, "comparing") as report:
        return diff(sa, sb, data=True, progress=report, allow_full_download=allow)


def _text(w: _View) -> list[str]:
    r = w.r
    lines = [f"a: {r.a}", f"b: {r.b}"]
    n_changed = len({c.name for c in w.changed})
    lines.append(f"tensors: {len(w.added)} added, {len(w.removed)} removed, {n_changed} changed")
    lines += [f"  + {name}" for name in w.added]
    lines += [f"  - {name}" for name in w.removed]
    lines += [f"  ~ {c.name}: {c.field} {w.v(c.a)} -> {w.v(c.b)}" for c in w.changed]
    lines.append(
        f"metadata: {len(w.meta_added)} added, {len(w.meta_removed)} removed, "
        f"{len(w.meta_changed)} changed"
    )
    lines += [f"  + {k}: {w.v(v)}" for k, v in w.meta_added.items()]
    lines += [f"  - {k}: {w.v(v)}" for k, v in w.meta_removed.items()]
    lines += [f"  ~ {k}: {w.v(a)} -> {w.v(b)}" for k, (a, b) in w.meta_changed.items()]
    if w.data is not None:
        n = len(w.data)
        verb = "differs" if n == 1 else "differ"
        lines.append(f"data: {n:,} of {plural(r.compared, 'compared tensor')} {verb}")
        for d in w.data:
            stat = w.stat_text(d)
            how = f", max |a - b| = {stat}" if stat else ""
            verb = "differs" if d.differing_elements == 1 else "differ"
            lines.append(f"  ~ {d.name}: {plural(d.differing_elements, 'element')} {verb}{how}")
    lines += _stored_lines(w)
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


def _markdown(w: _View) -> list[str]:
    r = w.r
    lines = [f"## diff {_code(r.a)} → {_code(r.b)}", ""]
    stored = _stored_summary(w, "→")
    if stored is not None:
        lines += [f"{_cell(stored[0].upper() + stored[1:])}.", ""]
        if w.verbose:
            lines += ["| tensor | stored in a | stored in b |", "|---|---|---|"]
            lines += [
                f"| {_code(c.name)} | {_cell(c.a_encoding)}, {plural(c.a_bytes, 'byte')} "
                f"| {_cell(c.b_encoding)}, {plural(c.b_bytes, 'byte')} |"
                for c in w.stored
            ]
            lines.append("")
    if r.identical:
        return [*lines, "Identical."]
    if w.added or w.removed or w.changed:
        lines += ["| tensor | change | a | b |", "|---|---|---|---|"]
        lines += [f"| {_code(n)} | added | | |" for n in w.added]
        lines += [f"| {_code(n)} | removed | | |" for n in w.removed]
        lines += [
            f"| {_code(c.name)} | {c.field} | {_cell(w.v(c.a))} | {_cell(w.v(c.b))} |"
            for c in w.changed
        ]
        lines.append("")
    if w.meta_added or w.meta_removed or w.meta_changed:
        lines += ["| metadata key | change | a | b |", "|---|---|---|---|"]
        lines += [f"| {_code(k)} | added | | {_cell(w.v(v))} |" for k, v in w.meta_added.items()]
        lines += [
            f"| {_code(k)} | removed | {_cell(w.v(v))} | |" for k, v in w.meta_removed.items()
        ]
        lines += [
            f"| {_code(k)} | changed | {_cell(w.v(a))} | {_cell(w.v(b))} |"
            for k, (a, b) in w.meta_changed.items()
        ]
        lines.append("")
    if w.data:
        lines += ["| tensor | differing elements | max abs diff |", "|---|---:|---:|"]
        lines += [
            f"| {_code(d.name)} | {d.differing_elements:,} | {w.stat_text(d)} |" for d in w.data
        ]
    return lines
