"""Cut tensor columns into shards: fixed-size batches, or key-value shards of a target size.

Batch mode (§4.1 of the Spark spec): every ``batch_size`` rows make one shard holding one
tensor per column, of shape ``[batch_size, *sample_shape]``; the tail is dropped, zero-padded
to a full batch, or written short. A padded shard stores ``batch_size`` rows, and its
manifest entry says so (``samples_count`` is ``batch_size``, as the reference connector
writes it); :attr:`Shard.samples` is the number of real rows, which come first, and
:attr:`Shard.padding` the zero rows after them, recorded in the manifest's ``tensorfile``
field so that readers skip them (:mod:`tensorfile.dataset.layout.manifest`). KV mode (§4.2): each
row becomes one tensor per column named ``{key}{kv_separator}{column}``; a shard is sealed
once its tensors reach the target size; duplicate keys fail or the last one wins. A KV
shard's ``samples_count`` is the number of keys (rows) it holds; it is never padded.

Example:
    >>> import numpy as np
    >>> from tensorfile.dataset.writing.columns import columns_of
    >>> from tensorfile.dataset.writing.options import parse_options
    >>> opts = parse_options({"batch_size": 2, "tail_strategy": "pad"})
    >>> cols, n = columns_of({"x": np.arange(3, dtype=np.int32)}, opts)
    >>> [(s.tensors["x"].tolist(), s.rows, s.samples) for s in batch_shards(cols, n, opts)]
    [([0, 1], 2, 2), ([2, 0], 2, 1)]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import InvalidArgumentError
from ..layout.manifest import kv_name
from .columns import Column
from .options import WriteOptions

__all__ = ["Shard", "batch_shards", "kv_shards"]

NDArray = np.ndarray[Any, Any]
_HEADER_PER_TENSOR = 64  # JSON bytes a header spends per tensor, besides its name


@dataclass(frozen=True)
class Shard:
    """The tensors of one shard file, how many real samples they hold (the first rows) and
    how many zero rows follow them (``tail_strategy="pad"``)."""

    tensors: dict[str, NDArray]
    samples: int
    padding: int = 0

    @property
    def rows(self) -> int:
        """The rows stored: the manifest's ``samples_count``."""
        return self.samples + self.padding


def batch_shards(columns: Sequence[Column], rows: int, opts: WriteOptions) -> Iterator[Shard]:
    """Shards of ``batch_size`` rows each (see the module docstring for the tail)."""
    size = opts.batch_size or 1
    for start in range(0, rows, size):
        stop = min(start + size, rows)
        count = stop - start
        if count < size and opts.tail_strategy == "drop":
            return
        padding = size - count if opts.tail_strategy == "pad" else 0
        tensors = {}
        for col in columns:
            block = col.take(start, stop)
            if padding:
                pad = np.zeros((padding, *block.shape[1:]), block.dtype)
                block = np.concatenate([block, pad])
            tensors[col.name] = np.ascontiguousarray(block)
        yield Shard(tensors, count, padding)


def kv_shards(
    columns: Sequence[Column], keys: Sequence[str], opts: WriteOptions
) -> Iterator[Shard]:
    """Key-value shards sealed when they reach ``target_shard_size_mb``."""
    order = _dedupe(keys, columns, opts)
    target = opts.target_shard_bytes
    tensors: dict[str, NDArray] = {}
    size = samples = 0
    for i in order:
        for col in columns:
            name = kv_name(keys[i], opts.kv_separator, col.name)
            value = np.array(col.sample(i), order="C", copy=True)  # 0-d stays 0-d
            tensors[name] = value
            size += value.nbytes + len(name.encode()) + _HEADER_PER_TENSOR
        samples += 1
        if size >= target:
            yield Shard(tensors, samples)
            tensors, size, samples = {}, 0, 0
    if tensors:
        yield Shard(tensors, samples)


def _dedupe(keys: Sequence[str], columns: Sequence[Column], opts: WriteOptions) -> list[int]:
    """Row indices to write, in input order: duplicates fail, or only the last is kept."""
    last: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in last and opts.duplicates_strategy == "fail":
            raise InvalidArgumentError(
                f"duplicate key {key!r} in column {opts.name_col!r} (rows {last[key]} and {i}); "
                "use duplicatesStrategy=lastWin to keep the last"
            )
        last[key] = i
    order = sorted(last.values())
    seen: dict[str, str] = {}
    for i in order:
        for col in columns:
            name = kv_name(keys[i], opts.kv_separator, col.name)
            if name in seen:
                raise InvalidArgumentError(
                    f"tensor key {name!r} comes from two rows ({seen[name]!r} and {keys[i]!r}); "
                    "choose a kv_separator that does not occur in the keys"
                )
            seen[name] = keys[i]
    return order
