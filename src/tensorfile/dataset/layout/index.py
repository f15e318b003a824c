"""``_tensor_index.parquet`` (§2.3 of the Spark spec): which shard holds each tensor key.

:func:`write_index` writes it (tensor_key, file_name, shape, dtype; every column non-null, in
the reference connector's schema). :func:`read_index` reads the two columns a lookup needs,
from one parquet file or from a folder of part files as Spark writes it (the reference
connector writes its index with ``df.write.parquet``), trusting nothing: a file must be a
regular file (a FIFO is refused at once), its footer's row counts must be possible for its size
before pyarrow allocates anything for them, the two columns must be non-null strings, and any
pyarrow error becomes a :class:`~tensorfile.errors.FormatError` naming the file. A folder
without part files is no index. An index that does not describe the manifest's shards (a shard
it names is not listed, a listed shard is missing from it, a key is in two shards) is *stale*:
:func:`read_index` returns None and the caller reads the shard headers instead.

Example:
    >>> import os, tempfile
    >>> from tensorfile.dataset.layout.manifest import Manifest, ShardEntry
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_index(folder, [("a__v", "s.safetensors", [2], "F32")])
    >>> m = Manifest([ShardEntry("s.safetensors", 1, 10)], {}, mode="kv")
    >>> read_index(folder, m)
    {'a__v': 's.safetensors'}
    >>> read_index(folder, Manifest([ShardEntry("t.safetensors", 1, 10)], {}, mode="kv")) is None
    True
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ...core.errors import ConcurrentWriteError, FormatError, SourceError, TensorFileError
from ...core.extras import needing
from ...sources import Store
from .files import INDEX_NAME, MANIFEST_NAME, open_regular
from .manifest import Manifest
from .storage import Location, storage_for

__all__ = [
    "INDEX_NAME",
    "MAX_INDEX_BYTES",
    "check_index_slot",
    "follow_manifest",
    "index_bytes",
    "index_exists",
    "read_index",
    "remove_index",
    "write_index",
]

MAX_INDEX_BYTES = 1 << 30
"""The largest index read from a remote dataset (read whole: ~20 bytes a key)."""

_COLUMNS = ("tensor_key", "file_name")
_ROWS_PER_BYTE = 8  # a unique tensor key costs at least a few bits of the file


def index_bytes(rows: list[tuple[str, str, list[int], str]]) -> bytes:
    """The parquet bytes of an index of ``rows`` (tensor_key, file_name, shape, dtype), in the
    schema of the reference's index: four non-null columns (string, string, list of int32,
    string)."""
    import io

    with needing("writing a dataset's index (parquet)", extra="dataset"):
        import pyarrow as pa
        import pyarrow.parquet as pq

    schema = pa.schema(
        [
            pa.field("tensor_key", pa.string(), nullable=False),
            pa.field("file_name", pa.string(), nullable=False),
            pa.field("shape", pa.list_(pa.int32()), nullable=False),
            pa.field("dtype", pa.string(), nullable=False),
        ]
    )
    columns = [[r[i] for r in rows] for i in range(4)]
    table = pa.table(columns, schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def write_index(folder: Location, rows: list[tuple[str, str, list[int], str]]) -> str:
    """Write ``_tensor_index.parquet`` (one file, atomically): tensor_key, file_name, shape,
    dtype; returns its path or URL."""
    store = storage_for(folder)
    store.write_atomic(INDEX_NAME, index_bytes(rows))
    return store.url(INDEX_NAME)


def read_index(folder: Location, manifest: Manifest) -> dict[str, str] | None:
    """tensor_key -> file_name of the index in ``folder`` (a parquet file, or a folder of
    them as Spark writes it); None without an index or when it is stale for ``manifest``
    (see the module docstring)."""
    store = storage_for(folder)
    pairs = _index_columns(store)
    if pairs is None:
        return None
    listed = {s.shard_path for s in manifest.shards}
    out: dict[str, str] = {}
    for key, file in zip(*pairs, strict=True):
        if file not in listed or out.setdefault(key, file) != file:
            return None
    if {s.shard_path for s in manifest.shards if s.samples_count} - set(out.values()):
        return None
    return out


def _index_columns(store: Store) -> tuple[list[str], list[str]] | None:
    """The tensor_key and file_name columns of the index of ``store``; None without one."""
    import io

    path = store.url(INDEX_NAME)
    local = store.local_path(INDEX_NAME)
    if local is not None:
        path = local
        try:
            is_folder = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            is_folder = False
        if is_folder:
            return _folder_columns(store)
        fd = open_regular(path, "the index")
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            return _columns(f, path, os.fstat(fd).st_size)
    try:
        data = store.read_bounded(INDEX_NAME, "the index", MAX_INDEX_BYTES)
    except SourceError:  # not a file: a folder (prefix) of parts, or nothing an index is
        pairs = _folder_columns(store) if store.supports_listing else None
        if pairs is None:
            raise
        return pairs
    if data is None:  # no object of that name: perhaps a prefix of parts
        return _folder_columns(store) if store.supports_listing else None
    return _columns(io.BytesIO(data), path, len(data))


def _folder_columns(store: Store) -> tuple[list[str], list[str]] | None:
    """The index as Spark's ``df.write.parquet`` leaves it (the reference's): a folder of
    part files (every ``*.parquet`` whose name starts with neither ``_`` nor ``.``, in name
    order), beside ``_SUCCESS`` and checksum files; at most :data:`MAX_INDEX_BYTES` in all,
    each part a regular file. None when the folder holds no part."""
    import io

    parts = [
        n
        for n in store.list_files(INDEX_NAME)
        if n.endswith(".parquet") and not n.startswith(("_", "."))
    ]
    if not parts:
        return None
    keys: list[str] = []
    files: list[str] = []
    budget = MAX_INDEX_BYTES
    for part in parts:
        name = f"{INDEX_NAME}/{part}"
        local = store.local_path(name)
        if local is not None and not stat.S_ISREG(_lstat_mode(local)):
            raise FormatError(f"{store.url(name)}: an index part is not a regular file")
        data = store.read_bounded(name, "the index", budget)
        if data is None:  # removed meanwhile: an index being rewritten is no answer
            return None
        budget -= len(data)
        k, f = _columns(io.BytesIO(data), store.url(name), len(data))
        keys += k
        files += f
    return keys, files


def _lstat_mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _columns(f: Any, path: str, size: int) -> tuple[list[str], list[str]]:
    """The tensor_key and file_name columns of the parquet file ``f`` of ``size`` bytes."""
    with needing(f"{path}: reading the dataset's index (parquet)", extra="dataset"):
        import pyarrow as pa
        import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
        _check_footer(pf, path, size)
        table = pf.read(columns=list(_COLUMNS))
        columns = [table.column(c) for c in _COLUMNS]
        if any(c.null_count for c in columns):
            raise FormatError(f"{path}: the index has a null tensor_key or file_name")
        keys, files = (c.to_pylist() for c in columns)
    except TensorFileError:
        raise
    except (
        pa.ArrowException,  # ArrowInvalid, ArrowMemoryError (a claimed size), ...
        OSError,  # corrupt thrift, snappy or pages
        ValueError,  # bytes that are not UTF-8
        LookupError,
        TypeError,
        MemoryError,
        NotImplementedError,
    ) as exc:
        raise FormatError(f"{path} is not a valid tensor index: {exc}") from exc
    return keys, files


def _check_footer(pf: Any, path: str, size: int) -> None:
    """The columns a lookup reads are strings, and the row counts the footer claims are
    consistent and possible for a file of ``size`` bytes (pyarrow allocates by them)."""
    import pyarrow as pa

    schema = pf.schema_arrow
    for name in _COLUMNS:
        i = schema.get_field_index(name)
        if i < 0:
            raise FormatError(f"{path}: the index has no (single) {name} column")
        typ = schema.field(i).type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            raise FormatError(f"{path}: the index's {name} column is {typ}, not string")
    md = pf.metadata
    rows = md.num_rows
    if not 0 <= rows <= _ROWS_PER_BYTE * size:
        raise FormatError(f"{path}: the index claims {rows} rows in {size} bytes")
    groups = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    if any(n < 0 for n in groups) or sum(groups) != rows:
        raise FormatError(
            f"{path}: the index's row groups hold {sum(groups)} rows, its footer says {rows}"
        )


# -- the index beside a commit ----------------------------------------------------------------


def follow_manifest(
    store: Store, ours: str | None, staged: bytes | None, overwrite: bool
) -> SourceError | None:
    """Write the new index (``staged``), or for an overwrite without one remove the old,
    only while the manifest is still the one this commit wrote (``ours``): when a later
    commit has replaced it, the index is that writer's to write or keep. Returns the error
    of a failed index write (the dataset is committed; its index is not)."""
    if staged is None and not overwrite:
        return None
    try:
        with store.while_at(MANIFEST_NAME, ours):
            if staged is not None:
                store.write_atomic(INDEX_NAME, staged)
            else:
                remove_index(store)
    except ConcurrentWriteError:
        return None  # a later commit's dataset: its index is its own
    except SourceError as exc:
        return exc
    return None


def index_exists(store: Store) -> bool:
    """Whether something (a file, or a link) holds the index's name."""
    local = store.local_path(INDEX_NAME)
    if local is not None:
        return os.path.lexists(local)
    return store.file_size(INDEX_NAME) is not None


def check_index_slot(store: Store) -> None:
    """The index can be written: no folder (or other non-file) holds its name."""
    local = store.local_path(INDEX_NAME)
    if local is not None:
        if os.path.isdir(local):
            raise SourceError(f"cannot write the index {local}: a folder is in the way")
        return
    try:
        store.file_size(INDEX_NAME)
    except SourceError as exc:
        raise SourceError(f"cannot write the index: {exc}") from exc


def remove_index(store: Store) -> None:
    """Remove the previous dataset's index: a regular file, or a symlink (only the link goes);
    a folder or FIFO of that name is not the dataset's and stays."""
    path = store.local_path(INDEX_NAME)
    if path is not None:
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                os.unlink(path)
        except OSError:
            pass  # the new dataset is committed; a reader finds a stale index stale
        return
    try:
        store.remove(INDEX_NAME)
    except SourceError:
        pass  # as above
