"""A Hugging Face ``datasets`` dataset written as a dataset of safetensors shards, streaming:
:func:`from_hf`.

The input is a ``datasets.Dataset`` (its Arrow table, read in chunks through
``with_format("arrow").iter``: a ``select``, ``shuffle`` or ``filter`` is honoured), a
``DatasetDict`` (with ``split``), or what ``save_to_disk`` wrote: a dataset's folder
(``state.json`` lists its Arrow files), a ``DatasetDict``'s folder (``dataset_dict.json``;
``split`` chooses the split), or Arrow files themselves (the IPC stream files ``datasets``
writes, or IPC files). Folders and files are read with pyarrow alone (memory-mapped, batch
after batch); ``datasets`` need not be installed for them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ...core.errors import FormatError, InvalidArgumentError, SourceError
from ..layout.manifest import Manifest
from ..layout.storage import Location
from .inputs import checked_file, folder_files
from .options import CHUNK_MB

if TYPE_CHECKING:
    from .arrow_stream import Input

__all__ = ["arrow_files", "from_hf"]

PathLike = str | os.PathLike[str]
_MAX_JSON = 1 << 24
_DATASET = "Hugging Face dataset"


def _json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_JSON + 1)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None
    try:
        if len(raw) > _MAX_JSON:
            raise ValueError("larger than 16 MiB")
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{path} is not the JSON `save_to_disk` writes: {exc}") from None


def _split_folder(folder: str, split: str | None) -> str:
    """The folder of ``split`` in a ``DatasetDict``'s folder."""
    doc = _json(os.path.join(folder, "dataset_dict.json"))
    splits = doc.get("splits") if isinstance(doc, dict) else None
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise FormatError(f"{folder}/dataset_dict.json lists no splits")
    if split is None and len(splits) == 1:
        split = splits[0]
    if split is None or split not in splits:
        got = "no split was given" if split is None else f"there is no split {split!r}"
        raise InvalidArgumentError(
            f"{folder} is a DatasetDict of splits {splits}; {got}: pass split=..."
        )
    if "/" in split or "\\" in split or split in (".", ".."):
        raise FormatError(f"{folder}/dataset_dict.json lists a split named {split!r}")
    return os.path.join(folder, split)


def arrow_files(source: PathLike | Sequence[PathLike], split: str | None = None) -> list[str]:
    """The Arrow files of ``source``: a ``save_to_disk`` folder (of a ``Dataset``, or of a
    ``DatasetDict`` with ``split``), a folder of ``*.arrow`` files (sorted by name), an Arrow
    file, or a list of files.

    Example:
        >>> import json, os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> for name in ("data-00001-of-00002.arrow", "data-00000-of-00002.arrow"):
        ...     _ = open(os.path.join(folder, name), "w").write("")
        >>> [os.path.basename(f) for f in arrow_files(folder)]
        ['data-00000-of-00002.arrow', 'data-00001-of-00002.arrow']
    """
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    files: list[str] = []
    for item in items:
        path = os.fspath(item)
        if not os.path.isdir(path):
            files.append(checked_file(path))
            continue
        if os.path.exists(os.path.join(path, "dataset_dict.json")):
            path = _split_folder(path, split)
        elif split is not None:
            raise InvalidArgumentError(
                f"{path} is one dataset (no dataset_dict.json), not a DatasetDict: "
                f"split={split!r} chooses nothing"
            )
        files += _folder_files(path)
    if not files:
        raise InvalidArgumentError("from_hf: no input file was given")
    return files


def _folder_files(folder: str) -> list[str]:
    state = os.path.join(folder, "state.json")
    if not os.path.exists(state):
        return folder_files(folder, ".arrow")
    doc = _json(state)
    listed = doc.get("_data_files") if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        raise FormatError(f"{state} lists no _data_files")
    out = []
    for entry in listed:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".."):
            raise FormatError(f"{state} lists a data file {name!r} that is not a file name")
        out.append(checked_file(os.path.join(folder, name)))
    return out


def _reader(path: str) -> Any:
    """A reader of the Arrow stream (or IPC file) at ``path``, memory-mapped."""
    import pyarrow as pa

    try:
        source = pa.memory_map(path)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None
    try:
        return pa.ipc.open_stream(source)
    except (pa.ArrowException, ValueError):
        pass
    try:
        source.seek(0)
        return pa.ipc.open_file(source)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise FormatError(f"{path} is not an Arrow stream or file: {exc}") from None


