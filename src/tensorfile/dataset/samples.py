"""The samples of one shard, from an open reader of its file.

A batch shard holds one tensor per column whose first axis runs over the samples; a key-value
(KV) shard holds one tensor per key and column, named ``{key}{kv_separator}{column}``, and a
sample is ``{"key": key, column: tensor}``. :class:`~tensorfile.dataset.reader.Dataset`, its
torch view and the Spark reader build their samples here.

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

from ..core.reader import Reader
from .manifest import Manifest, ShardEntry, kv_name, split_key

__all__ = ["kv_sample", "shard_keys", "shard_samples"]


def shard_keys(reader: Reader, columns: Sequence[str], separator: str) -> list[str]:
    """The sorted KV keys of the shard open in ``reader`` (``columns`` tell where a tensor
    name's key ends when the separator occurs in a column name)."""
    known = list(columns)
    seen: dict[str, None] = {}
    for name in reader.keys():
        seen.setdefault(split_key(name, separator, known)[0], None)
    return sorted(seen)


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
    reader: Reader, shard: ShardEntry, manifest: Manifest, *, keys: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The samples of ``shard`` (open in ``reader``), in order: ``{column: array}`` per row of
    a batch shard (its ``samples_count`` rows; padding is not a sample), ``{"key": key,
    column: tensor}`` per key of a KV shard (``keys`` when the caller has them already)."""
    columns = manifest.tensor_columns()
    if manifest.mode == "batch":
        tensors = {c: reader.get_tensor(c) for c in columns if c in reader}
        for i in range(shard.samples_count):
            yield {c: t[i, ...] for c, t in tensors.items()}
        return
    separator = manifest.kv_separator
    for key in keys if keys is not None else shard_keys(reader, columns, separator):
        yield kv_sample(reader, key, columns, separator)
