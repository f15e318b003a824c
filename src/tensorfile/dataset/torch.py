"""A torch ``IterableDataset`` over a dataset's samples, shards split across workers and ranks.

Each DataLoader worker of each distributed rank reads a disjoint subset of the shards
(shard ``i`` goes to reader ``i % (workers × ranks)``), so every sample is seen once per
epoch across the whole job without any coordination. Every iteration opens the dataset
afresh from its folder (a worker process receives the folder, never open files). Only this
module imports torch.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(3, dtype=np.float32)}, out, batch_size=2)
    >>> [s["x"].item() for s in ShardedIterable(dataset.open(out))]
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..core import dtypes
from ..frameworks.torch import from_numpy
from .manifest import load_manifest
from .samples import open_shard, shard_samples

__all__ = ["ShardedIterable"]


def _rank() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _to_torch(value: Any) -> Any:
    if isinstance(value, str):
        return value
    arr = np.array(value, copy=True)
    return from_numpy(arr, dtypes.from_numpy(arr.dtype))


class ShardedIterable(IterableDataset):  # type: ignore[type-arg]
    """Samples of a :class:`~tensorfile.dataset.reader.Dataset` as dicts of torch tensors."""

    def __init__(self, dataset: Any) -> None:
        self.path: str = dataset.path
        self.storage = dataset.storage

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world = _rank()
        me, total = rank * workers + worker, workers * world
        manifest = load_manifest(self.storage, strict=True)  # as dataset.open reads it
        schema = manifest.sample_schema()
        for i, shard in enumerate(manifest.shards):
            if i % total != me:
                continue
            reader, keys = open_shard(self.storage, shard, manifest, schema)  # header checked
            with reader:
                for sample in shard_samples(reader, shard, manifest, keys=keys):
                    yield {k: _to_torch(v) for k, v in sample.items()}
