"""``dataset_manifest.json`` and ``_tensor_index.parquet`` (§2.2 and §2.3 of the Spark spec).

The manifest lists the shards (sorted by path) with their sample counts and file sizes, the
totals, and the schema of every tensor key. tensorfile adds one field the schema allows, a
``tensorfile`` object recording the write mode, the columns and the KV separator, so readers
need not guess them. A dataset written from an empty input has an empty shard list, which the
JSON schema's ``minItems: 1`` does not allow; tensorfile writes and reads it anyway. A folder
of shards without a manifest is read through one built from its files (:func:`load_manifest`).

Example:
    >>> m = Manifest([ShardEntry("part-00000-0000-x.safetensors", 4, 100)],
    ...              {"x": {"dtype": "F32", "shape": [4, 2]}}, mode="batch", columns=["x"])
    >>> Manifest.from_json(m.to_json()).total_samples
    4
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..core.atomic import atomic_write, write_all
from ..core.errors import FormatError, InvalidArgumentError, SourceError
from ..formats import open_reader

__all__ = [
    "INDEX_NAME",
    "MANIFEST_NAME",
    "Manifest",
    "ShardEntry",
    "kv_name",
    "load_manifest",
    "read_manifest",
    "scan_folder",
    "shard_file",
    "split_key",
    "write_index",
]

MANIFEST_NAME = "dataset_manifest.json"
INDEX_NAME = "_tensor_index.parquet"


@dataclass(frozen=True)
class ShardEntry:
    """One shard: its file name (relative to the dataset folder), samples and bytes."""

    shard_path: str
    samples_count: int
    bytes: int


@dataclass
class Manifest:
    """The manifest of a dataset."""

    shards: list[ShardEntry]
    schema: dict[str, dict[str, Any]]
    mode: str = "batch"
    columns: list[str] = field(default_factory=list)
    kv_separator: str = "__"
    name_col: str | None = None

    def tensor_columns(self) -> list[str]:
        """The tensor columns (recorded by tensorfile, else derived from the schema)."""
        if self.columns:
            return list(self.columns)
        if self.mode == "batch":
            return sorted(self.schema)
        return sorted({k.rpartition(self.kv_separator)[2] for k in self.schema})

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
        """Samples in all shards."""
        return sum(s.samples_count for s in self.shards)

    @property
    def total_bytes(self) -> int:
        """Bytes of all shard files."""
        return sum(s.bytes for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        """The manifest document."""
        return {
            "format_version": "1.0",
            "safetensors_version": "1.0",
            "total_samples": self.total_samples,
            "total_bytes": self.total_bytes,
            "shards": [
                {"shard_path": s.shard_path, "samples_count": s.samples_count, "bytes": s.bytes}
                for s in sorted(self.shards, key=lambda s: s.shard_path)
            ],
            "schema": self.schema,
            "tensorfile": {
                "mode": self.mode,
                "columns": self.columns,
                "kv_separator": self.kv_separator,
                "name_col": self.name_col,
            },
        }

    @classmethod
    def from_json(cls, doc: Any, where: str = "the manifest") -> Manifest:
        """Parse and check a manifest document."""
        if not isinstance(doc, dict):
            raise FormatError(f"{where} is not a JSON object")
        for key in ("format_version", "total_samples", "total_bytes", "shards"):
            if key not in doc:
                raise FormatError(f"{where} has no {key!r}")
        if doc["format_version"] != "1.0":
            raise FormatError(f"{where}: format_version {doc['format_version']!r} is not 1.0")
        shards = []
        for i, s in enumerate(doc["shards"] if isinstance(doc["shards"], list) else []):
            try:
                entry = ShardEntry(str(s["shard_path"]), int(s["samples_count"]), int(s["bytes"]))
            except (KeyError, TypeError, ValueError):
                raise FormatError(f"{where}: shard {i} is malformed: {s!r}") from None
            if os.path.isabs(entry.shard_path) or ".." in entry.shard_path.split("/"):
                raise FormatError(f"{where}: shard path {entry.shard_path!r} leaves the dataset")
            shards.append(entry)
        extra_raw, schema_raw = doc.get("tensorfile"), doc.get("schema")
        extra: dict[str, Any] = extra_raw if isinstance(extra_raw, dict) else {}
        schema: dict[str, Any] = schema_raw if isinstance(schema_raw, dict) else {}
        mode = extra.get("mode") or "batch"
        return cls(
            shards,
            dict(schema),
            mode=str(mode),
            columns=[str(c) for c in extra.get("columns") or []],
            kv_separator=str(extra.get("kv_separator", "__")),
            name_col=str(extra["name_col"]) if extra.get("name_col") else None,
        )

    def write(self, folder: str) -> None:
        """Write ``dataset_manifest.json`` atomically (temporary file + rename)."""
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"
        with atomic_write(os.path.join(folder, MANIFEST_NAME), fsync=True) as fd:
            write_all(fd, memoryview(text.encode()))


def shard_file(folder: str, shard: ShardEntry) -> str:
    """The path of ``shard``'s file in the dataset folder ``folder``."""
    return os.path.join(folder, shard.shard_path)


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


