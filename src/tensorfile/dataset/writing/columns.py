"""Turn a table (pyarrow, pandas, a dict of numpy arrays) into per-sample tensor columns.

A :class:`Column` holds one array of shape ``[rows, *sample_shape]`` in its safetensors
dtype, or, for the tensor-struct columns of the Spark spec (``{data, shape, dtype}``), one
array per row. Values are converted exactly: integers never pass through doubles, floats
become F16/BF16 with round-to-nearest-even (``rounding="truncate"`` reproduces the reference
connector's bit truncation). Nulls and rows whose shape differs from the others are refused
with an error naming the column and the row.

Example:
    >>> import numpy as np
    >>> cols, n = columns_of({"x": np.arange(6, dtype=np.float32).reshape(3, 2), "id": [1, 2, 3]})
    >>> n, [(c.name, c.dtype, c.sample_shape) for c in cols]
    (3, [('x', 'F32', (2,)), ('id', 'I64', ())])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core import dtypes
from ...core.errors import InvalidArgumentError

__all__ = ["Column", "as_table", "columns_and_keys", "columns_of", "convert_values", "names_of"]

NDArray = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Column:
    """One tensor column: ``values`` of shape ``[rows, *sample_shape]`` in ``dtype``, or
    ``rows`` (one array per row, for tensor-struct columns of varying shapes)."""

    name: str
    dtype: str
    sample_shape: tuple[int, ...]
    values: NDArray | None = None
    rows: list[NDArray] | None = None

    def sample(self, i: int) -> NDArray:
        """Row ``i`` as an array of the sample shape."""
        if self.values is not None:
            return self.values[i]  # type: ignore[no-any-return]
        assert self.rows is not None
        return self.rows[i]

    def take(self, start: int, stop: int) -> NDArray:
        """Rows ``[start, stop)`` stacked: shape ``[stop - start, *sample_shape]``."""
        if self.values is not None:
            return self.values[start:stop]
        assert self.rows is not None
        return (
            np.stack(self.rows[start:stop])
            if stop > start
            else np.empty((0, *self.sample_shape), dtypes.from_safetensors(self.dtype).numpy)
        )


def _f16_truncate(x: NDArray) -> NDArray:
    """float -> float16 by truncating the mantissa (the reference connector's encoding):
    subnormal results flush to zero, overflow becomes infinity, NaN stays NaN."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    sign = ((bits >> 16) & 0x8000).astype(np.uint16)
    exp = ((bits >> 23) & 0xFF).astype(np.int32) - 127 + 15
    mant = ((bits >> 13) & 0x3FF).astype(np.uint16)
    is_nan = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x7FFFFF) != 0)
    is_inf = ((bits & 0x7FFFFFFF) == 0x7F800000) | (exp >= 31)
    out = sign | (np.clip(exp, 0, 31).astype(np.uint16) << 10) | mant
    out = np.where(exp <= 0, sign, out)
    out = np.where(is_inf & ~is_nan, sign | 0x7C00, out)
    out = np.where(is_nan, sign | 0x7E00, out)
    return out.astype(np.uint16).view(np.float16)


def convert_values(values: NDArray, target: str, rounding: str, column: str) -> NDArray:
    """``values`` as safetensors dtype ``target`` (exact for integers)."""
    dt = dtypes.from_safetensors(target)
    src = np.asarray(values)
    if src.dtype.kind in "iu" and dt.kind in ("int", "uint"):
        info = np.iinfo(dt.numpy)
        if src.size and (int(src.min()) < info.min or int(src.max()) > info.max):
            raise InvalidArgumentError(
                f"column {column!r}: values {int(src.min())}..{int(src.max())} do not fit {target}"
            )
        return src.astype(dt.numpy, copy=False)
    if rounding == "truncate" and target == "BF16":
        bits = np.asarray(src, np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(dt.numpy)
    if rounding == "truncate" and target == "F16":
        return _f16_truncate(src)
    return src.astype(dt.numpy, copy=False)  # (a view where no conversion is needed)


def _own_dtype(arr: NDArray, column: str) -> str:
    try:
        return dtypes.from_numpy(arr.dtype).name
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"column {column!r} has values of type {arr.dtype}, which no safetensors dtype holds"
        ) from None


def _from_numpy(name: str, arr: NDArray, options: Any) -> Column:
    if arr.dtype == object:
        raise InvalidArgumentError(f"column {name!r} holds Python objects, not numbers")
    shape = options.shapes.get(name)
    rows = arr.shape[0]
    sample = tuple(arr.shape[1:])
    if shape is not None:
        if math.prod(sample) != math.prod(shape):
            raise InvalidArgumentError(
                f"column {name!r}: samples of {math.prod(sample)} values cannot have shape "
                f"{list(shape)}"
            )
        arr = arr.reshape((rows, *shape))
        sample = tuple(shape)
    # the dtype option converts array columns; a scalar column (an id) keeps its own type
    target = (options.dtype if sample else None) or _own_dtype(arr, name)
    return Column(name, target, sample, convert_values(arr, target, options.rounding, name))


