"""Batches of a dataset's samples as torch tensors, gathered from the shards' mapped arrays
without a per-sample Python loop.

Sample ids -> ``(shard, row)`` (:meth:`~tensorfile.dataset.order.EpochOrder.locate`) ->
for each shard touched, its rows copied into the output with numpy slices (a run of
consecutive rows: an unshuffled order is a few slice copies) or fancy indexing, from
:meth:`~tensorfile.dataset.Dataset.shard_arrays` (read-only views over the mapped
files). Inside a DataLoader worker each output tensor is allocated in shared memory at once,
so the batch reaches the main process without a second copy (as torch's default collate
does). The arrays of recently used shards are kept (:class:`ShardArrays`, least recently
used dropped first): a shuffle block spans many shards, and a batch touches many of them.
A key-value dataset's ``"key"`` column is a list of str; bit-packed dtypes (F4, F6) are
gathered in numpy and packed afterwards.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(20, dtype=np.float32).reshape(10, 2)}, out,
    ...                   batch_size=4, dtype="BF16")
    >>> ds = dataset.open(out)
    >>> g = Gather(ds, [4, 4, 2])
    >>> b = g(np.array([9, 0, 5]))
    >>> b["x"].dtype, b["x"].tolist()
    (torch.bfloat16, [[18.0, 19.0], [0.0, 1.0], [10.0, 11.0]])
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ...core import dtypes
from ...core.errors import FormatError
from ...frameworks.torch import from_numpy, torch_dtype
from .protocol import FeedDataset

__all__ = ["Column", "Gather", "ShardArrays"]

NDArray = np.ndarray[Any, Any]


def _owned(arr: NDArray) -> int:
    """Bytes of memory ``arr`` keeps alive that are not a file mapping."""
    base: Any = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return int(base.nbytes) if isinstance(base, np.ndarray) else 0


class ShardArrays:
    """The :meth:`~tensorfile.dataset.Dataset.shard_arrays` of recently used shards:
    at most ``capacity`` shards, and of copies (not mappings) at most ``owned`` bytes."""

    def __init__(self, dataset: FeedDataset, capacity: int = 256, owned: int = 1 << 30) -> None:
        self.dataset = dataset
        self.shards = dataset.manifest.shards
        self.capacity = capacity
        self.owned_limit = owned
        self.owned = 0
        self._arrays: OrderedDict[int, tuple[dict[str, NDArray], int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, index: int) -> dict[str, NDArray]:
        """The arrays of shard ``index`` (manifest order); one thread at a time (the
        dataset's open readers are not shared between threads safely)."""
        with self._lock:
            return self._get(index)

    def _get(self, index: int) -> dict[str, NDArray]:
        hit = self._arrays.get(index)
        if hit is not None:
            self._arrays.move_to_end(index)
            return hit[0]
        arrays = self.dataset.shard_arrays(self.shards[index])
        cost = sum(_owned(a) for a in arrays.values())
        self._arrays[index] = (arrays, cost)
        self.owned += cost
        while len(self._arrays) > 1 and (
            len(self._arrays) > self.capacity or self.owned > self.owned_limit
        ):
            _, (_, old) = self._arrays.popitem(last=False)
            self.owned -= old
        return arrays


def _shared_bytes(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of ``nbytes`` in shared memory (what a worker hands over for free)."""
    storage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).set_(storage)


class Column:
    """How one column's output is allocated and finished (``dtype``: its safetensors
    dtype, ``shape``: a sample's)."""

    def __init__(self, dtype: str, shape: list[int]) -> None:
        self.dt = dtypes.from_safetensors(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.packed = self.dt.is_subbyte
        self.tdt = torch_dtype(self.dt)
        self.itemsize = np.dtype(self.dt.numpy).itemsize
        self.row_bytes = math.prod(self.shape) * self.itemsize
        """bytes of one sample in the gathered (numpy) layout"""

    def finish(self, arr: NDArray) -> torch.Tensor:
        """The torch tensor of values gathered into ``arr`` (bit-packed dtypes: packed)."""
        return from_numpy(arr, self.dt)

    def alloc(self, n: int, shared: bool) -> tuple[NDArray, Callable[[], torch.Tensor]]:
        shape = (n, *self.shape)
        if self.packed:
            arr = np.empty(shape, dtype=self.dt.numpy)
            return arr, lambda: self.finish(arr)
        nbytes = n * self.row_bytes
        if nbytes == 0:
            empty = torch.empty(shape, dtype=self.tdt)
            return np.empty(shape, dtype=self.dt.numpy), lambda: empty
        raw = _shared_bytes(nbytes) if shared else torch.empty(nbytes, dtype=torch.uint8)
        view = raw.numpy().view(self.dt.numpy).reshape(shape)
        return view, lambda: raw.view(self.tdt).reshape(shape)


def _fill(out: NDArray, dest: NDArray | slice, src: NDArray, rows: NDArray) -> None:
    """``out[dest] = src[rows]`` with as few copies as the index shapes allow (``take``
    with ``mode="clip"``: ``mode="raise"`` buffers its output, at twice the cost; the rows
    come from the manifest's counts and are in range)."""
    n = rows.size
    run = n > 0 and int(rows[-1]) - int(rows[0]) == n - 1 and bool(np.all(np.diff(rows) == 1))
    if run:
        out[dest] = src[int(rows[0]) : int(rows[0]) + n]
    elif isinstance(dest, slice):
        np.take(src, rows, axis=0, out=out[dest], mode="clip")
    else:
        out[dest] = np.take(src, rows, axis=0, mode="clip")


class Gather:
    """Batches of global sample ids from ``dataset`` as ``{column: torch tensor}`` (and
    ``"key": [str]`` for a key-value dataset); ``counts`` are the real samples per shard
    (manifest order); ``shared``: allocate in shared memory (inside a DataLoader worker)."""

    def __init__(
        self, dataset: FeedDataset, counts: Sequence[int], *, shared: bool = False
    ) -> None:
        self.starts = np.concatenate([[0], np.cumsum(np.asarray(counts, np.int64))])
        schema = dataset.manifest.sample_schema()
        columns = dataset.manifest.tensor_columns()
        missing = [c for c in columns if c not in schema]
        if missing:  # a lying manifest: a shard's own check names what it gets wrong
            for entry in dataset.manifest.shards:
                if entry.samples:
                    dataset.shard_arrays(entry)
                    break
            raise FormatError(
                f"{dataset.path}: the manifest's schema does not describe column(s) {missing}"
            )
        self.columns = {c: Column(schema[c]["dtype"], schema[c]["shape"]) for c in columns}
        self.kv = dataset.mode == "kv"
        self.shared = shared
        self.arrays = ShardArrays(dataset)

    def __call__(self, ids: NDArray) -> dict[str, Any]:
        ids = np.asarray(ids, dtype=np.int64)
        outs = {c: col.alloc(ids.size, self.shared) for c, col in self.columns.items()}
        keys = self.fill(ids, {c: view for c, (view, _) in outs.items()})
        batch: dict[str, Any] = {c: finish() for c, (_, finish) in outs.items()}
        if keys is not None:
            batch["key"] = keys
        return batch

    def fill(self, ids: NDArray, views: dict[str, NDArray]) -> list[str] | None:
        """Copy the samples ``ids`` into ``views`` (``{column: array of len(ids) rows}``, in
        the columns' numpy dtypes); the keys of a key-value dataset are returned. Safe to
        call from several threads at once (into different views): the copies release the
        GIL, the shards' arrays are looked up under a lock."""
        ids = np.asarray(ids, dtype=np.int64)
        n = ids.size
        shard = np.searchsorted(self.starts[1:], ids, side="right").astype(np.int64)
        rows = ids - self.starts[shard]
        keys: NDArray | None = np.empty(n, dtype=object) if self.kv else None
        for s, dest, r in self._groups(shard, rows):
            arrays = self.arrays.get(s)
            for c, view in views.items():
                _fill(view, dest, arrays[c], r)
            if keys is not None:
                keys[dest] = arrays["key"][r]
        return None if keys is None else keys.tolist()

    @staticmethod
    def _groups(shard: NDArray, rows: NDArray) -> list[tuple[int, NDArray | slice, NDArray]]:
        """``(shard, destination, rows)`` per shard touched: runs of one shard (slices of
        the output) when the shards come in order, else each shard's positions."""
        n = shard.size
        if n == 0:
            return []
        if bool(np.all(np.diff(shard) >= 0)):
            cut = np.flatnonzero(np.diff(shard)) + 1
            bounds = zip(np.r_[0, cut].tolist(), np.r_[cut, n].tolist(), strict=True)
            return [(int(shard[lo]), slice(lo, hi), rows[lo:hi]) for lo, hi in bounds]
        order = np.argsort(shard, kind="stable")
        sorted_shards = shard[order]
        cut = np.flatnonzero(np.diff(sorted_shards)) + 1
        out: list[tuple[int, NDArray | slice, NDArray]] = []
        for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, n].tolist(), strict=True):
            dest = order[lo:hi]
            out.append((int(sorted_shards[lo]), dest, rows[dest]))
        return out
