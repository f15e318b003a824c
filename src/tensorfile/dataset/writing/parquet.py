"""A parquet file (or several) written as a dataset, streaming: :func:`from_parquet`.

The files' footers are read first (a missing file, or one that is no parquet file, is refused
before anything is written); then the rows are read in chunks of about ``chunk_mb``
(``ParquetFile.iter_batches``, only the columns the write takes), each chunk converted and
written as shards before the next is read (:mod:`.arrow_stream`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from ...core.errors import FormatError, InvalidArgumentError, SourceError
from ..layout.manifest import Manifest
from ..layout.storage import Location
from .inputs import checked_file, folder_files
from .options import CHUNK_MB, column_list

__all__ = ["from_parquet", "parquet_files"]

PathLike = str | os.PathLike[str]


def parquet_files(source: PathLike | Sequence[PathLike]) -> list[str]:
    """The files of ``source``: a parquet file, a folder (its ``*.parquet`` files, sorted by
    name: :func:`~tensorfile.dataset.writing.inputs.folder_files`) or a list of files."""
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    files: list[str] = []
    for item in items:
        path = os.fspath(item)
        if os.path.isdir(path):
            files += folder_files(path, ".parquet")
        else:
            files.append(checked_file(path))
    if not files:
        raise InvalidArgumentError("from_parquet: no input file was given")
    return files


def _open(path: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # pre_buffer would read every selected column chunk of the file ahead: unbounded
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, ValueError) as exc:
        raise FormatError(f"{path} is not a readable parquet file: {exc}") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None


def _batches(path: str, columns: list[str], rows: int) -> Iterator[Any]:
    with _open(path) as pf:
        yield from pf.iter_batches(batch_size=rows, columns=columns, use_threads=True)


def from_parquet(
    source: PathLike | Sequence[PathLike],
    path: Location,
    *,
    mode: str = "overwrite",
    storage_options: dict[str, Any] | None = None,
    chunk_mb: float = CHUNK_MB,
    **options: Any,
) -> Manifest:
    """Write the rows of the parquet file ``source`` (or of a folder's ``*.parquet`` files, or
    a list of files, one after the other) as a dataset at ``path``, streaming: memory holds
    about four chunks of ``chunk_mb`` MiB (or of ``batch_size`` batches, if bigger) and a
    row group's pages, whatever the size of the input.

    The options are :func:`~tensorfile.dataset.write`'s: ``batch_size`` (batch mode: a
    shard per batch) or ``name_col`` (key-value mode), ``columns`` (the columns to take;
    default all, less ``name_col``), ``shapes``, ``dtype``, ``tail_strategy``, ...; ``mode``
    is ``overwrite`` or ``append``, ``path`` a folder or an fsspec URL (``s3://...``, with
    ``storage_options``). Columns of numbers or bools, and (fixed-size) lists of them nested
    to any depth (``fixed_shape_tensor`` too), become tensor columns; every row of a list
    column must have one shape; a text column must be left out (``columns``) or be the key
    column (``name_col``; a key-value shard then holds at most one chunk's rows). A missing
    or corrupt file, a null, a ragged row or a column of another type is refused with an
    error from :mod:`tensorfile.errors` naming the file, column and row; whatever fails
    leaves the dataset already at ``path`` as it was.

    Example:
        >>> import numpy as np, os, pyarrow as pa, pyarrow.parquet as pq, tempfile
        >>> from tensorfile import dataset
        >>> tmp = tempfile.mkdtemp()
        >>> x = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(10.0, dtype=np.float32)), 2)
        >>> pq.write_table(pa.table({"x": x, "label": np.arange(5)}), f"{tmp}/train.parquet")
        >>> m = dataset.from_parquet(f"{tmp}/train.parquet", f"{tmp}/ds", batch_size=2)
        >>> m.total_samples, dataset.open(f"{tmp}/ds")[4]["x"].tolist()
        (5, [8.0, 9.0])
    """
    from .arrow_stream import Input, write_arrow  # (pyarrow: imported when used)

    files = parquet_files(source)
    wanted = column_list(options["columns"]) if options.get("columns") else None
    opened: list[tuple[str, Any, float]] = []
    names: list[str] = []
    for f in files:
        with _open(f) as pf:
            if not opened:
                names = _read_columns(pf.schema_arrow, wanted, options.get("name_col"))
            opened.append((f, pf.schema_arrow, _row_bytes(pf.metadata, names)))
    inputs = [Input(f, schema, partial(_batches, f, names)) for f, schema, _ in opened]
    return write_arrow(
        inputs,
        path,
        what="parquet file",
        mode=mode,
        storage_options=storage_options,
        chunk_mb=chunk_mb,
        row_bytes=max(r for *_, r in opened),
        **options,
    )


_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def _row_bytes(meta: Any, names: Sequence[str]) -> float:
    """The size of a row of the columns ``names`` once read: the row groups' leaf values
    (counted exactly, whatever their encoding) by the width of their type, per row."""
    if not meta.num_rows:
        return 1.0
    total = 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            col = group.column(j)
            if col.path_in_schema.split(".")[0] not in names:
                continue
            width = _WIDTHS.get(col.physical_type)
            if width is None and col.physical_type == "FIXED_LEN_BYTE_ARRAY":
                width = meta.schema.column(j).length
            total += int(col.num_values) * width if width else int(col.total_uncompressed_size)
    return max(1.0, total / int(meta.num_rows))


def _read_columns(schema: Any, wanted: Sequence[str] | None, name_col: Any) -> list[str]:
    """The columns to read: those the write takes (the rest are never decoded)."""
    names = list(wanted) if wanted else [n for n in schema.names if n != name_col]
    if name_col and name_col not in names:
        names.append(str(name_col))
    return [n for n in names if n in schema.names]
