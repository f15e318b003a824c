"""``inspect``: what is in a model file, from its header alone.

Where a tensor is, is said one way for every format: its **absolute file offsets**
(:func:`file_offsets`: ``[start, end)`` of its bytes counted from the first byte of the file
holding them, what ``dd skip=``, a hex dump and a range request use). The header's own
numbers, which count from the data section for safetensors and GGUF and from the file's
start for zTensor, stay in the ``--json`` document as ``data_offsets``.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"a.w": np.zeros((2, 3), np.float32), "a.b": np.zeros(3, np.float16)}, path)
    >>> r = inspect(path)
    >>> r.parameter_count, r.parameters_by_dtype, r.bytes_by_dtype
    (9, {'F16': 3, 'F32': 6}, {'F16': 6, 'F32': 24})
    >>> [(g.prefix, g.parameters) for g in module_tree(r.tensors).children]
    [('a', 9)]
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorfile.core.values import TypedValue

from .. import formats
from ..core.catalog import Catalog, ShardInfo, TensorInfo
from ..formats.ggml import DEQUANTIZED
from ._catalogs import file_dtype, load
from .hash import structural_hash

__all__ = [
    "BRIEF_CHARS",
    "InspectResult",
    "ModuleGroup",
    "brief_value",
    "file_offsets",
    "inspect",
    "json_metadata",
    "module_tree",
    "not_tensors",
    "not_tensors_text",
    "readable",
]

SCHEMA = 1
_DENSE = ("dense", "quantized")  # GGUF's quantized blocks are dense tensors of blocks


def readable() -> str:
    """The formats :func:`inspect` (and every operation) reads, as messages list them: the
    registry's (:func:`tensorfile.formats.known`).

    Example:
        >>> readable()
        'safetensors, zTensor, GGUF, npz, npy, PyTorch pickle'
    """
    return formats.known()


@dataclass(frozen=True)
class InspectResult:
    """Everything ``tensorfile inspect`` shows."""

    format: str
    path: str
    version: str | None
    header_size: int
    tensor_count: int
    parameter_count: int
    parameters_by_dtype: dict[str, int]
    bytes_by_dtype: dict[str, int]
    total_bytes: int
    metadata: Mapping[str, Any]
    structural_hash: str
    tensors: tuple[TensorInfo, ...]
    shards: tuple[ShardInfo, ...] | None = None
    bytes_read: int = field(default=0, compare=False)
    not_tensors: Mapping[str, str] = field(default_factory=dict)
    """The entries of a PyTorch pickle that are not tensors, described by name
    (``{"epoch": "int", "char2idx": "dict of 80 ints"}``); their values are in
    ``metadata``."""

    def dtype_of(self, t: TensorInfo) -> str:
        """The tensor's dtype as the file names it, GGUF's upper-cased (``F32``, ``Q4_K``)."""
        return file_dtype(self.format, t)

    @property
    def dequantized_bytes(self) -> int:
        """``total_bytes`` with every quantized tensor (GGUF's blocks) counted dequantized,
        as :func:`tensorfile.convert` writes it (float32): what a conversion reads out.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile.safetensors.numpy import save_file
            >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
            >>> save_file({"w": np.zeros(4, np.float16)}, path)
            >>> r = inspect(path)
            >>> r.total_bytes, r.dequantized_bytes  # nothing quantized: the same
            (8, 8)
        """
        extra = sum(
            DEQUANTIZED.nbytes(t.numel) - t.nbytes for t in self.tensors if t.layout == "quantized"
        )
        return self.total_bytes + extra

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (schema 1). Each tensor has ``offset``, the absolute
        file offset of its first byte (of its first component, for a sparse tensor), and
        ``data_offsets`` as its file's header states them (relative to the data section for
        safetensors and GGUF, absolute for zTensor)."""
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "format": self.format,
            "path": self.path,
            "version": self.version,
            "header_size": self.header_size,
            "tensor_count": self.tensor_count,
            "parameter_count": self.parameter_count,
            "parameters_by_dtype": self.parameters_by_dtype,
            "bytes_by_dtype": self.bytes_by_dtype,
            "total_bytes": self.total_bytes,
            "metadata": json_metadata(self.metadata),
            "structural_hash": self.structural_hash,
            "tensors": [
                {
                    "name": t.name,
                    "dtype": self.dtype_of(t),
                    "shape": list(t.shape),
                    "byte_length": t.nbytes,
                    "offset": file_offsets(t)[0],
                    "data_offsets": list(t.data_offsets),
                    **({"shard": os.path.basename(t.file)} if t.file else {}),
                    **({"layout": t.layout} if t.layout not in _DENSE else {}),
                    **({"encoding": t.encoding} if t.encoding != "raw" else {}),
                }
                for t in self.tensors
            ],
        }
        if self.not_tensors:
            doc["not_tensors"] = dict(self.not_tensors)
        if self.shards is not None:
            doc["shards"] = [
                {"path": s.path, "tensor_count": s.tensor_count, "total_bytes": s.total_bytes}
                for s in self.shards
            ]
        return doc


