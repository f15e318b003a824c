"""A dataset's columns as lazily loaded ``dask.array``s, one chunk per shard.

``to_dask(ds)`` gives ``{column: dask.array}`` of shape ``(samples, *sample_shape)`` and the
stored dtype (BF16 and F8 as ml_dtypes' numpy types: exactly the written values), chunked
along the first axis by shard; a chunk is read (only its rows) when dask computes it. A KV
dataset's keys come as an object array under its key column's name. ``dask`` is imported
only here.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(10, dtype=np.float32).reshape(5, 2)}, out, batch_size=2)
    >>> arrays = to_dask(dataset.open(out))
    >>> arrays["x"].chunks[0], float(arrays["x"].sum().compute())
    ((2, 2, 1), 45.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core import dtypes
from ..layout.manifest import Manifest, ShardEntry
from ..reading.samples import kv_sample, open_shard, shard_keys

__all__ = ["to_dask"]


def _chunk(storage: Any, manifest: Manifest, shard: ShardEntry, column: str) -> Any:
    reader, keys = open_shard(storage, shard, manifest, manifest.sample_schema())
    with reader:
        if manifest.mode == "batch":
            return reader.read_slice(column, (slice(0, shard.samples),))
        keys = keys or shard_keys(reader, manifest.tensor_columns(), manifest.kv_separator)
        if column == (manifest.name_col or "key"):
            return np.array(keys, dtype=object)
        sep = manifest.kv_separator
        return np.stack([kv_sample(reader, k, [column], sep, strict=True)[column] for k in keys])


def to_dask(ds: Any, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """``{column: dask.array}`` (see the module docstring)."""
    import dask
    import dask.array as da

    manifest = ds.manifest
    sample = manifest.sample_schema()
    shards = [s for s in manifest.shards if s.samples]
    wanted = list(columns) if columns is not None else manifest.tensor_columns()
    out: dict[str, Any] = {}
    names = wanted if manifest.mode == "batch" else [manifest.name_col or "key", *wanted]
    for column in names:
        if column in sample:
            dt = dtypes.from_safetensors(sample[column]["dtype"]).numpy
            shape = tuple(sample[column]["shape"])
        else:  # the keys
            dt, shape = np.dtype(object), ()
        parts = [
            da.from_delayed(
                dask.delayed(_chunk)(ds.storage, manifest, s, column),
                shape=(s.samples, *shape),
                dtype=dt,
            )
            for s in shards
        ]
        out[column] = da.concatenate(parts) if parts else da.empty((0, *shape), dtype=dt)
    return out
