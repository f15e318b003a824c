"""Several datasets fed as one, sampled in given proportions: :func:`mix` makes a
:class:`Mixture`, whose :meth:`~Mixture.to_torch` is a resumable training feed like one
dataset's (:class:`~tensorfile.dataset.feed.torch_mixture.TorchMixture`).

The datasets must have the same tensor columns, with the same dtypes and sample shapes, and
the same mode. An epoch has ``samples`` positions (default: the datasets' samples together);
dataset ``i`` takes ``n_i`` of them, ``samples`` apportioned by the weights (default: the
datasets' lengths, so each sample once, all shuffled together) by the largest remainder
(:func:`~tensorfile.dataset.feed.mix_order.apportion`). A dataset drawn past its length
repeats whole passes over its samples; one drawn less takes a prefix of its order, another
each epoch when shuffling. Where the draws fall is a function of the datasets, the weights,
``samples``, the seed and the epoch only (:mod:`~tensorfile.dataset.feed.mix_order`): a run
resumes exactly, with another number of ranks or workers too.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> root = tempfile.mkdtemp()
    >>> for name, first in (("a", 0), ("b", 100)):
    ...     _ = dataset.write({"x": np.arange(first, first + 4, dtype=np.int32)},
    ...                       os.path.join(root, name), batch_size=2)
    >>> a, b = (dataset.open(os.path.join(root, n)) for n in "ab")
    >>> m = dataset.mix({"a": a, "b": b}, [3, 1], samples=8)
    >>> len(m), m.draws
    (8, [6, 2])
    >>> it = m.to_torch(batch_size=4, shuffle=True, seed=0)
    >>> xs = [x for batch in it for x in batch["x"].tolist()]
    >>> sum(x < 100 for x in xs), sum(x >= 100 for x in xs)
    (6, 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import InvalidArgumentError, InvalidTypeError
from ...core.extras import needing
from ..layout.manifest import Manifest, ShardEntry
from .mix_order import MixtureOrder, apportion
from .options import FeedOptions
from .order import MAX_SAMPLES, check_int
from .protocol import FeedDataset
from .torch_state import shards_digest

if TYPE_CHECKING:
    from .torch_mixture import TorchMixture

__all__ = ["Mixture", "mix"]

NDArray = np.ndarray[Any, Any]
_OPTIONS = frozenset(f.name for f in fields(FeedOptions))


def mix(
    datasets: Sequence[FeedDataset] | Mapping[str, FeedDataset],
    weights: Sequence[float] | None = None,
    *,
    samples: int | None = None,
) -> Mixture:
    """A :class:`Mixture` of ``datasets`` (a sequence, or a mapping of names to datasets:
    the names appear in messages) sampled in the proportions ``weights`` (finite, at least
    0, not all 0, one per dataset; default: their lengths), ``samples`` positions an epoch
    (default: their samples together). Datasets of other columns, dtypes, shapes or mode,
    bad weights, or a weighted dataset without samples raise
    :class:`~tensorfile.errors.InvalidArgumentError`.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> root = tempfile.mkdtemp()
        >>> for name in "ab":
        ...     _ = dataset.write({"x": np.zeros(3, np.float32)}, os.path.join(root, name),
        ...                       batch_size=3)
        >>> m = dataset.mix([dataset.open(os.path.join(root, n)) for n in "ab"], [1, 0])
        >>> m.draws, m.weights
        ([6, 0], [1.0, 0.0])
    """
    return Mixture(datasets, weights, samples=samples)


class Mixture:
    """Datasets sampled in given proportions (see the module docstring and :func:`mix`):
    ``len`` is the positions of an epoch, :attr:`draws` how many each dataset takes,
    :meth:`to_torch` the training feed, :meth:`order` an epoch's order of global ids (sample
    ``j`` of dataset ``i`` is ``offsets[i] + j``)."""

    def __init__(
        self,
        datasets: Sequence[FeedDataset] | Mapping[str, FeedDataset],
        weights: Sequence[float] | None = None,
        *,
        samples: int | None = None,
    ) -> None:
        if isinstance(datasets, Mapping):
            self.labels = [f"dataset {str(k)!r}" for k in datasets]
            items = list(datasets.values())
        elif isinstance(datasets, Sequence) and not isinstance(datasets, str | bytes):
            items = list(datasets)
            self.labels = [f"dataset {i}" for i in range(len(items))]
        else:
            raise InvalidTypeError(
                f"mix takes a sequence or a mapping of datasets, got {type(datasets).__name__}"
            )
        if not items:
            raise InvalidArgumentError("mix needs at least one dataset")
        for name, ds in zip(self.labels, items, strict=True):
            if not isinstance(ds, FeedDataset):
                raise InvalidTypeError(f"{name} is not a dataset: {type(ds).__name__}")
        self.datasets: list[FeedDataset] = items
        _check_alike(self.labels, items)
        self.counts = [[s.samples for s in d.manifest.shards] for d in items]
        self.lengths = [sum(c) for c in self.counts]
        self.offsets = [sum(self.lengths[:i]) for i in range(len(items))]
        self.weights = self._weights(weights)
        total = sum(self.lengths) if samples is None else samples
        self.samples = check_int(total, "samples", 0, MAX_SAMPLES)
        self.draws = apportion(self.samples, self.weights)
        for name, w, length in zip(self.labels, self.weights, self.lengths, strict=True):
            if w and not length:
                raise InvalidArgumentError(f"{name} has no samples but a weight above 0 ({w})")

    def _weights(self, weights: Sequence[float] | None) -> list[float]:
        if weights is None:
            out = [float(n) for n in self.lengths]
            if not any(out):
                raise InvalidArgumentError("every dataset of the mixture is empty")
            return out
        if isinstance(weights, str | bytes | Mapping):
            raise InvalidTypeError(
                f"weights must be a sequence of numbers, got {type(weights).__name__}"
            )
        if not isinstance(weights, Sequence):
            weights = _as_list(weights)
        if len(weights) != len(self.datasets):
            raise InvalidArgumentError(
                f"mix needs one weight per dataset: {len(weights)} weights for "
                f"{len(self.datasets)} datasets"
            )
        out = []
        for name, w in zip(self.labels, weights, strict=True):
            if isinstance(w, bool | np.bool_) or not isinstance(
                w, int | float | np.integer | np.floating
            ):
                raise InvalidTypeError(f"the weight of {name} is not a number: {w!r}")
            value = float(w)
            if not math.isfinite(value) or value < 0:
                raise InvalidArgumentError(
                    f"the weight of {name} must be finite and at least 0, got {w!r}"
                )
            out.append(value)
        if not any(out):
            raise InvalidArgumentError("the weights of a mixture must not all be 0")
        return out

    def __len__(self) -> int:
        return self.samples

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{name}: {n}/{length}"
            for name, n, length in zip(self.labels, self.draws, self.lengths, strict=True)
        )
        return f"Mixture({parts}; draws/samples, {self.samples} an epoch)"

    def order(self, epoch: int = 0, **options: Any) -> MixtureOrder:
        """The order of ``epoch`` (:class:`~tensorfile.dataset.feed.mix_order.MixtureOrder`)
        under the feed options given as keywords, those of :meth:`to_torch` (the order
        depends on ``seed``, ``shuffle``, ``partitions``, ``shuffle_block`` and
        ``batch_size``, the per-rank batch).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> root = tempfile.mkdtemp()
            >>> for name in "ab":
            ...     _ = dataset.write({"x": np.zeros(2, np.int8)}, os.path.join(root, name),
            ...                       batch_size=2)
            >>> m = dataset.mix([dataset.open(os.path.join(root, n)) for n in "ab"])
            >>> m.order().ids(0, 4).tolist()  # dataset 1's samples are ids 2 and 3
            [0, 2, 1, 3]
            >>> len(m.order(3, shuffle=True, seed=1, batch_size=2))
            4
        """
        return self.epoch_order(epoch, _options(options, "order"))

    def epoch_order(self, epoch: int, options: FeedOptions) -> MixtureOrder:
        """The order of ``epoch`` under ``options`` (what the feed asks for)."""
        return MixtureOrder(self.counts, self.draws, epoch=epoch, options=options)

    def source(self, ids: Sequence[int] | NDArray) -> tuple[NDArray, NDArray]:
        """``(dataset index, sample index in it)`` arrays of global sample ``ids``.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.zeros(3, np.int8)}, out, batch_size=3)
            >>> m = dataset.mix([dataset.open(out)] * 2)  # its samples twice: ids 0-2, 3-5
            >>> [a.tolist() for a in m.source([1, 3])]
            [[0, 1], [1, 0]]
        """
        arr = np.asarray(ids)
        total = sum(self.lengths)
        if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= total):
            raise InvalidArgumentError(f"sample ids must be integers in [0, {total})")
        arr = arr.astype(np.int64)
        ends = np.cumsum(np.asarray(self.lengths, np.int64))
        which = np.searchsorted(ends, arr, side="right")
        return which, arr - np.asarray(self.offsets, np.int64)[which]

    def identity(self) -> dict[str, Any]:
        """What a resume state of this mixture's feed holds besides one dataset's fields:
        ``"mixture"``, a digest of each dataset's shard paths and sample counts, and the
        ``"weights"`` (a state with others is refused, naming the field).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "a")
            >>> _ = dataset.write({"x": np.zeros(2, np.int8)}, out, batch_size=2)
            >>> m = dataset.mix([dataset.open(out)], [2])
            >>> sorted(m.identity()), m.identity()["weights"]
            (['mixture', 'weights'], [2.0])
        """
        digests = [
            shards_digest([s.shard_path for s in d.manifest.shards], counts)
            for d, counts in zip(self.datasets, self.counts, strict=True)
        ]
        return {"mixture": digests, "weights": list(self.weights)}

    def feed_dataset(self) -> FeedDataset:
        """The datasets as one :class:`~tensorfile.dataset.torch.FeedDataset` (what the feed
        gathers global ids from: their shards concatenated)."""
        return Concatenated(self.datasets, self.labels)

    def to_torch(self, **options: Any) -> TorchMixture:
        """The mixture's training feed, a ``torch.utils.data.IterableDataset``
        (:class:`~tensorfile.dataset.feed.torch_mixture.TorchMixture`): the keywords of
        :meth:`~tensorfile.dataset.Dataset.to_torch` (``shuffle``, ``seed``, ``rank``,
        ``world_size``, ``even``, ``batch_size``, ``per_sample``, ``drop_last``,
        ``partitions``, ``shuffle_block``; not ``map_style``), with the same split between
        ranks and workers, batches and resume state (which also names the datasets and the
        weights).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> root = tempfile.mkdtemp()
            >>> for name in "ab":
            ...     _ = dataset.write({"x": np.zeros(3, np.int8)}, os.path.join(root, name),
            ...                       batch_size=3)
            >>> m = dataset.mix([dataset.open(os.path.join(root, n)) for n in "ab"])
            >>> [b["x"].shape[0] for b in m.to_torch(batch_size=4)]
            [4, 2]
        """
        opts = _options(options, "to_torch")
        with needing("Mixture.to_torch()", extra="torch"):
            from .torch_mixture import TorchMixture

        return TorchMixture(self, opts)


def _options(options: dict[str, Any], what: str) -> FeedOptions:
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise InvalidTypeError(f"{what} of a mixture takes no option(s) {unknown}")
    return FeedOptions(**options)


def _as_list(weights: Any) -> list[Any]:
    try:
        return list(np.asarray(weights).reshape(-1).tolist())
    except (TypeError, ValueError):
        raise InvalidTypeError(
            f"weights must be a sequence of numbers, got {type(weights).__name__}"
        ) from None


def _check_alike(names: list[str], datasets: list[FeedDataset]) -> None:
    """The same mode, tensor columns, dtypes and sample shapes in every dataset that has
    samples (an empty one has no schema to compare, and is never drawn from)."""
    full = [(n, d) for n, d in zip(names, datasets, strict=True) if _has_samples(d)]
    if not full:
        return
    first, ref = full[0]
    schema = ref.manifest.sample_schema()
    columns = set(ref.manifest.tensor_columns())
    for name, ds in full[1:]:
        if ds.mode != ref.mode:
            raise InvalidArgumentError(
                f"{name} is a {ds.mode!r} dataset and {first} a {ref.mode!r} one: a mixture's "
                "datasets must be of one mode"
            )
        other = set(ds.manifest.tensor_columns())
        if other != columns:
            extra, lacking = sorted(other - columns), sorted(columns - other)
            raise InvalidArgumentError(
                f"{name} has other columns than {first}: "
                + "; ".join(
                    [f"{c!r} only in {name}" for c in extra]
                    + [f"{c!r} missing in {name}" for c in lacking]
                )
            )
        theirs = ds.manifest.sample_schema()
        for col in sorted(columns):
            a, b = schema.get(col), theirs.get(col)
            if a is None or b is None or _describe(a) != _describe(b):
                raise InvalidArgumentError(
                    f"column {col!r} differs: {_describe(b)} in {name}, {_describe(a)} in "
                    f"{first}; a mixture's datasets must agree on every column"
                )


def _has_samples(ds: FeedDataset) -> bool:
    return any(s.samples for s in ds.manifest.shards)


def _describe(info: dict[str, Any] | None) -> str:
    return "no schema" if info is None else f"{info['dtype']} of shape {list(info['shape'])}"


class Concatenated:
    """Datasets as one :class:`~tensorfile.dataset.torch.FeedDataset`: their shards in
    order (dataset ``i``'s entries named ``"i/<shard path>"``), each shard's arrays and
    downloads routed to the dataset that has it, ``len`` and ``[i]`` over the samples
    together."""

    def __init__(self, datasets: Sequence[FeedDataset], labels: Sequence[str]) -> None:
        self.datasets = list(datasets)
        self.labels = list(labels)
        self._owner: dict[str, tuple[int, ShardEntry]] = {}
        shards: list[ShardEntry] = []
        for i, ds in enumerate(self.datasets):
            for entry in ds.manifest.shards:
                mine = replace(entry, shard_path=f"{i}/{entry.shard_path}")
                self._owner[mine.shard_path] = (i, entry)
                shards.append(mine)
        ref = next((d for d in self.datasets if _has_samples(d)), self.datasets[0])
        self._manifest = replace(ref.manifest, shards=shards)
        counts = [sum(s.samples for s in d.manifest.shards) for d in self.datasets]
        self._starts = np.cumsum([0, *counts])

    @property
    def path(self) -> str:
        """The datasets' locations (for messages)."""
        listed = ", ".join(
            f"{n}: {d.path}" for n, d in zip(self.labels, self.datasets, strict=True)
        )
        return f"mixture of {listed}"

    @property
    def manifest(self) -> Manifest:
        """The first dataset's manifest (of one with samples) with every dataset's shards."""
        return self._manifest

    @property
    def mode(self) -> str:
        """The datasets' mode."""
        return self._manifest.mode

    @property
    def predownload(self) -> int:
        """The most any dataset asks for."""
        return max(d.predownload for d in self.datasets)

    def prefetch(self, shards: Sequence[ShardEntry]) -> None:
        """Each dataset's shards among ``shards`` handed to its background download."""
        mine: dict[int, list[ShardEntry]] = {}
        for entry in shards:
            i, own = self._owner[entry.shard_path]
            mine.setdefault(i, []).append(own)
        for i, entries in mine.items():
            if self.datasets[i].predownload:
                self.datasets[i].prefetch(entries)

    def shard_arrays(self, shard: ShardEntry) -> dict[str, NDArray]:
        """The arrays of one of the shards, from its dataset."""
        i, own = self._owner[shard.shard_path]
        return self.datasets[i].shard_arrays(own)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, Any]:
        index = check_int(index, "index", 0, len(self) - 1)
        i = int(np.searchsorted(self._starts[1:], index, side="right"))
        return self.datasets[i][index - int(self._starts[i])]