def file_offsets(t: TensorInfo) -> tuple[int, int]:
    """``[start, end)`` of the tensor's bytes (its first component: ``data``, else
    ``values``) as absolute offsets in the file holding them, whatever the format;
    ``(0, 0)`` for a tensor with no component.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Component
        >>> from tensorfile.core.dtypes import from_name
        >>> f32 = from_name("F32")
        >>> data = {"data": Component(ByteRange(136, 160), f32)}
        >>> t = TensorInfo("w", f32, (6,), data, offset_base=128)  # safetensors: data at 128
        >>> file_offsets(t), t.data_offsets
        ((136, 160), (8, 32))
    """
    c = t.first
    return (0, 0) if c is None else (c.range.start, c.range.stop)


def json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as JSON values (GGUF values unwrapped to numbers, booleans, text, lists;
    NaN and infinities, which JSON cannot hold, as the strings ``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``).

    Example:
        >>> json_metadata({"n": TypedValue("array", [1.5, float("nan")], "float32"), "s": "x"})
        {'n': [1.5, 'NaN'], 's': 'x'}
    """
    return {k: _json_value(v) for k, v in metadata.items()}


def _json_value(value: Any) -> Any:
    if isinstance(value, TypedValue):
        if value.element_type == "array" and value.items is not None:  # arrays of arrays
            return [_json_value(v) for v in value.items]
        items = value.value
        if value.type == "array":  # a vocabulary's 150,000 items: no call per item
            if value.element_type not in ("float32", "float64"):
                return list(items)
            if all(map(math.isfinite, items)):
                return list(items)
        value = items
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


BRIEF_CHARS = 120
"""How many characters of a metadata value ``inspect`` shows (:func:`brief_value`)."""


def brief_value(value: Any, verbose: bool = False, *, limit: int = BRIEF_CHARS) -> str:
    """A metadata value as ``inspect`` shows it: its text (``str(value)``: text as it is,
    a list as Python writes one, a GGUF value by its JSON value as :func:`json_metadata`
    gives it), cut to ``limit`` characters ending in ``...`` unless ``verbose``.

    Only the head of a long list is turned into text, so a 150,000-token vocabulary costs
    microseconds, not a 600 kB line. The cut is made before any escaping for a terminal:
    escaping the result and cutting it to ``limit`` again gives what escaping the whole
    text and cutting it would (escapes only lengthen text).

    Example:
        >>> brief_value("short")
        'short'
        >>> brief_value(["tok"] * 150_000)[-12:], len(brief_value(["tok"] * 150_000))
        ("ok', 'tok...", 120)
        >>> brief_value(list(range(5)), limit=10), brief_value(list(range(5)), verbose=True)
        ('[0, 1, ...', '[0, 1, 2, 3, 4]')
        >>> brief_value(TypedValue("array", [0.5, float("inf")], "float32"))
        "[0.5, 'Infinity']"
    """
    if isinstance(value, TypedValue):
        value = _json_value(value)
    if verbose:
        return str(value)
    text = _head(value, limit) if type(value) is list else str(value)
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def _head(items: list[Any], limit: int) -> str:
    """``str(items)``, or a prefix of it longer than ``limit`` characters."""
    parts: list[str] = []
    n = 1
    for v in items:
        text = repr(v)
        n += len(text) + (2 if parts else 0)
        parts.append(text)
        if n > limit:
            return "[" + ", ".join(parts)
    return "[" + ", ".join(parts) + "]"


def inspect(
    path: str | Catalog,
    *,
    progress: Callable[[int, int], None] | None = None,
    allow_full_download: bool | None = None,
    key: str | None = None,
) -> InspectResult:
    """Inspect a file, sharded checkpoint or glob (or an already loaded catalog).

    Shapes are row-major for every format; ``tensors`` are the catalog's, sorted by name;
    ``parameters_by_dtype`` and ``bytes_by_dtype`` use the file's dtype names, GGUF's
    upper-cased (``F32``, ``Q4_K``: :meth:`InspectResult.dtype_of`); a file without tensors
    has empty ``tensors``, ``parameters_by_dtype`` and ``bytes_by_dtype``.
    ``progress(done, total)`` is passed to :func:`~tensorfile.ops.hash.structural_hash` (the
    one step that can take long: a vocabulary-sized GGUF header). ``allow_full_download``:
    see :func:`tensorfile.sources.open_path`. ``key`` reads one dictionary of a PyTorch
    pickle (``"model_state_dict"``); a pickle's entries that are not tensors are its
    metadata, and ``not_tensors`` describes them (see :mod:`tensorfile.formats.torch_pickle`).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
        >>> save_file({"w": np.zeros((2, 3), np.float32)}, path)
        >>> r = inspect(path)
        >>> [(t.name, r.dtype_of(t), t.shape) for t in r.tensors], r.parameters_by_dtype
        ([('w', 'F32', (2, 3))], {'F32': 6})
    """
    allow = allow_full_download
    s = load(path, allow_full_download=allow, key=key) if isinstance(path, str) else path
    params: dict[str, int] = defaultdict(int)
    nbytes: dict[str, int] = defaultdict(int)
    tensors = tuple(s.by_name())
    for t in tensors:
        dt = file_dtype(s.format, t)
        params[dt] += t.numel
        nbytes[dt] += t.nbytes
    return InspectResult(
        format=s.format,
        path=s.path or "",
        version=s.version,
        header_size=s.header_size,
        tensor_count=len(tensors),
        parameter_count=sum(params.values()),
        parameters_by_dtype=dict(sorted(params.items())),
        bytes_by_dtype=dict(sorted(nbytes.items())),
        total_bytes=sum(nbytes.values()),
        metadata=s.metadata,
        structural_hash=structural_hash(s, progress=progress),
        tensors=tensors,
        shards=s.shards,
        bytes_read=s.bytes_read,
        not_tensors=not_tensors(s),
    )


def not_tensors(cat: Catalog) -> dict[str, str]:
    """What the entries of ``cat`` that are not tensors are, by name (a PyTorch pickle's
    ``epoch``, ``char2idx``...; empty for the other formats).

    Example:
        >>> extra = {"not_tensors": {"epoch": "int"}}
        >>> not_tensors(Catalog("pytorch", {"epoch": "3"}, {}, 0, 0, extra=extra))
        {'epoch': 'int'}
    """
    found = cat.extra.get("not_tensors")
    return dict(found) if isinstance(found, Mapping) else {}


def not_tensors_text(described: Mapping[str, str], limit: int | None = 8) -> str:
    """The entries that are not tensors in one line, the first ``limit`` of them by name
    (None: all).

    Example:
        >>> not_tensors_text({"epoch": "int", "cer": "float", "char2idx": "dict of 80 ints"}, 2)
        'epoch (int), cer (float) and 1 more'
    """
    items = list(described.items())
    shown = items if limit is None else items[:limit]
    text = ", ".join(f"{name} ({what})" for name, what in shown)
    return text + (f" and {len(items) - len(shown):,} more" if len(shown) < len(items) else "")


@dataclass(frozen=True)
class ModuleGroup:
    """Tensors sharing a dotted module prefix, with subtotals."""

    prefix: str
    parameters: int
    bytes: int
    tensors: tuple[TensorInfo, ...]
    children: tuple[ModuleGroup, ...]


def module_tree(tensors: Sequence[TensorInfo], prefix: str = "") -> ModuleGroup:
    """Group tensors by dotted name components (``model.layers.0.attn.q.weight`` under
    ``model.layers.0`` → ``model.layers.0.attn``...), each group with parameter and byte
    subtotals. A chain of groups that all hold the same tensors is collapsed into one
    (``model.layers.0`` rather than ``model`` → ``model.layers`` → ``model.layers.0``).

    ``prefix`` is the group's own prefix: every tensor's name starts with ``prefix + "."``.
    The tree is built without recursion and in time proportional to the names' total length,
    so a name of 100,000 dots is one group, not 100,000 nested calls.

    Example:
        >>> from tensorfile.core.catalog import ByteRange, Component, TensorInfo
        >>> from tensorfile.core.dtypes import from_name
        >>> data = {"data": Component(ByteRange(0, 8), from_name("F32"))}
        >>> names = ("a.b.c.w", "a.b.c.v", "a.x")
        >>> ts = [TensorInfo(n, from_name("F32"), (2,), data) for n in names]
        >>> root = module_tree(ts)
        >>> [(g.prefix, g.parameters) for g in root.children[0].children]
        [('a.b.c', 4)]
    """
    # one frame per group, in creation order: parents before their children
    frames = [_Frame(prefix, len(prefix) + 1 if prefix else 0, list(tensors))]
    pos = 0
    while pos < len(frames):
        frame = frames[pos]
        pos += 1
        cut = frame.cut  # where the names go on below the group's prefix
        groups: dict[str, list[TensorInfo]] = defaultdict(list)
        for t in frame.members:
            dot = t.name.find(".", cut)
            if dot < 0:
                frame.leaves.append(t)
            else:
                groups[t.name[cut:dot]].append(t)
        for head in sorted(groups):
            members = groups[head]
            end = cut + len(head)  # the group's prefix is members[i].name[:end]
            while True:  # collapse a chain of groups holding the same tensors
                first = members[0].name
                nxt = first.find(".", end + 1)
                if nxt < 0:
                    break
                step = first[end : nxt + 1]  # ".component." shared by every member?
                if not all(m.name.startswith(step, end) for m in members):
                    break
                end = nxt
            child = _Frame(members[0].name[:end], end + 1, members)
            frame.children.append(child)
            frames.append(child)
    built: dict[int, ModuleGroup] = {}
    for frame in reversed(frames):  # children before their parents
        kids = tuple(built.pop(id(c)) for c in frame.children)
        built[id(frame)] = ModuleGroup(
            frame.prefix,
            sum(t.numel for t in frame.leaves) + sum(k.parameters for k in kids),
            sum(t.nbytes for t in frame.leaves) + sum(k.bytes for k in kids),
            tuple(frame.leaves),
            kids,
        )
    return built[id(frames[0])]


@dataclass
class _Frame:
    """A group while the tree is built."""

    prefix: str
    cut: int
    members: list[TensorInfo]
    leaves: list[TensorInfo] = field(default_factory=list)
    children: list[_Frame] = field(default_factory=list)