def _file_batches(path: str, rows: int) -> Iterator[Any]:
    del rows  # (the file's own batches: memory-mapped, they cost no memory)
    reader = _reader(path)
    if hasattr(reader, "read_next_batch"):
        yield from reader
    else:
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


def _batches(ds: Any, rows: int) -> Iterator[Any]:
    for table in ds.with_format("arrow").iter(batch_size=rows):
        yield from table.to_batches()


def _inputs(data: Any, split: str | None) -> tuple[list[Input], float | None, str]:
    """The inputs of ``data``, for a ``Dataset`` the size of its rows (an
    ``IterableDataset``'s are known once its first batch is read), and what they are."""
    from .arrow_stream import Input  # (pyarrow: imported when used)

    if isinstance(data, str | os.PathLike) or (
        isinstance(data, list | tuple) and all(isinstance(d, str | os.PathLike) for d in data)
    ):
        files = arrow_files(data, split)
        inputs = [Input(f, _reader(f).schema, partial(_file_batches, f)) for f in files]
        return inputs, None, "Arrow file"
    if isinstance(data, Mapping):  # a DatasetDict
        splits = list(data)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in data:
            got = "no split was given" if split is None else f"there is no split {split!r}"
            raise InvalidArgumentError(f"a DatasetDict of splits {splits}; {got}: pass split=...")
        data = data[split]
    elif split is not None:
        raise InvalidArgumentError(f"split={split!r} is for a DatasetDict; got one dataset")
    table: Any = getattr(data, "data", None)
    if hasattr(data, "with_format") and hasattr(table, "schema"):  # a Dataset
        size = max(1.0, table.nbytes / max(1, table.num_rows))
        inputs = [Input("the datasets.Dataset", table.schema, partial(_batches, data))]
        return inputs, size, _DATASET
    if hasattr(data, "with_format") and hasattr(data, "iter"):  # an IterableDataset
        features = getattr(data, "features", None)
        if features is None:
            raise InvalidArgumentError(
                "the IterableDataset has no features (its columns' types are known only once "
                "read): give it features (load_dataset(..., features=...), or .cast(features))"
            )
        schema = features.arrow_schema
        inputs = [Input("the datasets.IterableDataset", schema, partial(_batches, data))]
        return inputs, None, _DATASET
    raise InvalidArgumentError(
        f"from_hf takes a datasets.Dataset or IterableDataset, a DatasetDict, a save_to_disk "
        f"folder or Arrow files, not {type(data).__name__}"
    )


def from_hf(
    data: Any,
    path: Location,
    *,
    split: str | None = None,
    mode: str = "overwrite",
    storage_options: dict[str, Any] | None = None,
    chunk_mb: float = CHUNK_MB,
    **options: Any,
) -> Manifest:
    """Write a Hugging Face dataset as a dataset at ``path``, streaming: ``data`` is a
    ``datasets.Dataset``, an ``IterableDataset`` with features (``load_dataset(...,
    streaming=True)``: read as it streams), a ``DatasetDict`` (``split`` chooses one; needed
    when it has several), a folder ``save_to_disk`` wrote (of either), or its Arrow files.
    Memory holds about four chunks of ``chunk_mb`` MiB (or of ``batch_size`` batches, if
    bigger); the Arrow files are memory-mapped.

    The options, the columns that become tensors (``Value`` numbers and bools,
    ``Sequence`` features of them, ``Array2D``...``Array5D``) and the errors are
    :func:`~tensorfile.dataset.from_parquet`'s; a text column (``Value("string")``) must be
    left out (``columns``) or be the key column (``name_col``); a ``ClassLabel`` is its
    integer.

    Example:
        >>> import numpy as np, os, tempfile
        >>> import datasets
        >>> from tensorfile import dataset
        >>> tmp = tempfile.mkdtemp()
        >>> hf = datasets.Dataset.from_dict({"x": np.ones((6, 2, 3), np.float32), "y": range(6)},
        ...     features=datasets.Features({"x": datasets.Array2D((2, 3), "float32"),
        ...                                 "y": datasets.Value("int64")}))
        >>> m = dataset.from_hf(hf, f"{tmp}/ds", batch_size=4)
        >>> [s.samples_count for s in m.shards], dataset.open(f"{tmp}/ds")[5]["x"].shape
        ([4, 2], (2, 3))
    """
    from .arrow_stream import write_arrow

    inputs, row_bytes, what = _inputs(data, split)
    return write_arrow(
        inputs,
        path,
        what=what,
        mode=mode,
        storage_options=storage_options,
        chunk_mb=chunk_mb,
        row_bytes=row_bytes,
        **options,
    )
