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
its shard's header against the manifest (:func:`~tensorfile.dataset.samples.open_shard`), and
an overwrite deletes only what :func:`~tensorfile.dataset.files.deletable` allows. A lying
manifest or shard fails the query with tensorfile's error (``FormatError: ...``) in the
message Spark raises in the driver.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from ..core.errors import InvalidArgumentError, SourceError, UnsupportedError
from ..core.reader import Reader
from ..dataset import convert, writer
from ..dataset.manifest import Manifest, ShardEntry, load_manifest
from ..dataset.options import WriteOptions, column_list, parse_options
from ..dataset.samples import kv_sample, open_shard
from ..dataset.storage import Storage, storage_for
from .workers import prepare_driver

__all__ = ["SafetensorsDataSource"]

_READ_OPTIONS = {"path", "layout", "columns", "storage_options"}

# safetensors dtype -> (Spark element type, numpy type the values are read as)
_SPARK_TYPES: dict[str, tuple[DataType, Any]] = {
    "F16": (FloatType(), np.float32),
    "BF16": (FloatType(), np.float32),
    "F32": (FloatType(), np.float32),
    "F64": (DoubleType(), np.float64),
    "I8": (ByteType(), np.int8),
    "U8": (ShortType(), np.int16),
    "I16": (ShortType(), np.int16),
    "U16": (IntegerType(), np.int32),
    "I32": (IntegerType(), np.int32),
    "U32": (LongType(), np.int64),
    "I64": (LongType(), np.int64),
    "U64": (LongType(), np.int64),
    "BOOL": (BooleanType(), np.bool_),
    "F8_E5M2": (FloatType(), np.float32),
    "F8_E4M3": (FloatType(), np.float32),
}

TENSOR_STRUCT = StructType(
    [
        StructField("data", BinaryType(), False),
        StructField("shape", ArrayType(IntegerType(), False), False),
        StructField("dtype", StringType(), False),
    ]
)


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

    def _storage(self) -> Storage:
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
            full = _row_schema(manifest)
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
        return _Reader(self._storage(), dict(self.options), schema)

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


def _key_field(manifest: Manifest) -> str:
    """The column of a KV dataset's rows that holds the keys."""
    return manifest.name_col or "key"


def _spark_type(dtype: str, shape: Sequence[int]) -> DataType:
    if dtype not in _SPARK_TYPES:
        raise UnsupportedError(
            f"{dtype} tensors cannot be read as Spark columns; the reader handles "
            f"{', '.join(_SPARK_TYPES)} (layout=files reads any dtype as bytes)"
        )
    element: DataType = _SPARK_TYPES[dtype][0]
    for _ in shape:
        element = ArrayType(element, False)
    return element


def _row_schema(manifest: Manifest) -> StructType:
    ds_schema = manifest.sample_schema()
    fields = []
    if manifest.mode == "kv":
        fields.append(StructField(_key_field(manifest), StringType(), False))
    for col, info in ds_schema.items():
        fields.append(StructField(col, _spark_type(info["dtype"], info["shape"]), True))
    return StructType(fields)


# -- writing ----------------------------------------------------------------------------


class _Writer(DataSourceArrowWriter):
    def __init__(self, store: Storage, opts: WriteOptions, mode: str) -> None:
        self.store = store
        self.opts = opts
        self.mode = mode
        self.job = uuid.uuid4().hex
        writer.make_folder(store)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Commit:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task_id = ctx.partitionId() if ctx is not None else 0
        batches = list(iterator)
        folder = writer.staging_folder(self.store, self.job, task_id)
        if not batches:
            return _Commit(writer.TaskResult(folder, [], []))
        table = pa.Table.from_batches(batches)
        cols, rows, keys = convert.columns_and_keys(table, self.opts)
        result = writer.write_task(cols, rows, keys, self.opts, folder, task_id, self.store)
        return _Commit(result)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        results = [m.result for m in messages if isinstance(m, _Commit)]
        writer.commit(self.store, results, mode=self.mode, opts=self.opts, job=self.job)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        writer.abort(self.store, self.job)


# -- reading ----------------------------------------------------------------------------


@dataclass
class _Shard(InputPartition):
    entry: ShardEntry


