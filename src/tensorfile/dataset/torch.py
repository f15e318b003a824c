"""A torch ``IterableDataset`` over a dataset's samples, shards split across workers and ranks.

Each DataLoader worker of each distributed rank reads a disjoint subset of the shards
(shard ``i`` goes to reader ``i % (workers × ranks)``), so every sample is seen once per
epoch across the whole job without any coordination. Only this module imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .. import dtypes
from .._torch import from_numpy

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
        self.path = dataset.path

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from .reader import open as open_dataset

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world = _rank()
        me, total = rank * workers + worker, workers * world
        with open_dataset(self.path) as ds:
            for i, shard in enumerate(ds.shards):
                if i % total != me:
                    continue
                for sample in ds._shard_samples(shard):
                    yield {k: _to_torch(v) for k, v in sample.items()}