def _rows_array(name: str, items: Sequence[Any]) -> NDArray:
    """One array of a column given as a list of rows (numbers, lists or arrays)."""
    if any(item is None for item in items):
        return _stack_rows(name, items)  # reports the null
    if items and all(type(v) is int for v in items):  # exact, never through doubles
        low, high = min(items), max(items)
        if low >= -(1 << 63) and high < 1 << 63:
            return np.array(items, np.int64)
        if low >= 0 and high < 1 << 64:
            return np.array(items, np.uint64)
        raise InvalidArgumentError(f"column {name!r}: integers {low}..{high} do not fit 64 bits")
    try:
        arr = np.array(items)  # Python ints up to 2**64-1 become uint64, not floats
    except (ValueError, OverflowError):
        return _stack_rows(name, items)  # ragged rows: a clear error
    if arr.dtype == object:
        return _stack_rows(name, items)
    return arr


def _stack_rows(name: str, items: Sequence[Any]) -> NDArray:
    for i, item in enumerate(items):
        if item is None:
            raise InvalidArgumentError(f"column {name!r} has a null in row {i}")
    arrays = [np.asarray(v) for v in items]
    if not arrays:
        return np.empty((0,))
    first = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.shape != first:
            raise InvalidArgumentError(
                f"column {name!r}: row {i} has shape {list(a.shape)}, row 0 has {list(first)}; "
                "every sample of a column must have the same shape"
            )
    return np.stack(arrays)


def _arrow_column(name: str, col: Any, options: Any) -> Column:
    import pyarrow as pa

    if col.null_count:
        first = next(i for i, v in enumerate(col.is_null().to_pylist()) if v)
        raise InvalidArgumentError(f"column {name!r} has a null in row {first}")
    typ = col.type
    if pa.types.is_struct(typ) and {f.name for f in typ} >= {"data", "shape", "dtype"}:
        return _struct_column(name, col.to_pylist(), options)
    depth, inner = 0, typ
    while (
        pa.types.is_list(inner)
        or pa.types.is_large_list(inner)
        or pa.types.is_fixed_size_list(inner)
    ):
        depth, inner = depth + 1, inner.value_type
    if depth == 0:
        arr = col.to_numpy(zero_copy_only=False)
        return _from_numpy(name, np.asarray(arr), options)
    # nested lists: flatten level by level, requiring uniform lengths
    flat = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    rows = len(flat)
    dims: list[int] = []
    level_type = typ
    for level in range(depth):
        if flat.null_count:
            raise InvalidArgumentError(f"column {name!r} has a null inside a sample")
        if pa.types.is_fixed_size_list(level_type):
            width = level_type.list_size
        else:
            lengths = np.diff(np.asarray(flat.offsets))
            width = int(lengths[0]) if lengths.size else 0
            if lengths.size and not np.all(lengths == width):
                bad = int(np.argmax(lengths != width))
                raise InvalidArgumentError(
                    f"column {name!r}: at nesting level {level}, row {bad} has "
                    f"{int(lengths[bad])} values where the first row has {width}; samples "
                    "must have one shape"
                )
        dims.append(width)
        flat = flat.flatten()
        level_type = level_type.value_type
    if flat.null_count:
        raise InvalidArgumentError(f"column {name!r} has a null inside a sample")
    values = np.asarray(flat.to_numpy(zero_copy_only=False))
    arr = values.reshape((rows, *dims))
    return _from_numpy(name, arr, options)


def _struct_column(name: str, items: list[Any], options: Any) -> Column:
    rows: list[NDArray] = []
    dtype = None
    for i, item in enumerate(items):
        if item is None or item.get("data") is None or item.get("shape") is None:
            raise InvalidArgumentError(f"column {name!r}: row {i} has a null tensor")
        dt_name = item.get("dtype")
        try:
            dt = dtypes.from_safetensors(dt_name)
        except (KeyError, TypeError):
            raise InvalidArgumentError(
                f"column {name!r}: row {i} has unknown dtype {dt_name!r}"
            ) from None
        shape = tuple(int(d) for d in item["shape"])
        data = item["data"]
        if len(data) != dt.nbytes(math.prod(shape)):
            raise InvalidArgumentError(
                f"column {name!r}: row {i} holds {len(data)} bytes, a {dt.name} tensor of shape "
                f"{list(shape)} needs {dt.nbytes(math.prod(shape))}"
            )
        if dtype is not None and dt.name != dtype:
            raise InvalidArgumentError(f"column {name!r}: row {i} is {dt.name}, row 0 is {dtype}")
        dtype = dt.name
        rows.append(np.frombuffer(data, dt.numpy).reshape(shape))
    shapes = {r.shape for r in rows}
    if len(shapes) > 1:
        raise InvalidArgumentError(f"column {name!r}: tensors of different shapes {sorted(shapes)}")
    sample = rows[0].shape if rows else ()
    target = options.dtype or dtype or "F32"
    if dtype is not None and target != dtype:  # the dtype option converts values, never bytes
        rows = [convert_values(r, target, options.rounding, name) for r in rows]
    return Column(name, target, tuple(sample), rows=rows)


