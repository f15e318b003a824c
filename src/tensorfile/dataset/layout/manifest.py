"""``dataset_manifest.json`` and ``_tensor_index.parquet`` (§2.2 and §2.3 of the Spark spec).

The manifest lists the shards (sorted by path) with their sample counts and file sizes, the
totals, and the schema of every tensor key. A shard's ``samples_count`` is the number of rows
it stores, as the reference connector writes it: a shard zero-padded to a full batch
(``tail_strategy="pad"``) counts its padding rows too, and so does ``total_samples``.
tensorfile adds one field the schema allows (its top level takes any other property), a
``tensorfile`` object recording the write mode, the columns, the KV separator, for padded
shards how many of their rows are real and, for columns of a dtype the schema's ``dtype``
pattern lacks (BOOL, the F8 types, ...), the real dtype::

    "tensorfile": {"mode": "batch", "columns": ["x", "m"], "kv_separator": "__",
                   "name_col": null, "dtypes": {"m": "BOOL"},
                   "real_samples": {"part-00000-0002-<uuid>.safetensors": 3}}

The schema entry of such a column holds a stand-in the JSON schema allows (U8 for BOOL:
:mod:`~tensorfile.dataset.layout.spec_dtypes`), so the manifest validates; a :class:`Manifest`
always holds the real dtypes, and ``tensorfile.dtypes`` is checked against the stand-ins.

``real_samples`` maps the file name of each padded shard to its number of real rows, which
come first; a shard it does not name (every shard, in a manifest without the field, such as
the reference's) holds real rows only. Readers (:func:`tensorfile.dataset.open`, the torch
view, the Spark reader) give the real rows only: :attr:`ShardEntry.samples`. A dataset
written from an empty input has an empty shard list, which the JSON schema's ``minItems: 1``
does not allow; tensorfile writes and reads it anyway. A folder of shards without a manifest
is read through one built from its files (:func:`load_manifest`). A manifest without the
``tensorfile`` block is the reference connector's (``Manifest.layout`` ``"reference"``), whose
mode and columns :func:`load_manifest` tells from its first shard's header, and which
:meth:`Manifest.to_bytes` prints as the reference does
(:mod:`~tensorfile.dataset.layout.reference`).

A manifest is read as a lie until checked: at most :data:`MAX_MANIFEST_BYTES` bytes of a
regular file (a FIFO is refused, never waited on), JSON without NaN, infinities or nesting
deep enough to exhaust the stack, then every field's type and range (counts are integers
from 0 to 2**63-1, totals add up, shard paths are relative ``.safetensors`` paths inside the
folder, each listed once, the schema maps names to a known dtype and a shape of at most
:data:`MAX_DIMS` dimensions, ``tensorfile.real_samples`` is an object naming listed shards of
a batch-mode dataset, each with an integer (not a boolean) from 0 to its ``samples_count``,
``tensorfile.dtypes`` gives columns of the schema known dtypes whose stand-ins the schema holds).
Anything else is a :class:`~tensorfile.errors.FormatError` saying what is wrong and where.

Example:
    >>> m = Manifest([ShardEntry("part-00000-0000-x.safetensors", 4, 100),
    ...               ShardEntry("part-00000-0001-x.safetensors", 4, 100, real_samples=1)],
    ...              {"x": {"dtype": "F32", "shape": [4, 2]}}, mode="batch", columns=["x"])
    >>> doc = m.to_json()
    >>> doc["total_samples"], doc["tensorfile"]["real_samples"]
    (8, {'part-00000-0001-x.safetensors': 1})
    >>> back = Manifest.from_json(doc)
    >>> back.total_samples, back.real_total, [s.samples for s in back.shards]
    (8, 5, [4, 1])
    >>> m = Manifest([], {"m": {"dtype": "BOOL", "shape": [4]}}, columns=["m"])
    >>> doc = m.to_json()
    >>> doc["schema"]["m"]["dtype"], doc["tensorfile"]["dtypes"]
    ('U8', {'m': 'BOOL'})
    >>> Manifest.from_json(doc).schema["m"]["dtype"]
    'BOOL'
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ...core import dtypes
from ...core.errors import FormatError, InvalidArgumentError
from ...core.reader import Reader
from ...formats import SAFETENSORS
from . import reference as _reference
from ._json import MAX_COUNT as _MAX_COUNT
from ._json import count as _count
from ._json import fail as _fail
from ._json import kind as _kind
from ._json import parse_json, tensorfile_block
from ._json import shard_path as _shard_path
from ._json import show as _show
from .files import INDEX_NAME, MANIFEST_NAME
from .spec_dtypes import decode as _decode_dtypes
from .spec_dtypes import encode as _encode_dtypes
from .storage import Location, Store, open_located, open_shard, storage_for

__all__ = [
    "INDEX_NAME",
    "MANIFEST_NAME",
    "MAX_DIMS",
    "MAX_MANIFEST_BYTES",
    "Manifest",
    "ShardEntry",
    "check_capacity",
    "infer_reference",
    "kv_name",
    "load_manifest",
    "parse_json",
    "read_manifest",
    "scan_folder",
    "shard_file",
    "split_key",
]

MAX_MANIFEST_BYTES = 64 << 20
"""The largest manifest read (64 MiB: some 400,000 shards)."""
MAX_DIMS = 64
"""The most dimensions a schema shape may have (numpy's limit)."""


@dataclass(frozen=True)
class ShardEntry:
    """One shard: its file name (relative to the dataset folder), rows and bytes.

    Attributes:
        shard_path: the file name, relative to the dataset folder.
        samples_count: the rows the shard stores (the manifest's ``samples_count``), padding
            rows included.
        bytes: the size of the file.
        real_samples: how many of the rows are real (they come first; the rest is zero
            padding), or None when every row is.

    Example:
        >>> s = ShardEntry("part-00000-0001-x.safetensors", 4, 100, real_samples=3)
        >>> s.samples, s.padding
        (3, 1)
        >>> try:
        ...     ShardEntry("a.safetensors", 4, 100, real_samples=5)
        ... except InvalidArgumentError as exc:
        ...     print(exc)
        shard a.safetensors: real_samples must be an integer from 0 to its samples_count (4), got 5
    """

    shard_path: str
    samples_count: int
    bytes: int
    real_samples: int | None = None

    def __post_init__(self) -> None:
        real = self.real_samples
        if real is not None and (type(real) is not int or not 0 <= real <= self.samples_count):
            raise InvalidArgumentError(
                f"shard {self.shard_path}: real_samples must be an integer from 0 to its "
                f"samples_count ({self.samples_count}), got {real!r}"
            )

    @property
    def samples(self) -> int:
        """The samples a reader gives: the real rows (``samples_count`` less the padding)."""
        return self.samples_count if self.real_samples is None else self.real_samples

    @property
    def padding(self) -> int:
        """The zero rows after the real ones (``tail_strategy="pad"``), else 0."""
        return self.samples_count - self.samples


@dataclass
class Manifest:
    """The manifest of a dataset."""

    shards: list[ShardEntry]
    schema: dict[str, dict[str, Any]]
    mode: str = "batch"
    columns: list[str] = field(default_factory=list)
    kv_separator: str = "__"
    name_col: str | None = None
    layout: str = "tensorfile"
    """``tensorfile`` (with the ``tensorfile`` block) or ``reference`` (as the reference
    connector writes it: :mod:`~tensorfile.dataset.layout.reference`)."""

    def tensor_columns(self) -> list[str]:
        """The tensor columns (recorded by tensorfile, else derived from the schema)."""
        if self.columns:
            return list(self.columns)
        if self.mode == "batch":
            return sorted(self.schema)
        return sorted({k.rpartition(self.kv_separator)[2] for k in self.schema})

    def column_of(self) -> dict[str, str]:
        """The column of each schema key (itself in batch mode; KV: the name's column).

        Example:
            >>> Manifest([], {"a__v": {"dtype": "F32", "shape": [2]}}, mode="kv",
            ...          columns=["v"]).column_of()
            {'a__v': 'v'}
        """
        if self.mode == "batch":
            return {k: k for k in self.schema}
        columns = self.tensor_columns()
        return {k: split_key(k, self.kv_separator, columns)[1] for k in self.schema}

    def sample_schema(self) -> dict[str, dict[str, Any]]:
        """Per column: dtype and the shape of one sample (batch mode drops the batch axis)."""
        out: dict[str, dict[str, Any]] = {}
        for col in self.tensor_columns():
            if self.mode == "batch":
                info = self.schema.get(col)
                if info is not None:
                    out[col] = {"dtype": info["dtype"], "shape": list(info["shape"][1:])}
                continue
            suffix = self.kv_separator + col
            for key, info in self.schema.items():
                if key.endswith(suffix):
                    out[col] = {"dtype": info["dtype"], "shape": list(info["shape"])}
                    break
        return out

    @property
    def total_samples(self) -> int:
        """Rows stored in all shards, padding included (the manifest's ``total_samples``)."""
        return sum(s.samples_count for s in self.shards)

    @property
    def real_total(self) -> int:
        """Samples in all shards, padding rows not counted (what ``len`` of the dataset is)."""
        return sum(s.samples for s in self.shards)

    @property
    def total_bytes(self) -> int:
        """Bytes of all shard files."""
        return sum(s.bytes for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        """The manifest document: valid against the spec's JSON schema (stand-ins for the
        dtypes its pattern lacks, whose real dtypes go to ``tensorfile.dtypes``);
        ``tensorfile.real_samples`` only when a shard is padded."""
        shards = sorted(self.shards, key=lambda s: s.shard_path)
        schema, real_dtypes = _encode_dtypes(self.schema, self.column_of())
        extra: dict[str, Any] = {
            "mode": self.mode,
            "columns": self.columns,
            "kv_separator": self.kv_separator,
            "name_col": self.name_col,
        }
        if real_dtypes:
            extra["dtypes"] = real_dtypes
        real = {s.shard_path: s.real_samples for s in shards if s.real_samples is not None}
        if real:
            extra["real_samples"] = real
        if self.layout == "reference":
            _check_reference(self.schema, self.kv_separator, real_dtypes)
        doc = {
            "format_version": "1.0",
            "safetensors_version": "1.0",
            "total_samples": self.total_samples,
            "total_bytes": self.total_bytes,
            "shards": [
                {"shard_path": s.shard_path, "samples_count": s.samples_count, "bytes": s.bytes}
                for s in shards
            ],
            "schema": schema,
        }
        if self.layout != "reference":
            doc["tensorfile"] = extra
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str = "the manifest") -> Manifest:
        """Parse and check a manifest document (see the module docstring for the checks).

        Example:
            >>> doc = {"format_version": "1.0", "safetensors_version": "1.0",
            ...        "total_samples": -1, "total_bytes": 0, "shards": []}
            >>> try:
            ...     Manifest.from_json(doc)
            ... except FormatError as exc:
            ...     print(exc)
            the manifest: total_samples must be an integer from 0 to 2**63-1, got -1
        """
        if not isinstance(doc, dict):
            _fail(where, f"the document is {_kind(doc)}, not a JSON object")
        for key in ("format_version", "safetensors_version", "total_samples", "total_bytes"):
            if key not in doc:
                _fail(where, f"there is no {key!r} field")
        for key in ("format_version", "safetensors_version"):
            if doc[key] != "1.0":
                _fail(where, f"{key} {_show(doc[key])} is not '1.0'")
        total_samples = _count(doc["total_samples"], "total_samples", where)
        total_bytes = _count(doc["total_bytes"], "total_bytes", where)
        extra = tensorfile_block(doc.get("tensorfile"), where)
        mode = extra["mode"]
        shards = _shards(doc.get("shards", _MISSING), where)
        shards = _real_samples(extra["real_samples"], shards, mode, where)
        for name, total, got in (
            ("total_samples", total_samples, sum(s.samples_count for s in shards)),
            ("total_bytes", total_bytes, sum(s.bytes for s in shards)),
        ):
            if total != got:
                _fail(where, f"{name} is {total}, but the shards add up to {got}")
        schema = _schema(doc.get("schema"), where)
        columns: list[str] = extra["columns"]
        if mode == "batch" and shards:
            missing = [c for c in columns if c not in schema]
            if missing:
                _fail(where, f"the schema does not describe column(s) {', '.join(missing)}")
        if extra["name_col"] is not None and extra["name_col"] in columns:
            _fail(where, f"the key column {extra['name_col']!r} is also a tensor column")
        manifest = cls(
            shards,
            schema,
            mode=mode,
            columns=columns,
            kv_separator=extra["kv_separator"],
            name_col=extra["name_col"],
            layout="tensorfile" if "tensorfile" in doc else "reference",
        )
        manifest.schema = _decode_dtypes(schema, extra["dtypes"], manifest.column_of(), where)
        return manifest

    def to_bytes(self) -> bytes:
        """The text of ``dataset_manifest.json`` (UTF-8; the reference's printing for its
        layout)."""
        if self.layout == "reference":
            return _reference.manifest_bytes(self.to_json())
        return (json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n").encode()

    def write(self, folder: Location) -> None:
        """Write ``dataset_manifest.json`` atomically (temporary file + rename; on an object
        store one object written in one request)."""
        storage_for(folder).write_atomic(MANIFEST_NAME, self.to_bytes())


# -- checks -------------------------------------------------------------------------------

_MISSING: Any = object()


def _shards(raw: Any, where: str) -> list[ShardEntry]:
    if raw is _MISSING:
        _fail(where, "there is no 'shards' field")
    if not isinstance(raw, list):
        _fail(where, f"shards is {_kind(raw)}, not an array")
    out: list[ShardEntry] = []
    seen: set[str] = set()
    for i, s in enumerate(raw):
        what = f"shard {i}"
        if not isinstance(s, dict):
            _fail(where, f"{what} is {_kind(s)}, not an object")
        for key in ("shard_path", "samples_count", "bytes"):
            if key not in s:
                _fail(where, f"{what} has no {key!r}")
        path = _shard_path(s["shard_path"], what, where)
        if path in seen:
            _fail(where, f"{path} is listed twice")
        seen.add(path)
        entry = ShardEntry(
            path,
            _count(s["samples_count"], f"{what} ({path}) samples_count", where),
            _count(s["bytes"], f"{what} ({path}) bytes", where),
        )
        out.append(entry)
    return out


def _schema(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        _fail(where, f"schema is {_kind(raw)}, not an object")
    out: dict[str, dict[str, Any]] = {}
    for name, info in raw.items():
        what = f"schema entry {_show(name)}"
        if not isinstance(info, dict):
            _fail(where, f"{what} is {_kind(info)}, not an object")
        dtype, shape = info.get("dtype"), info.get("shape")
        if not isinstance(dtype, str) or dtype not in dtypes.SAFETENSORS_NAMES:
            _fail(where, f"{what} has dtype {_show(dtype)}, which safetensors does not define")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            _fail(where, f"{what} has shape {_kind(shape)}; want at most {MAX_DIMS} sizes")
        for d in shape:
            if type(d) is not int or not 0 <= d <= _MAX_COUNT:
                _fail(where, f"{what} has a dimension {_show(d)}; want integers from 0 to 2**63-1")
        out[name] = {"dtype": dtype, "shape": list(shape)}
    return out


def _check_reference(
    schema: dict[str, dict[str, Any]], separator: str, stand_ins: dict[str, str]
) -> None:
    """The reference layout holds the reference's dtypes and KV separator only."""
    odd = sorted(stand_ins) + [
        k for k, v in schema.items() if v["dtype"] not in _reference.REFERENCE_DTYPES
    ]
    if odd:
        raise InvalidArgumentError(
            f"the reference layout has no dtype for column(s) {', '.join(sorted(set(odd)))} "
            f"(it knows {', '.join(sorted(_reference.REFERENCE_DTYPES))}); "
            "write layout='tensorfile'"
        )
    if separator != _reference.KV_SEPARATOR:
        raise InvalidArgumentError(
            f"the reference layout does not record a kv_separator; {separator!r} would be "
            f"read back as {_reference.KV_SEPARATOR!r}: write layout='tensorfile'"
        )


def _real_samples(raw: Any, shards: list[ShardEntry], mode: str, where: str) -> list[ShardEntry]:
    """``shards`` with the real row counts of ``tensorfile.real_samples`` (absent or null:
    every row of every shard is real). A count must be an integer (not a boolean) from 0 to
    the shard's ``samples_count``, for a listed shard of a batch-mode dataset: a count that
    lies is refused here, never read as a number of samples."""
    if raw is None:
        return shards
    what = "tensorfile.real_samples"
    if not isinstance(raw, dict):
        _fail(where, f"{what} is {_kind(raw)}, not an object of shard paths and row counts")
    if raw and mode != "batch":
        _fail(where, f"{what} is for batch-mode datasets (padded batches); this one is {mode}")
    by_path = {s.shard_path: i for i, s in enumerate(shards)}
    out = list(shards)
    for path, real in raw.items():
        i = by_path.get(path)
        if i is None:
            _fail(where, f"{what} names {_show(path)}, which is not a shard the manifest lists")
        count = shards[i].samples_count
        if type(real) is not int or not 0 <= real <= count:
            _fail(
                where,
                f"{what} of shard {path} must be an integer from 0 to its samples_count "
                f"({count}), got {_show(real)}",
            )
        out[i] = ShardEntry(path, count, shards[i].bytes, real_samples=real)
    return out


# -- files --------------------------------------------------------------------------------


def shard_file(folder: str, shard: ShardEntry) -> str:
    """The path of ``shard``'s file in the local dataset folder ``folder``."""
    return os.path.join(folder, shard.shard_path)


def shard_reader(store: Store, shard: ShardEntry) -> Reader:
    """A safetensors reader of the listed ``shard`` of the dataset in ``store``, after
    :func:`~.storage.open_shard`'s checks (inside the folder, a regular file, the listed size)."""
    return open_located(open_shard(store, shard.shard_path, shard.bytes))


def kv_name(key: str, separator: str, column: str) -> str:
    """The tensor name of ``column`` of KV key ``key``: ``{key}{separator}{column}``
    (:func:`split_key` takes it apart)."""
    return f"{key}{separator}{column}"


def split_key(name: str, separator: str, columns: list[str]) -> tuple[str, str]:
    """``(key, column)`` of a KV tensor name ``{key}{separator}{column}``: the longest known
    column that ends the name (a column may itself contain the separator)."""
    for col in sorted(columns, key=len, reverse=True):
        if name.endswith(separator + col):
            return name[: -len(separator + col)], col
    key, _, col = name.rpartition(separator)
    return key, col


def _manifest_bytes(folder: Location) -> tuple[str, bytes | None]:
    store = storage_for(folder)
    return store.url(MANIFEST_NAME), store.read_bounded(
        MANIFEST_NAME, "the manifest", MAX_MANIFEST_BYTES
    )


def read_manifest(folder: Location) -> Manifest | None:
    """The manifest of the dataset in ``folder``, or None when there is none.

    Example:
        >>> import os, tempfile
        >>> from tensorfile.errors import SourceError
        >>> folder = tempfile.mkdtemp()
        >>> read_manifest(folder) is None
        True
        >>> os.mkfifo(os.path.join(folder, MANIFEST_NAME))  # refused at once, not waited on
        >>> try:
        ...     read_manifest(folder)
        ... except SourceError as exc:
        ...     print(str(exc).endswith("is a FIFO, not a regular file"))
        True
    """
    path, raw = _manifest_bytes(folder)
    if raw is None:
        return None
    return Manifest.from_json(parse_json(raw, path), path)


def scan_folder(folder: Location) -> Manifest:
    """A batch-mode manifest built from the ``*.safetensors`` files of ``folder`` (name order),
    for datasets written without one: a shard's samples are the shared length of its tensors'
    first axis (1 when they disagree). A file that is not a regular file inside the folder
    (a FIFO, a directory, a symlink out) is refused."""
    store = storage_for(folder)
    shards = []
    schema: dict[str, dict[str, Any]] = {}
    for name in store.list_files():
        if not name.endswith(SAFETENSORS.suffixes):
            continue
        size = store.file_size(name)
        if size is None:  # removed meanwhile
            continue
        entry = ShardEntry(name, 1, size)
        with shard_reader(store, entry) as reader:
            cat = reader.catalog
        lead = {info.shape[0] for info in cat.tensors.values() if info.shape}
        for n, info in cat.tensors.items():
            schema.setdefault(n, {"dtype": info.dtype.name, "shape": list(info.shape)})
        shards.append(ShardEntry(name, lead.pop() if len(lead) == 1 else 1, size))
    return Manifest(shards, schema, mode="batch", columns=sorted(schema))


def load_manifest(folder: Location, *, strict: bool = False) -> Manifest:
    """The manifest of the dataset in ``folder``, or, without one, :func:`scan_folder`'s.

    With ``strict`` (what :func:`tensorfile.dataset.open` does) the folder is checked first and
    every shard the manifest lists must be a regular file inside the folder of the listed size
    (:func:`tensorfile.sources.local.paths.check_member`).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> folder = tempfile.mkdtemp()
        >>> save_file({"x": np.zeros((3, 2), np.float32)}, os.path.join(folder, "a.safetensors"))
        >>> m = load_manifest(folder, strict=True)
        >>> m.mode, m.total_samples, m.sample_schema()
        ('batch', 3, {'x': {'dtype': 'F32', 'shape': [2]}})
    """
    store = storage_for(folder)
    if strict and store.is_local and not store.is_folder():
        raise InvalidArgumentError(f"{store} is not a dataset folder")
    manifest = read_manifest(store)
    if manifest is None:
        if not store.is_folder():
            raise InvalidArgumentError(f"{store} is not a dataset folder")
        manifest = scan_folder(store)
    else:
        infer_reference(store, manifest)
    if strict:
        for s in manifest.shards:
            store.check_shard(s.shard_path, s.bytes)
        check_capacity(store, manifest)
    return manifest


def infer_reference(store: Store, manifest: Manifest) -> None:
    """Set the mode and columns of a reference manifest (which records neither) from the
    header of its first shard that has samples (:func:`~.reference.infer_mode`); a
    tensorfile manifest is left as it is."""
    if manifest.layout != "reference":
        return
    first = next((s for s in manifest.shards if s.samples_count), None)
    if first is None:
        return
    with shard_reader(store, first) as reader:
        cat = reader.catalog.tensors
    tensors = [(n, list(i.shape)) for n, i in cat.items()]
    try:
        mode, columns = _reference.infer_mode(manifest.schema, first.samples_count, tensors)
    except FormatError as exc:
        raise FormatError(f"{store.url(first.shard_path)}: {exc}") from None
    manifest.mode, manifest.columns = mode, columns
    if mode == "batch" and not manifest.schema:  # a manifest without its optional schema
        manifest.schema = {
            n: {"dtype": i.dtype.name, "shape": list(i.shape)} for n, i in cat.items()
        }


def check_capacity(folder: Location, manifest: Manifest) -> None:
    """Each shard's ``samples_count`` must fit its file, so that no count only the manifest
    claims is reported as a length (``list(ds)`` allocates by ``len(ds)``): a KV sample takes
    at least a byte (its header entry), a batch sample the bits of its columns. When samples
    have no bits, the counts are checked against the shards' headers instead.

    Example:
        >>> m = Manifest([ShardEntry("a.safetensors", 10**6, 100)],
        ...              {"x": {"dtype": "F32", "shape": [4, 2]}})
        >>> try:
        ...     check_capacity("ds", m)
        ... except FormatError as exc:
        ...     print(str(exc).partition("; ")[2])
        its 100 bytes hold at most 12
    """
    schema = manifest.sample_schema()
    bits = sum(
        dtypes.from_safetensors(info["dtype"]).bits * math.prod(info["shape"])
        for info in schema.values()
    )
    for s in manifest.shards:
        room = f"its {s.bytes} bytes hold"
        if manifest.mode == "kv":
            most = s.bytes
        elif bits:
            most = s.bytes * 8 // bits
        else:
            with shard_reader(storage_for(folder), s) as reader:
                cat = reader.catalog
            rows = [i.shape[0] for c, i in cat.tensors.items() if c in schema and i.shape]
            most, room = min(rows, default=0), "its tensors hold"
        if s.samples_count > most:
            raise FormatError(
                f"{folder}: the manifest says shard {s.shard_path} holds {s.samples_count} "
                f"samples; {room} at most {most}"
            )
