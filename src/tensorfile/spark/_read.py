"""Reading a dataset from Spark: partitions of whole shards, filters pushed down to the
shards that hold the keys, and only the selected columns' bytes read.

* **Partitions.** Consecutive shards are grouped into partitions of about
  ``partition_size_mb`` (default 128, Spark's ``maxPartitionBytes``), but into at least
  ``partitions`` of them (default: the CPUs of the planning machine) while there are shards
  enough: a task per 4 MiB shard costs Spark more than reading it.
* **Columns.** Only the columns of the read schema are read (``.schema(...)`` with a subset,
  or the ``columns`` option; Spark does not pass a ``select`` down to Python data sources):
  each task reads those tensors' byte ranges and no others.
* **Key filters** (KV datasets, rows layout): ``key == v``, ``key IN (...)`` and
  ``key LIKE 'p%'`` (``startswith``) on the key column are pushed down (``pushFilters``):
  the partitions hold only the shards that hold matching keys, found in the
  ``_tensor_index.parquet`` when it is current, else in the shard headers, and each task
  returns only the matching keys. Spark runs pushdown only with
  ``spark.sql.python.filterPushdown.enabled``, which registering the data source turns on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    StringStartsWith,
)
from pyspark.sql.types import StructType

from ..core.errors import InvalidArgumentError, SourceError
from ..dataset.layout.index import read_index
from ..dataset.layout.manifest import Manifest, ShardEntry, kv_name, load_manifest
from ..dataset.layout.storage import Store
from ..dataset.reading.samples import open_shard
from ..dataset.writing.options import column_list
from ._arrow import batch_rows, files_batch, kv_rows
from ._types import key_field

__all__ = ["READ_OPTIONS", "Reader", "group_shards"]

READ_OPTIONS = {"path", "layout", "columns", "storage_options", "partition_size_mb", "partitions"}


@dataclass
class ShardGroup(InputPartition):
    """One task's shards and, with pushed-down key filters, the filters (applied per key)."""

    entries: list[ShardEntry]
    filters: list[tuple[str, Any]] = field(default_factory=list)


def group_shards(entries: Sequence[ShardEntry], least: int, size: int) -> list[list[ShardEntry]]:
    """Consecutive ``entries`` in groups of about ``size`` bytes, at least ``least`` groups
    (fewer only when there are fewer entries), balanced by bytes.

    Example:
        >>> es = [ShardEntry(f"s{i}.safetensors", 1, 10) for i in range(5)]
        >>> [len(g) for g in group_shards(es, 2, 1000)], [len(g) for g in group_shards(es, 1, 20)]
        ([3, 2], [2, 2, 1])
    """
    if not entries:
        return []
    total = sum(max(e.bytes, 1) for e in entries)
    n = min(len(entries), max(least, math.ceil(total / max(size, 1))))
    groups: list[list[ShardEntry]] = [[]]
    done = 0
    for i, e in enumerate(entries):
        if groups[-1] and len(groups) < n:
            behind = done * n >= total * len(groups)  # this group has its share
            needed = len(entries) - i <= n - len(groups)  # one entry left per group to fill
            if behind or needed:
                groups.append([])
        groups[-1].append(e)
        done += max(e.bytes, 1)
    return groups


def _positive(options: dict[str, Any], name: str, default: float) -> float:
    raw = next((v for k, v in options.items() if k.lower() == name), None)
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise InvalidArgumentError(f"the {name} option must be a positive number, got {raw!r}")
    return value