def names_of(data: Any, column: str) -> list[str]:
    """The key column of KV mode, as strings (no nulls)."""
    values = _raw_column(as_table(data), column)
    out = []
    for i, v in enumerate(values):
        if v is None:
            raise InvalidArgumentError(f"key column {column!r} has a null in row {i}")
        out.append(str(v))
    return out


def _raw_column(data: Any, column: str) -> list[Any]:
    if isinstance(data, Mapping):
        if column not in data:
            raise InvalidArgumentError(f"there is no column {column!r}")
        return (
            list(np.asarray(data[column], dtype=object))
            if not isinstance(data[column], list)
            else data[column]
        )
    if hasattr(data, "column_names"):
        if column not in data.column_names:
            raise InvalidArgumentError(f"there is no column {column!r}")
        values: list[Any] = data.column(column).to_pylist()
        return values
    if hasattr(data, "columns") and hasattr(data, "iloc"):
        if column not in data.columns:
            raise InvalidArgumentError(f"there is no column {column!r}")
        return [
            None if v is None or (isinstance(v, float) and math.isnan(v)) else v
            for v in data[column].tolist()
        ]
    raise InvalidArgumentError(f"cannot read columns from {type(data).__name__}")


def as_table(data: Any) -> Any:
    """pyarrow Table for Arrow inputs (RecordBatch, list of batches), else ``data``."""
    if isinstance(data, Mapping) or not (
        isinstance(data, list | tuple) or type(data).__module__.startswith("pyarrow")
    ):
        return data
    import pyarrow as pa

    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, list | tuple) and data and all(isinstance(b, pa.RecordBatch) for b in data):
        return pa.Table.from_batches(list(data))
    return data


def columns_of(data: Any, options: Any = None) -> tuple[list[Column], int]:
    """The tensor columns of ``data`` (pyarrow Table/RecordBatch(es), pandas DataFrame or a
    dict of arrays) and its number of rows."""
    from .options import WriteOptions

    opts = options if options is not None else WriteOptions(batch_size=1)
    data = as_table(data)
    if isinstance(data, Mapping):
        names = list(data)
    elif hasattr(data, "column_names"):
        names = list(data.column_names)
    elif hasattr(data, "columns") and hasattr(data, "iloc"):
        names = [str(c) for c in data.columns]
    else:
        raise InvalidArgumentError(
            f"cannot write {type(data).__name__}: pass a pyarrow Table or RecordBatch(es), a "
            "pandas DataFrame or a dict of numpy arrays"
        )
    if opts.name_col and opts.name_col not in names:
        raise InvalidArgumentError(f"the key column {opts.name_col!r} does not exist; have {names}")
    wanted = list(opts.columns) if opts.columns else [n for n in names if n != opts.name_col]
    missing = [c for c in wanted if c not in names]
    if missing:
        raise InvalidArgumentError(f"column(s) {', '.join(missing)} do not exist; have {names}")
    if opts.name_col and opts.name_col in wanted:
        raise InvalidArgumentError(
            f"the key column {opts.name_col!r} cannot also be a tensor column"
        )
    if not wanted:
        raise InvalidArgumentError("there is no tensor column to write")
    cols = []
    for name in wanted:
        if isinstance(data, Mapping):
            value = data[name]
            if isinstance(value, np.ndarray) and value.dtype != object:
                cols.append(_from_numpy(name, value, opts))
                continue
            items = list(value)
            if items and isinstance(items[0], dict):
                cols.append(_struct_column(name, items, opts))
                continue
            cols.append(_from_numpy(name, _rows_array(name, items), opts))
        elif hasattr(data, "column_names"):
            cols.append(_arrow_column(name, data.column(name), opts))
        else:
            series = data[name]
            if series.dtype == object:
                items = series.tolist()
                if items and isinstance(items[0], dict):
                    cols.append(_struct_column(name, items, opts))
                    continue
                cols.append(_from_numpy(name, _stack_rows(name, items), opts))
            else:
                if series.isna().any():
                    first = int(np.argmax(series.isna().to_numpy()))
                    raise InvalidArgumentError(f"column {name!r} has a null in row {first}")
                cols.append(_from_numpy(name, series.to_numpy(), opts))
    rows = {len(c.values) if c.values is not None else len(c.rows or []) for c in cols}
    if len(rows) > 1:
        raise InvalidArgumentError(f"columns have different lengths: {sorted(rows)}")
    return cols, rows.pop()


def columns_and_keys(data: Any, options: Any) -> tuple[list[Column], int, list[str] | None]:
    """The tensor columns of ``data``, its number of rows and, in KV mode (``name_col``), its
    keys: what one task of a write turns its input into."""
    data = as_table(data)
    cols, rows = columns_of(data, options)
    keys = names_of(data, options.name_col) if options.name_col else None
    return cols, rows, keys