class _Reader(DataSourceReader):
    def __init__(self, store: Storage, options: dict[str, Any], schema: StructType) -> None:
        unknown = sorted({k.lower() for k in options} - _READ_OPTIONS)
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

    def partitions(self) -> Sequence[InputPartition]:
        # strict: the folder, and every listed shard a regular file inside it of its size
        return [_Shard(s) for s in load_manifest(self.store, strict=True).shards]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, _Shard):
            return  # Spark's placeholder partition for a dataset without shards
        manifest = load_manifest(self.store)
        if partition.entry not in manifest.shards:
            raise SourceError(
                f"{self.path}: shard {partition.entry.shard_path} is no longer in the manifest "
                "(the dataset was rewritten during the query)"
            )
        r, keys = open_shard(self.store, partition.entry, manifest)  # header checked
        with r:
            if self.layout == "files":
                yield _files_batch(r, self.schema)
            elif manifest.mode == "batch":
                yield _batch_rows(r, partition.entry, self.schema)
            else:
                yield _kv_rows(r, manifest, keys, self.schema)


def _nested(
    values: np.ndarray[Any, Any], rows: int, sample: tuple[int, ...], typ: pa.DataType
) -> pa.Array:
    """Arrow (nested) list arrays of ``rows`` samples of shape ``sample``: the leaf values,
    then one level of lists per dimension, innermost first."""
    arr = pa.array(values.reshape(-1), type=typ)
    for depth in range(len(sample) - 1, -1, -1):
        lists = rows * math.prod(sample[:depth])
        offsets = pa.array(np.arange(lists + 1, dtype=np.int32) * sample[depth], pa.int32())
        arr = pa.ListArray.from_arrays(offsets, arr)
    return arr


def _record_batch(arrays: list[pa.Array], names: list[str], schema: StructType) -> pa.RecordBatch:
    """A record batch with exactly the Arrow schema Spark expects for ``schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    fields = {f.name: f for f in schema.fields}
    target = to_arrow_schema(StructType([fields[n] for n in names]))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _arrow_type(dtype: DataType) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dtype)


def _element(dtype: DataType) -> DataType:
    while isinstance(dtype, ArrayType):
        dtype = dtype.elementType
    return dtype


def _column_array(tensor: np.ndarray[Any, Any], rows: int, field: StructField) -> pa.Array:
    element = _element(field.dataType)
    base = tensor
    if tensor.dtype.kind == "f" or "float" in tensor.dtype.name or "bfloat" in tensor.dtype.name:
        base = tensor.astype(np.float64 if isinstance(element, DoubleType) else np.float32)
    elif tensor.dtype.kind in "iub":
        base = tensor.astype(_arrow_type(element).to_pandas_dtype())
    sample = tuple(tensor.shape[1:])
    arr = _nested(np.ascontiguousarray(base), rows, sample, _arrow_type(element))
    return arr.cast(_arrow_type(field.dataType))  # Spark's list field names and nullability


def _batch_rows(r: Reader, shard: ShardEntry, schema: StructType) -> pa.RecordBatch:
    rows = shard.samples  # the real rows; padding rows after them are not returned
    arrays, names = [], []
    for field in schema.fields:
        tensor = r.get_tensor(field.name)[:rows]
        arrays.append(_column_array(tensor, rows, field))
        names.append(field.name)
    return _record_batch(arrays, names, schema)


def _kv_rows(r: Reader, manifest: Manifest, keys: list[str], schema: StructType) -> pa.RecordBatch:
    sep, key_field = manifest.kv_separator, _key_field(manifest)
    wanted = [f.name for f in schema.fields if f.name != key_field]
    samples = [kv_sample(r, k, wanted, sep, strict=True) for k in keys]
    arrays, names = [], []
    for field in schema.fields:
        if field.name == key_field:
            arrays.append(pa.array(keys, pa.string()))
        else:
            # popped: a column's tensors are freed once stacked
            stacked = np.stack([s.pop(field.name) for s in samples]) if keys else np.empty((0,))
            arrays.append(_column_array(stacked, len(keys), field))
        names.append(field.name)
    return _record_batch(arrays, names, schema)


def _files_batch(r: Reader, schema: StructType) -> pa.RecordBatch:
    arrays, names = [], []
    struct_type = _arrow_type(TENSOR_STRUCT)
    for field in schema.fields:
        if field.name in r:
            info = r.info(field.name)
            raw = r.get_tensor(field.name)
            value = {
                "data": np.ascontiguousarray(raw).tobytes() if not info.dtype.is_subbyte else b"",
                "shape": list(info.shape),
                "dtype": info.dtype.name,
            }
            arrays.append(pa.array([value], struct_type))
        else:
            arrays.append(pa.array([None], struct_type))
        names.append(field.name)
    return _record_batch(arrays, names, schema)
