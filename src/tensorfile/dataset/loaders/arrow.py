"""A dataset's samples as Arrow: a ``pyarrow.Table`` or record batches streamed shard by shard.

Each tensor column becomes a column of fixed-size lists (one level per sample dimension;
a scalar column is a plain column) of the Arrow type of its dtype. A KV dataset gets its key
column first (named as the dataset's key column, ``key`` by default).

**Dtypes Arrow lacks** (BF16, the F8 types, the sub-byte F6/F4): with
``low_precision="float32"`` (the default) their values are widened to float32, exactly
(every one of them is a float32); with ``low_precision="binary"`` each sample is kept as its
stored bytes, a ``fixed_size_binary`` of the sample's size, and the field's metadata says
how to read it: ``tensorfile.dtype`` (e.g. ``BF16``) and ``tensorfile.shape`` (JSON).
``np.frombuffer(value, ml_dtypes.bfloat16).reshape(shape)`` gives the sample back.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(6, dtype=np.float32).reshape(3, 2)}, out,
    ...                   batch_size=2, dtype="BF16")
    >>> t = to_arrow(dataset.open(out))
    >>> t.schema.field("x").type, t.column("x").to_pylist()[2]
    (FixedSizeListType(fixed_size_list<item: float>[2]), [4.0, 5.0])
    >>> [b.num_rows for b in iter_arrow(dataset.open(out), 2)]
    [2, 1]
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ...core import dtypes
from ...core.errors import InvalidArgumentError
from ..layout.manifest import Manifest, ShardEntry
from ..reading.samples import kv_sample, open_shard, shard_keys

__all__ = ["LOW_PRECISION", "arrow_schema", "iter_arrow", "to_arrow"]

LOW_PRECISION = ("float32", "binary")

_PRIMITIVE = {
    "BOOL": pa.bool_(),
    "U8": pa.uint8(),
    "I8": pa.int8(),
    "U16": pa.uint16(),
    "I16": pa.int16(),
    "U32": pa.uint32(),
    "I32": pa.int32(),
    "U64": pa.uint64(),
    "I64": pa.int64(),
    "F16": pa.float16(),
    "F32": pa.float32(),
    "F64": pa.float64(),
}


def _check_policy(low_precision: str) -> None:
    if low_precision not in LOW_PRECISION:
        raise InvalidArgumentError(
            f"low_precision must be one of {', '.join(LOW_PRECISION)}, got {low_precision!r}"
        )


def _field(name: str, dtype: str, shape: Sequence[int], low_precision: str) -> pa.Field:
    if dtype not in _PRIMITIVE and low_precision == "binary":
        size = dtypes.from_safetensors(dtype).nbytes(math.prod(shape))
        meta = {"tensorfile.dtype": dtype, "tensorfile.shape": json.dumps(list(shape))}
        return pa.field(name, pa.binary(size), metadata=meta)
    typ: pa.DataType = _PRIMITIVE.get(dtype, pa.float32())
    for n in reversed(shape):
        typ = pa.list_(typ, n)
    return pa.field(name, typ)


def arrow_schema(
    manifest: Manifest, columns: Sequence[str] | None = None, low_precision: str = "float32"
) -> pa.Schema:
    """The Arrow schema of the samples of ``manifest`` (``columns`` of them)."""
    _check_policy(low_precision)
    sample = manifest.sample_schema()
    wanted = _columns(manifest, columns)
    fields = []
    if manifest.mode == "kv":
        fields.append(pa.field(manifest.name_col or "key", pa.string()))
    for c in wanted:
        fields.append(_field(c, sample[c]["dtype"], sample[c]["shape"], low_precision))
    return pa.schema(fields)


def _columns(manifest: Manifest, columns: Sequence[str] | None) -> list[str]:
    every = manifest.tensor_columns()
    if columns is None:
        return every
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"columns must be a list of column names, got {columns!r}")
    missing = [c for c in columns if c not in every]
    if missing:
        raise InvalidArgumentError(
            f"column(s) {', '.join(missing)} are not in the dataset (it has {', '.join(every)})"
        )
    return list(columns)


def _array(values: np.ndarray[Any, Any], field: pa.Field) -> pa.Array:
    """The Arrow array of ``values`` (rows × sample shape) for ``field``."""
    rows = values.shape[0]
    if pa.types.is_fixed_size_binary(field.type):
        raw = np.ascontiguousarray(values).reshape(rows, -1).view(np.uint8)
        buf = pa.py_buffer(raw.tobytes())
        return pa.Array.from_buffers(field.type, rows, [None, buf])
    leaf = field.type
    while pa.types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
    target = leaf.to_pandas_dtype() if not pa.types.is_float16(leaf) else np.float16
    flat = np.ascontiguousarray(values.astype(target, copy=False)).reshape(-1)
    arr: pa.Array = pa.array(flat, type=leaf) if flat.dtype != np.bool_ else pa.array(flat)
    for n in reversed(values.shape[1:]):
        arr = pa.FixedSizeListArray.from_arrays(arr, n)
    return arr


def _shard_batch(
    ds: Any, shard: ShardEntry, schema: pa.Schema, columns: list[str]
) -> pa.RecordBatch:
    manifest = ds.manifest
    reader, keys = open_shard(ds.storage, shard, manifest, manifest.sample_schema())
    with reader:
        if manifest.mode == "batch":
            n = shard.samples
            data = {c: reader.read_slice(c, (slice(0, n),)) for c in columns}
            arrays = [_array(data[c], schema.field(c)) for c in columns]
        else:
            keys = keys or shard_keys(reader, manifest.tensor_columns(), manifest.kv_separator)
            samples = [
                kv_sample(reader, k, columns, manifest.kv_separator, strict=True) for k in keys
            ]
            arrays = [pa.array(keys, pa.string())]
            for c in columns:
                stacked = np.stack([s[c] for s in samples]) if samples else np.empty((0,))
                if not samples:
                    arrays.append(pa.array([], schema.field(c).type))
                else:
                    arrays.append(_array(stacked, schema.field(c)))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def iter_arrow(
    ds: Any,
    batch_size: int,
    columns: Sequence[str] | None = None,
    *,
    low_precision: str = "float32",
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``batch_size`` samples (the last may be shorter), read shard by
    shard: memory holds about one shard and one batch."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be a positive integer, got {batch_size!r}")
    schema = arrow_schema(ds.manifest, columns, low_precision)
    wanted = _columns(ds.manifest, columns)
    pending: list[pa.RecordBatch] = []
    count = 0
    for shard in ds.manifest.shards:
        if not shard.samples:
            continue
        pending.append(_shard_batch(ds, shard, schema, wanted))
        count += pending[-1].num_rows
        while count >= batch_size:
            table = pa.Table.from_batches(pending, schema=schema)
            yield table.slice(0, batch_size).combine_chunks().to_batches()[0]
            rest = table.slice(batch_size)
            pending = rest.to_batches() if rest.num_rows else []
            count -= batch_size
    if count:
        yield pa.Table.from_batches(pending, schema=schema).combine_chunks().to_batches()[0]


def to_arrow(
    ds: Any, columns: Sequence[str] | None = None, *, low_precision: str = "float32"
) -> pa.Table:
    """Every sample as one ``pyarrow.Table`` (``columns`` of them; see the module docstring
    for the dtypes Arrow lacks)."""
    schema = arrow_schema(ds.manifest, columns, low_precision)
    wanted = _columns(ds.manifest, columns)
    batches = [_shard_batch(ds, s, schema, wanted) for s in ds.manifest.shards if s.samples]
    return pa.Table.from_batches(batches, schema=schema)