def read_manifest(folder: str) -> Manifest | None:
    """The manifest of the dataset in ``folder``, or None when there is none."""
    path = os.path.join(folder, MANIFEST_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise FormatError(f"{path} is not valid JSON: {exc}") from exc
    return Manifest.from_json(doc, path)


def scan_folder(folder: str) -> Manifest:
    """A batch-mode manifest built from the ``*.safetensors`` files of ``folder`` (name order),
    for datasets written without one: a shard's samples are the shared length of its tensors'
    first axis (1 when they disagree)."""
    shards = []
    schema: dict[str, dict[str, Any]] = {}
    for file in sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors"))):
        with open_reader(file) as r:
            names = r.keys()
            lead = {r.info(n).shape[0] for n in names if r.info(n).shape}
            for n in names:
                info = r.info(n)
                schema.setdefault(n, {"dtype": info.dtype.name, "shape": list(info.shape)})
        shards.append(
            ShardEntry(
                os.path.basename(file), lead.pop() if len(lead) == 1 else 1, os.path.getsize(file)
            )
        )
    return Manifest(shards, schema, mode="batch", columns=sorted(schema))


def load_manifest(folder: str, *, strict: bool = False) -> Manifest:
    """The manifest of the dataset in ``folder``, or, without one, :func:`scan_folder`'s.

    With ``strict`` (what :func:`tensorfile.dataset.open` does) the folder is checked first and
    every shard the manifest lists must exist.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile.safetensors.numpy import save_file
        >>> folder = tempfile.mkdtemp()
        >>> save_file({"x": np.zeros((3, 2), np.float32)}, os.path.join(folder, "a.safetensors"))
        >>> m = load_manifest(folder, strict=True)
        >>> m.mode, m.total_samples, m.sample_schema()
        ('batch', 3, {'x': {'dtype': 'F32', 'shape': [2]}})
    """
    if strict and not os.path.isdir(folder):
        raise InvalidArgumentError(f"{folder} is not a dataset folder")
    manifest = read_manifest(folder)
    if manifest is None:
        if not os.path.isdir(folder):
            raise InvalidArgumentError(f"{folder} is not a dataset folder")
        manifest = scan_folder(folder)
    if strict:
        for s in manifest.shards:
            if not os.path.exists(shard_file(folder, s)):
                raise FormatError(f"{folder}: the manifest lists {s.shard_path}, which is missing")
    return manifest


def write_index(
    folder: str, rows: list[tuple[str, str, list[int], str]], *, final: bool = True
) -> str:
    """Write ``_tensor_index.parquet`` (one file): tensor_key, file_name, shape, dtype.

    With ``final=False`` the file is left under a temporary name (returned) for the caller to
    rename once the manifest is committed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "tensor_key": pa.array([r[0] for r in rows], pa.string()),
            "file_name": pa.array([r[1] for r in rows], pa.string()),
            "shape": pa.array([r[2] for r in rows], pa.list_(pa.int32())),
            "dtype": pa.array([r[3] for r in rows], pa.string()),
        }
    )
    target = os.path.join(folder, INDEX_NAME)
    tmp = os.path.join(folder, f".{INDEX_NAME}.{os.getpid()}.{id(rows):x}.tmp")
    try:
        pq.write_table(table, tmp)
        if final:
            os.replace(tmp, target)
            return target
        return tmp
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise SourceError(f"cannot write {target}: {exc.strerror or exc}") from exc
        raise