class Reader(DataSourceReader):
    """The data source's reader (see the module docstring)."""

    def __init__(self, store: Store, options: dict[str, Any], schema: StructType) -> None:
        unknown = sorted({k.lower() for k in options} - READ_OPTIONS)
        if unknown:
            raise InvalidArgumentError(f"unknown read option(s): {', '.join(unknown)}")
        self.store = store
        self.path = store.url()
        self.layout = str(options.get("layout", "rows")).lower()
        if self.layout not in ("rows", "files"):
            raise InvalidArgumentError(f"layout must be rows or files, got {self.layout!r}")
        wanted = [f.name for f in schema.fields]
        if options.get("columns"):
            keep = set(column_list(str(options["columns"])))
            wanted = [w for w in wanted if w in keep]
        self.columns = wanted
        self.schema = schema
        self.size = int(_positive(options, "partition_size_mb", 128) * (1 << 20))
        self.least = int(_positive(options, "partitions", os.cpu_count() or 1))
        self.filters: list[tuple[str, Any]] = []
        self._manifest: Manifest | None = None

    def _strict_manifest(self) -> Manifest:
        # strict: the folder, and every listed shard a regular file inside it of its size
        if self._manifest is None:
            self._manifest = load_manifest(self.store, strict=True)
        return self._manifest

    # -- pushdown -----------------------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take the key filters a KV dataset can answer from its index or shard headers;
        give back every other filter (Spark applies those)."""
        manifest = self._strict_manifest()
        key = key_field(manifest) if manifest.mode == "kv" and self.layout == "rows" else None
        for f in filters:
            taken = key is not None and _key_filter(f, key)
            if taken is None or taken is False:
                yield f
            else:
                self.filters.append(taken)

    # -- planning -----------------------------------------------------------------------

    def partitions(self) -> Sequence[InputPartition]:
        manifest = self._strict_manifest()
        shards = list(manifest.shards)
        if self.filters:
            shards = self._shards_with_keys(manifest, shards)
        return [
            ShardGroup(g, list(self.filters)) for g in group_shards(shards, self.least, self.size)
        ]

    def _shards_with_keys(self, manifest: Manifest, shards: list[ShardEntry]) -> list[ShardEntry]:
        """The shards that hold a key the filters match: from the index when it is current
        (it lists every tensor of every shard), else from each shard's header."""
        match = _matcher(self.filters)
        exact = _exact_keys(self.filters)
        index = read_index(self.store, manifest)
        if index is not None:
            sep = manifest.kv_separator
            columns = manifest.tensor_columns()
            names = (
                [kv_name(k, sep, c) for k in exact for c in columns]
                if exact is not None
                else list(index)
            )
            holding: set[str] = set()
            for name in names:
                shard = index.get(name)
                if shard is not None and _key_of(name, sep, columns) is not None:
                    if match(_key_of(name, sep, columns) or ""):
                        holding.add(shard)
            return [s for s in shards if s.shard_path in holding]
        out = []
        for s in shards:
            reader, keys = open_shard(self.store, s, manifest)  # the header only
            reader.close()
            if any(match(k) for k in keys):
                out.append(s)
        return out

    # -- reading --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ShardGroup):
            return  # Spark's placeholder partition for a dataset without shards
        manifest = load_manifest(self.store)
        match = _matcher(partition.filters) if partition.filters else None
        for entry in partition.entries:
            if entry not in manifest.shards:
                raise SourceError(
                    f"{self.path}: shard {entry.shard_path} is no longer in the manifest (the "
                    "dataset was rewritten during the query)"
                )
            r, keys = open_shard(self.store, entry, manifest)  # header checked
            with r:
                if self.layout == "files":
                    yield files_batch(r, self.schema)
                elif manifest.mode == "batch":
                    yield batch_rows(r, entry, self.schema)
                else:
                    if match is not None:
                        keys = [k for k in keys if match(k)]
                    yield kv_rows(r, manifest, keys, self.schema)


def _key_filter(f: Filter, key: str) -> tuple[str, Any] | None:
    """A pushed-down filter on the key column as ``(kind, value)``, or None."""
    attr = getattr(f, "attribute", None)
    if attr != (key,):
        return None
    value = getattr(f, "value", None)
    if isinstance(f, EqualTo) and isinstance(value, str):
        return ("eq", value)
    if (
        isinstance(f, In)
        and isinstance(value, tuple | list)
        and all(isinstance(v, str) for v in value)
    ):
        return ("in", frozenset(value))
    if isinstance(f, StringStartsWith) and isinstance(value, str):
        return ("prefix", value)
    return None


def _matcher(filters: Sequence[tuple[str, Any]]) -> Callable[[str], bool]:
    """A test of a key against all ``filters`` (they are ANDed)."""

    def one(kind: str, value: Any, k: str) -> bool:
        if kind == "eq":
            return bool(k == value)
        if kind == "in":
            return k in value
        return k.startswith(value)

    return lambda k: all(one(kind, value, k) for kind, value in filters)


def _exact_keys(filters: Sequence[tuple[str, Any]]) -> set[str] | None:
    """The keys an ``==``/``IN`` filter allows (the intersection of them), or None when
    only prefixes constrain the keys."""
    sets = [{v} if kind == "eq" else set(v) for kind, v in filters if kind in ("eq", "in")]
    if not sets:
        return None
    out = sets[0]
    for s in sets[1:]:
        out &= s
    return out


def _key_of(name: str, sep: str, columns: list[str]) -> str | None:
    """The key of a KV tensor name ``{key}{sep}{column}``, None for another name."""
    for col in sorted(columns, key=len, reverse=True):
        if name.endswith(sep + col):
            return name[: -len(sep + col)]
    return None
