"""Arrow record batches of a shard, as Spark's Python data source reader hands them over:
the samples of a batch shard, the keys of a KV shard, or the tensors of ``layout=files``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, DoubleType, StructField, StructType

from ..core.errors import UnsupportedError
from ..core.reader import Reader
from ..dataset.layout.manifest import Manifest, ShardEntry
from ..dataset.reading.samples import kv_sample
from ._types import TENSOR_STRUCT, key_field

__all__ = ["batch_rows", "files_batch", "kv_rows"]


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
        want = np.float64 if isinstance(element, DoubleType) else np.float32
        base = tensor.astype(want, copy=False)
    elif tensor.dtype.kind in "iub":
        base = tensor.astype(_arrow_type(element).to_pandas_dtype(), copy=False)
    sample = tuple(tensor.shape[1:])
    arr = _nested(np.ascontiguousarray(base), rows, sample, _arrow_type(element))
    return arr.cast(_arrow_type(field.dataType))  # Spark's list field names and nullability


def _stored(r: Reader, name: str) -> np.ndarray[Any, Any]:
    """The tensor as stored: a read-only view of the mapped file where the shard is local
    (Arrow then takes the values without a copy: the view keeps the mapping alive), else a
    copy read from the source."""
    try:
        return r.view(name)
    except UnsupportedError:  # not mappable (a remote shard), or bit-packed
        return r.get_tensor(name)


def batch_rows(r: Reader, shard: ShardEntry, schema: StructType) -> pa.RecordBatch:
    rows = shard.samples  # the real rows; padding rows after them are not returned
    arrays, names = [], []
    for field in schema.fields:
        tensor = _stored(r, field.name)[:rows]
        arrays.append(_column_array(tensor, rows, field))
        names.append(field.name)
    return _record_batch(arrays, names, schema)


def kv_rows(r: Reader, manifest: Manifest, keys: list[str], schema: StructType) -> pa.RecordBatch:
    sep, key = manifest.kv_separator, key_field(manifest)
    wanted = [f.name for f in schema.fields if f.name != key]
    samples = [kv_sample(r, k, wanted, sep, strict=True) for k in keys]
    arrays, names = [], []
    for field in schema.fields:
        if field.name == key:
            arrays.append(pa.array(keys, pa.string()))
        else:
            # popped: a column's tensors are freed once stacked
            stacked = np.stack([s.pop(field.name) for s in samples]) if keys else np.empty((0,))
            arrays.append(_column_array(stacked, len(keys), field))
        names.append(field.name)
    return _record_batch(arrays, names, schema)


def files_batch(r: Reader, schema: StructType) -> pa.RecordBatch:
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
