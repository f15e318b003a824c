"""``SafetensorsDataSource``: write and read datasets of safetensors shards from Spark.

Register it once per session, then use the format name ``safetensors``::

    from tensorfile.spark import SafetensorsDataSource
    spark.dataSource.register(SafetensorsDataSource)  # or tensorfile.spark.configure(spark)
    (df.write.format("safetensors").mode("overwrite")
       .option("batch_size", 1024).option("generate_index", "true").save("/data/ds"))
    spark.read.format("safetensors").load("/data/ds")

The writer is an Arrow writer (``DataSourceArrowWriter``): each task receives its partition
as Arrow record batches and writes its shards with :mod:`tensorfile.dataset`, into a staging
folder under the output path. The driver's ``commit`` moves the committed shards into place,
writes the manifest atomically and the index, and only then, for ``overwrite``, removes the
previous dataset's files; ``abort`` removes the staging folder. Python data sources support
the ``append`` and ``overwrite`` save modes (Spark refuses the others itself).

The reader returns one row per sample (batch mode) or per key (KV mode), one partition per
shard; the zero rows of a padded shard (``tail_strategy="pad"``: the manifest's
``samples_count`` counts them, as the reference connector writes it, and tensorfile's
``tensorfile.real_samples`` says how many rows are real) are not returned.
``layout="files"`` returns one row per file whose columns are the spec's tensor structs
``{data: binary, shape: array<int>, dtype: string}``, the tensors as stored (padding
included). Pass ``.schema(...)`` with a
subset of the columns (or ``option("columns", "a,b")``) to read only those.

Both sides trust the dataset folder no more than :mod:`tensorfile.dataset` does: the driver
checks the manifest and every listed shard file before planning partitions, each task checks
its shard's header against the manifest
(:func:`~tensorfile.dataset.reading.samples.open_shard`), and an overwrite deletes only what
:func:`~tensorfile.dataset.layout.files.deletable` allows. A lying manifest or shard fails the
query with tensorfile's error (``FormatError: ...``) in the message Spark raises in the
driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    StructField,
    StructType,
)

from ..core.errors import InvalidArgumentError
from ..dataset.layout.manifest import load_manifest
from ..dataset.layout.storage import Store, storage_for
from ..dataset.writing import columns, writer
from ..dataset.writing.options import WriteOptions, column_list, parse_options
from ._read import Reader
from ._types import TENSOR_STRUCT, row_schema
from .workers import prepare_driver

__all__ = ["SafetensorsDataSource"]


@dataclass
class _Commit(WriterCommitMessage):
    """What one task attempt wrote: the commit message."""

    result: writer.TaskResult


class SafetensorsDataSource(DataSource):
    """The ``safetensors`` format for ``spark.read`` and ``DataFrame.write``.

    Registering it (``spark.dataSource.register(SafetensorsDataSource)``) also settles which
    Python interpreter Spark's workers run (:mod:`tensorfile.spark.workers`): with a local
    master and no ``PYSPARK_PYTHON``, the driver's own; one that cannot import tensorfile is
    an :class:`~tensorfile.errors.UnsupportedError` at registration, not a
    ``ModuleNotFoundError`` in the workers."""

    @classmethod
    def name(cls) -> str:
        # PySpark asks for the name in the driver just before it records the interpreter the
        # workers will run (``sc.pythonExec``): the one moment to choose and check it
        prepare_driver()
        return "safetensors"

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise InvalidArgumentError("give the dataset folder: .save(path) or .load(path)")
        return str(path)

    def _storage(self) -> Store:
        """Where the dataset is: the path (a local folder or an fsspec URL) and the
        ``storage_options`` option (a JSON object) for its filesystem."""
        return storage_for(self._path(), _storage_options(self.options))

    def schema(self) -> StructType:
        manifest = load_manifest(self._storage())
        if str(self.options.get("layout", "rows")).lower() == "files":
            full = StructType(
                [StructField(k, TENSOR_STRUCT, True) for k in sorted(manifest.schema)]
            )
        else:
            full = row_schema(manifest)
        wanted = self.options.get("columns")
        if not wanted:
            return full
        keep = column_list(str(wanted))
        names = {f.name for f in full.fields}
        missing = [c for c in keep if c not in names]
        if missing:
            raise InvalidArgumentError(f"column(s) {', '.join(missing)} are not in the dataset")
        return StructType([f for f in full.fields if f.name in keep])

    def reader(self, schema: StructType) -> DataSourceReader:
        return Reader(self._storage(), dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options = {
            k: v for k, v in self.options.items() if k.lower() not in ("path", "storage_options")
        }
        opts = parse_options(options)
        return _Writer(self._storage(), opts, "overwrite" if overwrite else "append")


def _storage_options(options: Any) -> dict[str, Any] | None:
    """The ``storage_options`` option: a JSON object (keys are matched case-insensitively,
    as Spark's options are)."""
    raw = next((v for k, v in options.items() if k.lower() == "storage_options"), None)
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(str(raw))
    except ValueError as exc:
        raise InvalidArgumentError(f"the storage_options option is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"the storage_options option must be a JSON object, got {type(value).__name__}"
        )
    return value


# -- writing ----------------------------------------------------------------------------


class _Writer(DataSourceArrowWriter):
    def __init__(self, store: Store, opts: WriteOptions, mode: str) -> None:
        self.store = store
        self.opts = opts
        self.mode = mode
        self.job = writer.new_job()
        writer.make_folder(store)
        writer.start_job(store, self.job)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Commit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task_id = ctx.partitionId() if ctx is not None else 0
        batches = list(iterator)
        folder = writer.staging_folder(self.store, self.job, task_id)
        if not batches:
            return _Commit(writer.TaskResult(folder, [], []))
        table = pa.Table.from_batches(batches)
        cols, rows, keys = columns.columns_and_keys(table, self.opts)
        result = writer.write_task(cols, rows, keys, self.opts, folder, task_id, self.store)
        return _Commit(result)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        results = [m.result for m in messages if isinstance(m, _Commit)]
        writer.commit(self.store, results, mode=self.mode, opts=self.opts, job=self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        writer.abort(self.store, self.job)
