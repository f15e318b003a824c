"""``diff``: how two model files differ, from their headers (and, asked for, their data).

Tensors are matched by name and compared as logical tensors: dtype (in one vocabulary, so a
safetensors ``F32`` equals a zTensor ``float32``), row-major shape and decoded byte length,
never how they are stored. With ``data=True`` the tensors present in both with the same
dtype and shape are read and compared: which differ, in how many elements, and the largest
absolute difference for floating-point tensors. How the tensors present in both are stored
(encoding and stored bytes: zstd against raw, say) is reported apart, in
:attr:`DiffResult.stored`, and is never a difference: a lossless conversion is identical.

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

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tensorfile.core.values import TypedValue

from ..core.catalog import Catalog, TensorInfo
from ._catalogs import load, naming, open_readers
from ._dense import (
    CHUNK_BYTES,
    MAX_DENSE_BYTES,
    check_densifiable,
    components,
    dense_chunks,
    dense_value,
    is_extension,
)
from .hash import canonical_value
from .inspect import json_metadata

__all__ = ["DataDiff", "DiffResult", "StoredChange", "TensorChange", "diff"]


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
class StoredChange:
    """How a tensor present in both files is stored, where that differs: its encoding
    (``raw``, ``zstd``, ``zt.zstd-seekable/1``...) or, for the same decoded size, its
    stored bytes. Not a difference in the tensor: the same tensor compressed, or
    recompressed, is stored differently. (A tensor whose decoded size changed, stored
    alike, is not listed: :attr:`DiffResult.changed` has it.)"""

    name: str
    a_encoding: str
    a_bytes: int
    b_encoding: str
    b_bytes: int


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
    stored: list[StoredChange] = field(default_factory=list)
    """The tensors present in both that are stored differently (see :class:`StoredChange`),
    by name; never a difference."""
    stored_bytes: tuple[int, int] = (0, 0)
    """Stored bytes of the tensors present in both, in ``a`` and in ``b``."""
    shared: int = field(default=0, compare=False)
    """How many tensors are present in both."""

    @property
    def identical(self) -> bool:
        """No difference at all (in the data too, when it was compared); how the tensors
        are stored (:attr:`stored`) is not a difference."""
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
        doc["stored"] = {
            "shared_tensors": self.shared,
            "a_bytes": self.stored_bytes[0],
            "b_bytes": self.stored_bytes[1],
            "differing": [
                {
                    "name": c.name,
                    "a": {"encoding": c.a_encoding, "bytes": c.a_bytes},
                    "b": {"encoding": c.b_encoding, "bytes": c.b_bytes},
                }
                for c in self.stored
            ],
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


def _fields(t: TensorInfo) -> dict[str, Any]:
    """What a tensor is, whatever its storage: the byte length is the decoded one."""
    return {"dtype": t.common_dtype, "shape": list(t.shape), "byte_length": t.decoded_nbytes}


def encoding_of(t: TensorInfo) -> str:
    """How a tensor's bytes are stored: ``raw`` or its components' encodings, each once
    (``zt.zstd-seekable/1``; ``raw, zstd`` for a sparse tensor of mixed parts).

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Component
        >>> from tensorfile.core.dtypes import from_name
        >>> u8 = from_name("U8")
        >>> parts = {"values": Component(ByteRange(64, 80), u8, "zstd"),
        ...          "indices": Component(ByteRange(128, 160), u8)}
        >>> encoding_of(TensorInfo("s", u8, (4, 4), parts, "sparse_csr"))
        'raw, zstd'
    """
    found = sorted({c.encoding for c in t.components.values()})
    return ", ".join(found) if found else "raw"


def _stored(ta: dict[str, TensorInfo], tb: dict[str, TensorInfo], names: list[str]) -> Any:
    """The :class:`StoredChange` of each of ``names`` stored differently, and the stored
    bytes of all of them in each file."""
    out = []
    total_a = total_b = 0
    for name in names:
        a, b = ta[name], tb[name]
        ea, eb, na, nb = encoding_of(a), encoding_of(b), a.nbytes, b.nbytes
        total_a += na
        total_b += nb
        # a tensor whose logical size changed has that change reported; its stored bytes
        # differ for that reason alone unless its encoding differs too
        if ea != eb or (na != nb and a.decoded_nbytes == b.decoded_nbytes):
            out.append(StoredChange(name, ea, na, eb, nb))
    return out, (total_a, total_b)


def diff(
    a: str | Catalog,
    b: str | Catalog,
    *,
    data: bool = False,
    max_dense_bytes: int = MAX_DENSE_BYTES,
    progress: Callable[[int, int], None] | None = None,
    allow_full_download: bool | None = None,
) -> DiffResult:
    """Compare two files, checkpoints or globs; ``data=True`` also compares tensor bytes,
    a bounded piece at a time (a sparse tensor whose dense form is over ``max_dense_bytes``
    is refused with :class:`~tensorfile.errors.UnsupportedError` before any data is read).

    Shapes are compared row-major and dtypes in one vocabulary, so a tensor saved to
    safetensors and to GGUF compares equal. Metadata values are reported whole, as JSON
    values (a GGUF vocabulary as its list of 150,000 tokens): a renderer shortens them
    with :func:`~tensorfile.ops.inspect.brief_value`, as ``inspect`` does.

    ``progress(done, total)``, with ``data=True``, is called as tensor data is compared:
    bytes of the first file's tensors (reading the headers and comparing metadata come
    before, without reports).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> d = tempfile.mkdtemp()
        >>> a, b = os.path.join(d, "a.safetensors"), os.path.join(d, "b.safetensors")
        >>> save_file({"w": np.zeros(4, np.float32)}, a)
        >>> save_file({"w": np.ones(4, np.float32)}, b)
        >>> seen = []
        >>> r = diff(a, b, data=True, progress=lambda done, total: seen.append((done, total)))
        >>> [(d.name, d.differing_elements) for d in r.data], seen[-1]
        ([('w', 4)], (16, 16))
    """
    allow = allow_full_download
    sa = load(a, allow_full_download=allow) if isinstance(a, str) else a
    sb = load(b, allow_full_download=allow) if isinstance(b, str) else b
    ta = dict(sa.tensors)
    tb = dict(sb.tensors)
    changed = []
    common = sorted(ta.keys() & tb.keys())
    stored, stored_bytes = _stored(ta, tb, common)
    for name in common:
        fa, fb = _fields(ta[name]), _fields(tb[name])
        for key in ("dtype", "shape", "byte_length"):
            if fa[key] != fb[key]:
                changed.append(TensorChange(name, key, fa[key], fb[key]))
    both = sorted(sa.metadata.keys() & sb.metadata.keys())
    differ = [k for k in both if not _same_value(sa.metadata[k], sb.metadata[k])]
    ma = json_metadata({k: sa.metadata[k] for k in (*differ, *(sa.metadata.keys() - both))})
    mb = json_metadata({k: sb.metadata[k] for k in (*differ, *(sb.metadata.keys() - both))})
    result = DiffResult(
        sa.path or "",
        sb.path or "",
        sorted(tb.keys() - ta.keys()),
        sorted(ta.keys() - tb.keys()),
        changed,
        {k: mb[k] for k in sorted(sb.metadata.keys() - sa.metadata.keys())},
        {k: ma[k] for k in sorted(sa.metadata.keys() - sb.metadata.keys())},
        {k: (ma[k], mb[k]) for k in differ},
        stored=stored,
        stored_bytes=stored_bytes,
        shared=len(common),
    )
    if not data:
        return result
    same = [
        n
        for n in sorted(ta.keys() & tb.keys())
        if _fields(ta[n])["dtype"] == _fields(tb[n])["dtype"] and ta[n].shape == tb[n].shape
    ]
    diffs = _compare_data(sa, sb, same, max_dense_bytes, progress, allow)
    return replace(result, data=diffs, compared=len(same))


# kinds whose canonical text is a function of the Python value alone (not of a float's sign
# or bits): equal values have equal canonical texts
_EXACT_KINDS = frozenset(
    ("string", "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")
)


def _same_value(x: Any, y: Any) -> bool:
    """Whether two metadata values are the same, by their canonical text: a NaN equals
    itself, 1 (uint8) differs from 1.0. Equal text and integer values (a vocabulary against
    itself) are known to be the same without writing their canonical text."""
    if type(x) is str and type(y) is str:
        return x == y
    if (
        isinstance(x, TypedValue)
        and isinstance(y, TypedValue)
        and x.type == y.type
        and x.element_type == y.element_type
        and (x.element_type if x.type == "array" else x.type) in _EXACT_KINDS
        and x.value == y.value
    ):
        return True
    return canonical_value(x) == canonical_value(y)


def _compare_data(
    sa: Catalog,
    sb: Catalog,
    names: list[str],
    limit: int = MAX_DENSE_BYTES,
    progress: Callable[[int, int], None] | None = None,
    allow_full_download: bool | None = None,
) -> list[DataDiff]:
    if sa.format == "gguf" or sb.format == "gguf":
        from ..core.errors import UnsupportedError

        raise UnsupportedError("comparing GGUF tensor data is not supported; diff headers only")
    ra = open_readers(sa, allow_full_download=allow_full_download)
    try:
        rb = open_readers(sb, allow_full_download=allow_full_download)
    except BaseException:
        for r in ra.values():
            r.close()
        raise
    ea, eb = sa.tensors, sb.tensors
    out: list[DataDiff] = []
    try:
        pairs = [
            (ra[ea[n].file or sa.path or ""], rb[eb[n].file or sb.path or ""], n) for n in names
        ]
        for a, b, name in pairs:  # every refusal before the first byte of data
            check_densifiable(a.info(name), a.source.name, limit)
            check_densifiable(b.info(name), b.source.name, limit)
        total = sum(ea[n].decoded_nbytes for n in names)
        done = [0, 0]  # bytes compared: up to the current tensor, of the current tensor

        def advance(nbytes: int) -> None:
            if progress is not None:
                done[1] += nbytes
                progress(min(done[0] + done[1], total), total)

        advance(0)
        for a, b, name in pairs:
            with naming(a.source.name):
                va = a.get_tensor(name)
            with naming(b.source.name):
                vb = b.get_tensor(name)
            found = _compare_values(name, va, vb, advance)
            if found is not None:
                out.append(found)
            done[0], done[1] = done[0] + ea[name].decoded_nbytes, 0
            advance(0)
    finally:
        for r in (*ra.values(), *rb.values()):
            r.close()
    return out


def _compare_values(
    name: str, va: Any, vb: Any, advance: Callable[[int], None] | None = None
) -> DataDiff | None:
    """Compare two values of one dtype and shape, a bounded piece at a time (sparse ones
    are densified piece by piece), calling ``advance(nbytes)`` after each piece; an
    extension layout is compared by its components' bytes."""
    if is_extension(va) or is_extension(vb):
        return _compare_extension(name, va, vb)
    itemsize = max(1, np.dtype(_dtype(va)).itemsize)
    step = CHUNK_BYTES // itemsize
    found: list[DataDiff] = []
    for xa, xb in zip(dense_chunks(va, step), dense_chunks(vb, step), strict=True):
        d = _compare(name, xa, xb)
        if d is not None:
            found.append(d)
        if advance is not None:
            advance(xa.nbytes)
    if not found:
        return None
    deltas = [d.max_abs_diff for d in found if d.max_abs_diff is not None]
    return DataDiff(
        name,
        sum(d.differing_elements for d in found),
        max(deltas) if len(deltas) == len(found) else None,
    )


def _dtype(value: Any) -> np.dtype[Any]:
    found: np.dtype[Any] = value.dtype
    return found


def _compare_extension(name: str, va: Any, vb: Any) -> DataDiff | None:
    """Compare by bytes when one side (or both) is an extension layout: its components'
    bytes, by role, against the other side's (a plain tensor is densified only when it is
    exactly as long as those bytes, which are in memory already)."""
    xa, xb = _ext_bytes(va), _ext_bytes(vb)
    if xa is None or xb is None:
        known = xa if xa is not None else xb
        other = va if xa is None else vb
        assert known is not None
        size = math.prod(other.shape) * np.dtype(_dtype(other)).itemsize
        if size != known.size:
            return DataDiff(name, max(size, known.size), None)
        plain = np.frombuffer(np.ascontiguousarray(dense_value(other)).tobytes(), np.uint8)
        xa, xb = (plain, known) if xa is None else (known, plain)
    return _compare(name, xa, xb)


def _ext_bytes(value: Any) -> np.ndarray[Any, Any] | None:
    """An extension layout's components' bytes, by role, as one array (None for others)."""
    if not is_extension(value):
        return None
    parts = [np.frombuffer(part.tobytes(), np.uint8) for part in components(value).values()]
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
