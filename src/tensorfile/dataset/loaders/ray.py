"""A dataset as Ray Data: a ``ray.data`` datasource with one read task per group of shards.

``ray.data.read_datasource(SafetensorsDatasource(path))`` (or ``ds.to_ray()``) gives a
``ray.data.Dataset`` whose blocks are the Arrow tables of :mod:`tensorfile.dataset.arrow`
(same columns and dtype policy), each read task reading whole shards on a Ray worker.
``ray`` is imported only here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import SimpleNamespace
from typing import Any

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from ..layout.manifest import ShardEntry, load_manifest
from ..layout.storage import Location, storage_for
from .arrow import _columns, _shard_batch, arrow_schema

__all__ = ["SafetensorsDatasource", "to_ray"]


class SafetensorsDatasource(Datasource):  # type: ignore[misc]
    """The shards of a tensorfile dataset, for ``ray.data.read_datasource``."""

    def __init__(
        self,
        path: Location,
        *,
        columns: Sequence[str] | None = None,
        low_precision: str = "float32",
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.storage = storage_for(path, storage_options)
        self.manifest = load_manifest(self.storage, strict=True)
        self.columns = _columns(self.manifest, columns)
        self.schema = arrow_schema(self.manifest, self.columns, low_precision)

    def estimate_inmemory_data_size(self) -> int:
        return sum(s.bytes for s in self.manifest.shards)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        shards = [s for s in self.manifest.shards if s.samples]
        n = max(1, min(parallelism, len(shards)))
        groups = [shards[i::n] for i in range(n)] if shards else []
        tasks = []
        for group in groups:
            meta = BlockMetadata(
                num_rows=sum(s.samples for s in group),
                size_bytes=sum(s.bytes for s in group),
                exec_stats=None,
                input_files=tuple(self.storage.url(s.shard_path) for s in group),
            )
            tasks.append(ReadTask(self._reader(group), meta, schema=self.schema))
        return tasks

    def _reader(self, group: list[ShardEntry]) -> Any:
        storage, manifest, schema, columns = self.storage, self.manifest, self.schema, self.columns

        def read() -> Iterable[Any]:
            import pyarrow as pa

            ds = SimpleNamespace(storage=storage, manifest=manifest)
            for shard in group:
                yield pa.Table.from_batches([_shard_batch(ds, shard, schema, columns)])

        return read


def to_ray(ds: Any, columns: Sequence[str] | None = None, **options: Any) -> Any:
    """``ray.data.read_datasource`` of :class:`SafetensorsDatasource` for ``ds``."""
    import ray.data

    return ray.data.read_datasource(SafetensorsDatasource(ds.storage, columns=columns, **options))
