"""A dataset's samples for PyTorch: an ``IterableDataset`` split across distributed ranks and
DataLoader workers, shuffled per epoch, and a map-style dataset for the default collate.

**How an epoch is split** (:class:`TorchIterable`). The epoch's order is the shards in a
permutation drawn from ``(seed, epoch)`` (or in manifest order without ``shuffle``), each
shard's samples in order. That sequence of ``N`` samples is cut into one contiguous range
per rank and each rank's range into one per DataLoader worker, so every sample is read by
exactly one worker of one rank, and shards are read in long runs (whole rows ranges, not one
sample at a time). With ``even=True`` (the default, and what ``DistributedSampler`` does with
``drop_last``) every rank gets ``N // world_size`` samples: the last ``N % world_size`` of
the epoch's order are dropped, a different few each epoch when shuffling. ``even="pad"``
instead gives every rank ``ceil(N / world_size)``, repeating samples from the start of the
epoch's order to fill (``DistributedSampler``'s default). ``even=False`` gives the ranks
counts that differ by at most one: a loop that needs the same number of steps on every rank
(any collective in the step) can hang on it (pytorch/pytorch#141069), which is why it is not
the default. Within a worker, with ``shuffle``, samples pass through a buffer of
``shuffle_buffer`` samples drawn at random (seeded by seed, epoch, rank and worker). The
order is the same for the same seed, epoch, world size and workers, and differs from epoch
to epoch: call :meth:`TorchIterable.set_epoch` before each epoch.

``rank``/``world_size`` default to ``torch.distributed``'s when it is initialised, else 0 and
1. Every value arrives as the matching torch dtype: BF16 as ``torch.bfloat16``, F8 as
torch's float8 types, unsigned integers as torch's ``uint16``/``uint32``/``uint64``.

Only this module imports torch.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(5, dtype=np.float32)}, out, batch_size=2)
    >>> [s["x"].item() for s in TorchIterable(dataset.open(out))]
    [0.0, 1.0, 2.0, 3.0, 4.0]
    >>> it = TorchIterable(dataset.open(out), shuffle=True, seed=1, rank=1, world_size=2)
    >>> len(it), len(list(it))
    (2, 2)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as _TorchDataset
from torch.utils.data import IterableDataset, get_worker_info

from ..core import dtypes
from ..core.errors import InvalidArgumentError, InvalidTypeError
from ..frameworks.torch import from_numpy
from .manifest import ShardEntry, load_manifest
from .samples import open_shard, shard_samples

__all__ = ["ShardedIterable", "TorchIterable", "TorchMap", "epoch_ranges"]


def _rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    return rank, world_size


def _to_torch(value: Any) -> Any:
    if isinstance(value, str):
        return value
    arr = np.array(value, copy=True)
    return from_numpy(arr, dtypes.from_numpy(arr.dtype))


def _check_int(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise InvalidTypeError(f"{what} must be an integer of at least {low}, got {value!r}")
    return int(value)


def epoch_ranges(
    total: int, rank: int, world_size: int, worker: int, workers: int, even: bool | str
) -> tuple[int, int]:
    """The ``[start, stop)`` positions of the epoch's order that ``worker`` of ``rank``
    reads (past ``total`` they wrap around: ``even="pad"``).

    Example:
        >>> [epoch_ranges(10, r, 3, 0, 1, True) for r in range(3)]
        [(0, 3), (3, 6), (6, 9)]
        >>> [epoch_ranges(10, r, 3, 0, 1, "pad") for r in range(3)]
        [(0, 4), (4, 8), (8, 12)]
        >>> [epoch_ranges(10, r, 3, 0, 1, False) for r in range(3)]
        [(0, 3), (3, 6), (6, 10)]
    """
    if even is True or even == "drop":
        per = total // world_size
        lo, hi = rank * per, (rank + 1) * per
    elif even == "pad":
        per = math.ceil(total / world_size) if total else 0
        lo, hi = rank * per, (rank + 1) * per
    else:
        lo, hi = rank * total // world_size, (rank + 1) * total // world_size
    n = hi - lo
    return lo + worker * n // workers, lo + (worker + 1) * n // workers


class TorchIterable(IterableDataset):  # type: ignore[type-arg]
    """Samples of a :class:`~tensorfile.dataset.reader.Dataset` as dicts of torch tensors,
    split across ranks and workers (see the module docstring)."""

    def __init__(
        self,
        dataset: Any,
        *,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        even: bool | str = True,
        shuffle_buffer: int = 1024,
    ) -> None:
        if even not in (True, False, "drop", "pad"):
            raise InvalidArgumentError(f"even must be True, False, 'drop' or 'pad', got {even!r}")
        self.path: str = dataset.path
        self.storage = dataset.storage
        self.shuffle = bool(shuffle)
        self.seed = _check_int(seed, "seed", 0)
        self.even = even
        self.shuffle_buffer = _check_int(shuffle_buffer, "shuffle_buffer", 1)
        self._rank = None if rank is None else _check_int(rank, "rank", 0)
        self._world = None if world_size is None else _check_int(world_size, "world_size", 1)
        r, w = _rank(self._rank, self._world)
        if r >= w:
            raise InvalidArgumentError(f"rank {r} is not below world_size {w}")
        self.epoch = 0
        self._total = len(dataset)

    def __getstate__(self) -> dict[str, Any]:
        # pickled for DataLoader workers started by spawn/forkserver, where torch.distributed
        # is not initialised: they get the rank and world size the main process has now
        state = dict(self.__dict__)
        state["_rank"], state["_world"] = _rank(self._rank, self._world)
        return state

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` for the next iterations (as ``DistributedSampler``)."""
        self.epoch = _check_int(epoch, "epoch", 0)

    def __len__(self) -> int:
        """The samples this rank yields per epoch (all its workers together)."""
        rank, world = _rank(self._rank, self._world)
        lo, hi = epoch_ranges(self._total, rank, world, 0, 1, self.even)
        return hi - lo

    def _order(self, shards: list[ShardEntry]) -> list[ShardEntry]:
        if not self.shuffle:
            return list(shards)
        rng = np.random.default_rng([self.seed, self.epoch])
        return [shards[i] for i in rng.permutation(len(shards))]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank, world = _rank(self._rank, self._world)
        manifest = load_manifest(self.storage, strict=True)  # as dataset.open reads it
        schema = manifest.sample_schema()
        order = self._order([s for s in manifest.shards if s.samples])
        total = sum(s.samples for s in order)
        start, stop = epoch_ranges(total, rank, world, worker, workers, self.even)
        samples = self._read(order, total, start, stop, manifest, schema)
        if self.shuffle:
            samples = self._buffered(samples, rank, worker)
        for sample in samples:
            yield {k: _to_torch(v) for k, v in sample.items()}

    def _read(
        self, order: list[ShardEntry], total: int, start: int, stop: int, manifest: Any, schema: Any
    ) -> Iterator[dict[str, Any]]:
        """The samples at positions ``start..stop`` of the epoch's order (wrapping)."""
        if total == 0:
            return
        pos = start
        while pos < stop:
            at = pos % total
            base = 0
            for shard in order:  # the shard holding position `at`
                if at < base + shard.samples:
                    break
                base += shard.samples
            first = at - base
            last = min(shard.samples, first + (stop - pos))
            reader, keys = open_shard(self.storage, shard, manifest, schema)  # header checked
            with reader:
                yield from shard_samples(reader, shard, manifest, keys=keys, start=first, stop=last)
            pos += last - first

    def _buffered(
        self, samples: Iterator[dict[str, Any]], rank: int, worker: int
    ) -> Iterator[dict[str, Any]]:
        rng = np.random.default_rng([self.seed, self.epoch, rank, worker])
        buf: list[dict[str, Any]] = []
        for s in samples:
            buf.append(s)
            if len(buf) >= self.shuffle_buffer:
                i = int(rng.integers(len(buf)))
                buf[i], buf[-1] = buf[-1], buf[i]
                yield buf.pop()
        rng.shuffle(buf)
        yield from buf


ShardedIterable = TorchIterable
"""The earlier name of :class:`TorchIterable`."""


class TorchMap(_TorchDataset):  # type: ignore[type-arg]
    """A map-style torch dataset: ``ds[i]`` as a dict of torch tensors (BF16 as
    ``torch.bfloat16``...), so ``DataLoader``'s default collate stacks any dtype; the keys of
    a KV dataset stay strings (collated into lists). Works with ``DistributedSampler``.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> _ = dataset.write({"x": np.ones((4, 2), np.float32)}, out, batch_size=2, dtype="BF16")
        >>> m = TorchMap(dataset.open(out))
        >>> len(m), m[0]["x"].dtype
        (4, torch.bfloat16)
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {k: _to_torch(v) for k, v in self.dataset[index].items()}

    def __reduce__(self) -> tuple[Any, ...]:
        # a DataLoader worker gets the dataset's class and location, not open files
        return (_remake, (type(self.dataset), self.dataset.storage))


def _remake(cls: Any, storage: Any) -> TorchMap:
    return TorchMap(cls.reopen(storage))
