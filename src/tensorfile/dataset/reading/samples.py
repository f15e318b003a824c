"""The samples of one shard, from an open reader of its file, after checking the file's header
against what the manifest says of it.

A batch shard holds one tensor per column whose first axis runs over the samples; a key-value
(KV) shard holds one tensor per key and column, named ``{key}{kv_separator}{column}``, and a
sample is ``{"key": key, column: tensor}``. :class:`~tensorfile.dataset.Dataset`, its
torch view and the Spark reader open shards with :func:`open_shard` and build their samples
here, so a manifest that lies about a shard (more samples than its tensors hold, a column it
lacks, a dtype or shape other than the schema's) fails the same way everywhere: with a
:class:`~tensorfile.errors.FormatError` naming the shard, before a sample is read.

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> r = tensorfile.open(save({"b__v": np.ones(2, np.float32), "a__v": np.zeros(2, np.float32)}))
    >>> shard_keys(r, ["v"], "__")
    ['a', 'b']
    >>> kv_sample(r, "b", ["v"], "__")
    {'key': 'b', 'v': array([1., 1.], dtype=float32)}
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...core.errors import FormatError
from ...core.reader import Reader
from ..layout.manifest import Manifest, ShardEntry, kv_name, shard_reader, split_key
from ..layout.storage import Location, storage_for

__all__ = ["kv_sample", "open_shard", "shard_keys", "shard_samples", "verify_shard"]


def shard_keys(reader: Reader, columns: Sequence[str], separator: str) -> list[str]:
    """The sorted KV keys of the shard open in ``reader`` (``columns`` tell where a tensor
    name's key ends when the separator occurs in a column name)."""
    known = list(columns)
    seen: dict[str, None] = {}
    for name in reader.keys():
        seen.setdefault(split_key(name, separator, known)[0], None)
    return sorted(seen)


def verify_shard(
    reader: Reader,
    shard: ShardEntry,
    manifest: Manifest,
    schema: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """Check the header of ``shard`` (open in ``reader``) against ``manifest`` and return its
    sorted KV keys (``[]`` in batch mode). ``schema`` is ``manifest.sample_schema()`` when the
    caller has it already.

    Batch mode: every column is a tensor of the schema's dtype and sample shape with at least
    ``samples_count`` rows (padding included; the real ones are the first
    :attr:`~tensorfile.dataset.layout.manifest.ShardEntry.samples`). KV mode: every tensor is
    ``{key}{separator}{column}`` of a known column, every key has every column, in the
    schema's dtype and shape, and there are ``samples_count`` keys.

    Example:
        >>> import numpy as np, tensorfile
        >>> from tensorfile.safetensors.numpy import save
        >>> m = Manifest([ShardEntry("s.safetensors", 5, 0)],
        ...              {"x": {"dtype": "F32", "shape": [4]}}, columns=["x"])
        >>> try:
        ...     verify_shard(tensorfile.open(save({"x": np.zeros(4, np.float32)})), m.shards[0], m)
        ... except FormatError as exc:
        ...     print(exc)
        shard s.safetensors: the manifest says 5 samples, tensor 'x' holds 4
    """
    where = f"shard {shard.shard_path}"
    columns = manifest.tensor_columns()
    schema = manifest.sample_schema() if schema is None else schema
    if manifest.mode == "batch":
        for col in columns:
            if col not in reader:
                raise FormatError(f"{where} has no tensor {col!r}, a column of the dataset")
            info = reader.info(col)
            if not info.shape:
                raise FormatError(f"{where}: tensor {col!r} is a scalar; it has no batch axis")
            _check_type(where, col, info.dtype.name, list(info.shape[1:]), schema.get(col))
            if info.shape[0] < shard.samples_count:
                raise FormatError(
                    f"{where}: the manifest says {shard.samples_count} samples, tensor "
                    f"{col!r} holds {info.shape[0]}"
                )
        return []
    separator = manifest.kv_separator
    wanted = set(columns)
    found: dict[str, set[str]] = {}
    for name in reader.keys():
        key, col = split_key(name, separator, columns)
        if col not in wanted or not name.endswith(separator + col):
            raise FormatError(
                f"{where}: tensor {name!r} is not {{key}}{separator}{{column}} of a column "
                f"of the dataset ({', '.join(columns)})"
            )
        info = reader.info(name)
        _check_type(where, name, info.dtype.name, list(info.shape), schema.get(col))
        found.setdefault(key, set()).add(col)
    for key, cols in found.items():
        if cols != wanted:
            missing = sorted(wanted - cols)
            raise FormatError(f"{where}: key {key!r} has no tensor of column(s) {missing}")
    if len(found) != shard.samples_count:
        raise FormatError(
            f"{where}: the manifest says {shard.samples_count} samples, the shard holds "
            f"{len(found)} keys"
        )
    return sorted(found)


def _check_type(
    where: str, name: str, dtype: str, shape: list[int], want: dict[str, Any] | None
) -> None:
    if want is None:
        raise FormatError(f"{where}: the manifest's schema does not describe tensor {name!r}")
    if (dtype, shape) != (want["dtype"], want["shape"]):
        raise FormatError(
            f"{where}: tensor {name!r} has {dtype} samples of shape {shape}, the manifest's "
            f"schema says {want['dtype']} of shape {want['shape']}"
        )


def open_shard(
    folder: Location,
    shard: ShardEntry,
    manifest: Manifest,
    schema: dict[str, dict[str, Any]] | None = None,
) -> tuple[Reader, list[str]]:
    """A reader of ``shard`` of the dataset in ``folder`` (a path, URL or storage) and its KV
    keys, after :func:`~tensorfile.dataset.layout.storage.open_shard`'s checks (inside the
    folder, a regular file, the listed size) and :func:`verify_shard`.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "kv")
        >>> m = dataset.write({"k": ["a", "b"], "v": np.eye(2)}, out, name_col="k")
        >>> reader, keys = open_shard(out, m.shards[0], m)
        >>> keys, reader.close()
        (['a', 'b'], None)
    """
    store = storage_for(folder)
    path = store.url(shard.shard_path)
    try:
        reader = shard_reader(store, shard)
    except FormatError as exc:
        if path in str(exc) or store.url() in str(exc):
            raise
        raise FormatError(
            f"shard {path}: {exc}", offset=exc.offset, tensor=exc.tensor, format=exc.format
        ) from exc
    try:
        return reader, verify_shard(reader, shard, manifest, schema)
    except BaseException:
        reader.close()
        raise


def kv_sample(
    reader: Reader, key: str, columns: Sequence[str], separator: str, *, strict: bool = False
) -> dict[str, Any]:
    """``{"key": key, column: tensor}`` of KV key ``key`` from the shard open in ``reader``.

    A column the shard lacks for this key is left out, or with ``strict`` raises
    :class:`~tensorfile.errors.TensorNotFoundError`."""
    out: dict[str, Any] = {"key": key}
    for c in columns:
        name = kv_name(key, separator, c)
        if strict or name in reader:
            out[c] = reader.get_tensor(name)
    return out


def shard_samples(
    reader: Reader,
    shard: ShardEntry,
    manifest: Manifest,
    *,
    keys: Sequence[str] | None = None,
    start: int = 0,
    stop: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The samples of ``shard`` (open in ``reader``, checked by :func:`verify_shard`), in
    order: ``{column: array}`` per real row of a batch shard (its first
    :attr:`~tensorfile.dataset.layout.manifest.ShardEntry.samples` rows; the zero rows of a padded
    shard are not samples), ``{"key": key, column: tensor}`` per key of a KV shard (``keys``
    when the caller has them already). ``start``/``stop`` give only those samples (a batch
    shard reads just their rows).

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> m = dataset.write({"x": np.arange(1, 4, dtype=np.int8)}, out, batch_size=2,
        ...                   tail_strategy="pad")
        >>> reader, _ = open_shard(out, m.shards[1], m)
        >>> samples = shard_samples(reader, m.shards[1], m)
        >>> reader.get_tensor("x").tolist(), [s["x"].item() for s in samples]
        ([3, 0], [3])
        >>> reader.close()
    """
    columns = manifest.tensor_columns()
    end = shard.samples if stop is None else min(stop, shard.samples)
    if manifest.mode == "batch":
        if start >= end:
            return
        if start == 0 and end == shard.samples:
            tensors = {c: reader.get_tensor(c) for c in columns}
        else:  # rows start..end only: the reader reads just their bytes
            tensors = {c: reader.read_slice(c, (slice(start, end),)) for c in columns}
        for i in range(end - start):
            yield {c: t[i, ...] for c, t in tensors.items()}
        return
    separator = manifest.kv_separator
    every = keys if keys else shard_keys(reader, columns, separator)
    for key in every[start:end]:
        yield kv_sample(reader, key, columns, separator)
