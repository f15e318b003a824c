"""``diff``: how two model files differ, from their headers (and, asked for, their data).

Tensors are matched by name; dtypes are compared in one vocabulary, so a safetensors ``F32``
equals a zTensor ``float32``. With ``data=True`` the tensors present in both with the same
dtype and shape are read and compared: which differ, in how many elements, and the largest
absolute difference for floating-point tensors.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> d = tempfile.mkdtemp()
    >>> a, b = os.path.join(d, "a.safetensors"), os.path.join(d, "b.safetensors")
    >>> save_file({"w": np.zeros(3, np.float32), "x": np.ones(2, np.int8)}, a, {"v": "1"})
    >>> save_file({"w": np.zeros(4, np.float32), "y": np.ones(2, np.int8)}, b, {"v": "2"})
    >>> r = diff(a, b)
    >>> r.identical, r.added, r.removed, [(c.name, c.field) for c in r.changed]
    (False, ['y'], ['x'], [('w', 'shape'), ('w', 'byte_length')])
    >>> r.metadata_changed
    {'v': ('1', '2')}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.reader import Reader
from ..formats import open_reader
from ._dense import dense_value
from ._structure import Structure, TensorEntry, load
from .hash import canonical_value
from .inspect import json_metadata

__all__ = ["DataDiff", "DiffResult", "TensorChange", "diff"]


@dataclass(frozen=True)
class TensorChange:
    """One field of a tensor that differs."""

    name: str
    field: str
    a: Any
    b: Any


@dataclass(frozen=True)
class DataDiff:
    """How the bytes of a tensor present in both files differ."""

    name: str
    differing_elements: int
    max_abs_diff: float | None


@dataclass(frozen=True)
class DiffResult:
    """Everything ``tensorfile diff`` reports."""

    a: str
    b: str
    added: list[str]
    removed: list[str]
    changed: list[TensorChange]
    metadata_added: dict[str, Any]
    metadata_removed: dict[str, Any]
    metadata_changed: dict[str, tuple[Any, Any]]
    data: list[DataDiff] | None = None
    compared: int = field(default=0, compare=False)

    @property
    def identical(self) -> bool:
        """No difference at all (in the data too, when it was compared)."""
        return not (
            self.added
            or self.removed
            or self.changed
            or self.metadata_added
            or self.metadata_removed
            or self.metadata_changed
            or self.data
        )

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        doc: dict[str, Any] = {
            "identical": self.identical,
            "a": self.a,
            "b": self.b,
            "tensors": {
                "added": self.added,
                "removed": self.removed,
                "changed": [
                    {"name": c.name, "field": c.field, "a": c.a, "b": c.b} for c in self.changed
                ],
            },
            "metadata": {
                "added": self.metadata_added,
                "removed": self.metadata_removed,
                "changed": {k: list(v) for k, v in self.metadata_changed.items()},
            },
        }
        if self.data is not None:
            doc["data"] = {
                "compared": self.compared,
                "differing": [
                    {
                        "name": d.name,
                        "differing_elements": d.differing_elements,
                        "max_abs_diff": _json_number(d.max_abs_diff),
                    }
                    for d in self.data
                ],
            }
        return doc


def _json_number(x: float | None) -> float | str | None:
    if x is None or np.isfinite(x):
        return x
    return "Infinity"


def _fields(t: TensorEntry) -> dict[str, Any]:
    return {"dtype": t.common_dtype, "shape": list(t.shape), "byte_length": t.data_bytes}


def diff(a: str | Structure, b: str | Structure, *, data: bool = False) -> DiffResult:
    """Compare two files, checkpoints or globs; ``data=True`` also compares tensor bytes."""
    sa = load(a) if isinstance(a, str) else a
    sb = load(b) if isinstance(b, str) else b
    ta = {t.name: t for t in sa.tensors}
    tb = {t.name: t for t in sb.tensors}
    changed = []
    for name in sorted(ta.keys() & tb.keys()):
        fa, fb = _fields(ta[name]), _fields(tb[name])
        for key in ("dtype", "shape", "byte_length"):
            if fa[key] != fb[key]:
                changed.append(TensorChange(name, key, fa[key], fb[key]))
    ma, mb = json_metadata(sa.metadata), json_metadata(sb.metadata)
    # compare values by their canonical text: a NaN equals itself, 1 (uint8) differs from 1.0
    ca = {k: canonical_value(v) for k, v in sa.metadata.items()}
    cb = {k: canonical_value(v) for k, v in sb.metadata.items()}
    result = DiffResult(
        sa.path,
        sb.path,
        sorted(tb.keys() - ta.keys()),
        sorted(ta.keys() - tb.keys()),
        changed,
        {k: mb[k] for k in sorted(mb.keys() - ma.keys())},
        {k: ma[k] for k in sorted(ma.keys() - mb.keys())},
        {k: (ma[k], mb[k]) for k in sorted(ma.keys() & mb.keys()) if ca[k] != cb[k]},
    )
    if not data:
        return result
    same = [
        n
        for n in sorted(ta.keys() & tb.keys())
        if _fields(ta[n])["dtype"] == _fields(tb[n])["dtype"] and ta[n].shape == tb[n].shape
    ]
    diffs = _compare_data(sa, sb, same)
    return DiffResult(
        result.a,
        result.b,
        result.added,
        result.removed,
        result.changed,
        result.metadata_added,
        result.metadata_removed,
        result.metadata_changed,
        diffs,
        len(same),
    )


def _readers(s: Structure) -> dict[str, Reader]:
    files = [sh.path for sh in s.shards] if s.shards else [s.path]
    return {f: open_reader(f) for f in files}


def _compare_data(sa: Structure, sb: Structure, names: list[str]) -> list[DataDiff]:
    if sa.format == "gguf" or sb.format == "gguf":
        from ..core.errors import UnsupportedError

        raise UnsupportedError("comparing GGUF tensor data is not supported; diff headers only")
    ra, rb = _readers(sa), _readers(sb)
    ea = {t.name: t for t in sa.tensors}
    eb = {t.name: t for t in sb.tensors}
    out: list[DataDiff] = []
    try:
        for name in names:
            xa = _dense(ra[ea[name].shard or sa.path].get_tensor(name))
            xb = _dense(rb[eb[name].shard or sb.path].get_tensor(name))
            found = _compare(name, xa, xb)
            if found is not None:
                out.append(found)
    finally:
        for r in (*ra.values(), *rb.values()):
            r.close()
    return out


def _dense(value: Any) -> np.ndarray[Any, Any]:
    """A tensor's values as one array (an extension layout: its components' bytes, by role)."""
    found = dense_value(value)
    if isinstance(found, np.ndarray):
        return found
    parts = [np.frombuffer(part.tobytes(), np.uint8) for part in found.values()]
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind in "fc" or "float" in dtype.name


def _compare(name: str, xa: np.ndarray[Any, Any], xb: np.ndarray[Any, Any]) -> DataDiff | None:
    if xa.shape == xb.shape and xa.tobytes() == xb.tobytes():
        return None
    if xa.shape != xb.shape:
        return DataDiff(name, max(xa.size, xb.size), None)
    if _is_float(xa.dtype):
        wide = np.complex128 if xa.dtype.kind == "c" else np.float64
        fa, fb = xa.astype(wide), xb.astype(wide)
        unequal = ~((fa == fb) | (np.isnan(fa) & np.isnan(fb)))
        delta = np.abs(fa[unequal] - fb[unequal])
        delta[np.isnan(delta)] = np.inf  # NaN against a number, or inf against -inf
        max_abs = float(delta.max()) if delta.size else 0.0
        return DataDiff(name, int(unequal.sum()), max_abs)
    unequal = xa != xb
    if xa.dtype.kind in "iub":
        delta = np.abs(xa.astype(np.float64) - xb.astype(np.float64))
        return DataDiff(name, int(unequal.sum()), float(delta.max()))
    return DataDiff(name, int(unequal.sum()), None)
