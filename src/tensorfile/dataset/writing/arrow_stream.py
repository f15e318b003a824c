"""Write a stream of Arrow record batches as a dataset in bounded memory: the rows are cut into
chunks of about ``chunk_mb`` (in batch mode a whole number of ``batch_size`` batches, so only
the last shard can be short), each chunk checked (:mod:`.arrow_columns`), turned into tensor
columns without a loop over rows (Arrow's buffers viewed as numpy arrays) and written into
its task's staging folder while the next chunk is read and converted (:func:`read_ahead`);
one commit publishes them all (:func:`~tensorfile.dataset.writing.job.write_job`).

Memory: the rows of two chunks (or of two ``batch_size`` batches, when those are bigger), each
held up to twice (as read and pieced together; a column already in its dtype is written from
Arrow's buffers), besides what the input reader holds (a parquet page or row group; an Arrow
stream's batches are memory-mapped).

An input that fails while it is read (a corrupt page, a truncated file) is a
:class:`~tensorfile.errors.FormatError` naming it and the rows read so far; nothing is
published and a dataset already at the path stays as it was.

Example:
    >>> import numpy as np, os, pyarrow as pa, tempfile
    >>> x = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 2)
    >>> batch = pa.record_batch({"x": x})
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> two = Input("two batches", batch.schema, lambda rows: iter([batch, batch]))
    >>> m = write_arrow([two], out, what="table", batch_size=4)
    >>> m.total_samples, [s.samples_count for s in m.shards]
    (12, [4, 4, 4])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from ...core.errors import FormatError, InvalidArgumentError, TensorFileError
from ..layout.manifest import Manifest
from ..layout.storage import Location
from .arrow_columns import ColumnPlan, plan_columns
from .columns import columns_and_keys
from .job import Task, check_mode, write_job
from .options import CHUNK_MB, WriteOptions, parse_options

__all__ = ["Input", "chunk_rows", "guarded", "read_ahead", "write_arrow"]

T = TypeVar("T")

_MAX_SHARDS = 9999
# what a reader raises on input it cannot read: pyarrow's errors, the file system's, and the
# casts of ``datasets`` (a TypeError or KeyError for rows that do not fit their features)
_READ_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, KeyError)
_READ_ROWS = 1024  # rows per read batch where the size of a row is not known beforehand


@dataclass(frozen=True)
class Input:
    """One input file (or in-memory table): its name in errors, its Arrow schema, and how to
    read its record batches (called once, when the write reaches it, with the number of rows
    a batch should have: a reader that can choose reads batches of a chunk's rows)."""

    name: str
    schema: Any
    batches: Callable[[int], Iterator[Any]]


def guarded(item: Input, what: str, rows: int) -> Iterator[Any]:
    """The record batches of ``item``, an error of its reader (pyarrow's, or the file
    system's) turned into a :class:`~tensorfile.errors.FormatError` that names it and the
    rows read from it so far."""
    row = 0
    try:
        batches = item.batches(rows)
    except TensorFileError:
        raise
    except _READ_ERRORS as exc:
        raise FormatError(f"{item.name} is not a readable {what}: {exc}") from None
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except TensorFileError:
            raise
        except _READ_ERRORS as exc:
            raise FormatError(
                f"{item.name} is not a readable {what} (after {row} rows): {exc}"
            ) from None
        row += batch.num_rows
        yield batch


def chunk_rows(row_bytes: float, chunk_mb: float, batch_size: int | None) -> int:
    """How many rows a chunk holds: about ``chunk_mb`` MiB of rows of ``row_bytes``, in batch
    mode a whole number of ``batch_size`` batches (at least one).

    Example:
        >>> chunk_rows(16384, 64, 1000), chunk_rows(16384, 64, None)
        (4000, 4096)
    """
    rows = max(1, int(chunk_mb * (1 << 20) / max(row_bytes, 1.0)))
    if batch_size:  # (at most 9,999 shards a task: their names sort in their order)
        rows = batch_size * min(_MAX_SHARDS, max(1, rows // batch_size))
    return rows


def _chained(inputs: Sequence[Input], plan: ColumnPlan, what: str, rows: int) -> Iterator[Any]:
    """The batches of every input in turn, each input's first row recorded in ``plan``."""
    row = 0
    for item in inputs:
        plan.files.append((row, item.name))
        for batch in guarded(item, what, rows):
            row += batch.num_rows
            yield batch


def _chunks(batches: Iterator[Any], rows: Callable[[Any], int]) -> Iterator[list[Any]]:
    """The batches cut into chunks of ``rows(first batch)`` rows (the last may be short)."""
    size = 0
    pending: list[Any] = []
    count = 0
    for batch in batches:
        if batch.num_rows and not size:
            size = rows(batch)
        while batch.num_rows:
            take = min(size - count, batch.num_rows)
            pending.append(batch.slice(0, take))
            count += take
            batch = batch.slice(take)
            if count == size:
                yield pending
                pending, count = [], 0
    if pending:
        yield pending


def _tasks(
    batches: Iterator[Any],
    plan: ColumnPlan,
    opts: WriteOptions,
    rows: Callable[[Any], int],
) -> Iterator[Task]:
    start = 0
    for pieces in _chunks(batches, rows):
        table = plan.check(pieces, start)
        count = table.num_rows
        try:
            task = columns_and_keys(table, opts)
        except InvalidArgumentError as exc:  # (the writer's own checks, per chunk)
            where = f"{plan.at(start)} (in the chunk of {count} rows from there)"
            raise InvalidArgumentError(f"{where}: {exc}") from None
        yield task
        start += count
    if not start:  # an empty input: a dataset of no samples, with its columns
        yield columns_and_keys(plan.check([], 0), opts)


def read_ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, each next one made in a background thread while the caller uses the current
    one (reading and converting a chunk overlaps writing the one before: parquet's decoding
    and the disk's writes both release the GIL). One item at most waits ahead; an error
    making one is raised where the caller asks for it.

    Example:
        >>> list(read_ahead(iter(range(3))))
        [0, 1, 2]
    """
    end = object()
    with ThreadPoolExecutor(1, thread_name_prefix="tensorfile-convert") as pool:
        pending = pool.submit(next, items, end)
        while True:
            item = pending.result()
            if item is end:
                return
            pending = pool.submit(next, items, end)
            yield item  # type: ignore[misc]


def write_arrow(
    inputs: Sequence[Input],
    path: Location,
    *,
    what: str,
    mode: str = "overwrite",
    storage_options: dict[str, Any] | None = None,
    chunk_mb: float = CHUNK_MB,
    row_bytes: float | None = None,
    **options: Any,
) -> Manifest:
    """Write the record batches of ``inputs`` (one after the other, read lazily, chunk by
    chunk) as a dataset at ``path``; ``what`` says what the inputs are in errors (``parquet
    file``). A chunk holds :func:`chunk_rows` rows: ``chunk_mb`` by ``row_bytes`` (the size
    of a row once read, if the caller knows it), else by the size of the first batch's rows.
    The write options are :func:`~tensorfile.dataset.write`'s."""
    check_mode(mode)
    if not chunk_mb > 0:
        raise InvalidArgumentError(f"chunk_mb must be positive, got {chunk_mb!r}")
    if not inputs:
        raise InvalidArgumentError(f"there is no {what} to convert")
    first = inputs[0]
    opts, plan = _prepare(first.schema, first.name, options)
    for item in inputs[1:]:
        plan.check_schema(item.schema, item.name)

    rows = chunk_rows(row_bytes, chunk_mb, opts.batch_size) if row_bytes else None

    def size(batch: Any) -> int:
        return rows or chunk_rows(batch.nbytes / batch.num_rows, chunk_mb, opts.batch_size)

    batches = _chained(inputs, plan, what, rows or _READ_ROWS)
    tasks = read_ahead(_tasks(batches, plan, opts, size))
    return write_job(path, tasks, mode=mode, opts=opts, storage_options=storage_options)


def _prepare(schema: Any, source: str, options: dict[str, Any]) -> tuple[WriteOptions, ColumnPlan]:
    """The write options (the shapes a ``fixed_shape_tensor`` records added to the ``shapes``
    given) and the plan of the columns, checked before anything is read or written."""
    opts = parse_options(options)
    plan = plan_columns(schema, opts.columns, opts.name_col, source)
    if plan.shapes:
        shapes = {**plan.shapes, **opts.shapes}
        opts = parse_options({**options, "shapes": {k: list(v) for k, v in shapes.items()}})
    return opts, plan
