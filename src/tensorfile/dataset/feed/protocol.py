"""What the feed needs of a dataset, as a protocol: :class:`FeedDataset`; and of a mixture of
datasets: :class:`FeedMixture`.

The feed (:mod:`.torch`, :mod:`.torch_batches`) reads a dataset through these members only:
its manifest (shards, sample counts, schema), its mode, the arrays of one shard, and the
background download of the shards it reads next. :class:`~tensorfile.dataset.Dataset` has
them all; anything else that has them (a view of a dataset, a test's own) can be fed too.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(4, dtype=np.int8)}, out, batch_size=2)
    >>> isinstance(dataset.open(out), FeedDataset)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..layout.manifest import Manifest, ShardEntry
from .options import FeedOptions
from .order import SampleOrder

__all__ = ["FeedDataset", "FeedMixture"]

NDArray = np.ndarray[Any, Any]


@runtime_checkable
class FeedDataset(Protocol):
    """The members of a dataset the feed uses (see the module docstring)."""

    @property
    def path(self) -> str:
        """Where the dataset is (for messages)."""
        ...

    @property
    def manifest(self) -> Manifest:
        """Its checked manifest: the shards in order, their sample counts, the schema."""
        ...

    @property
    def mode(self) -> str:
        """``batch`` or ``kv``."""
        ...

    @property
    def predownload(self) -> int:
        """Samples ahead the feed asks :meth:`prefetch` for (0: none)."""
        ...

    def prefetch(self, shards: Sequence[ShardEntry]) -> None:
        """Start downloading the shards the feed reads next, in that order."""
        ...

    def shard_arrays(self, shard: ShardEntry) -> dict[str, NDArray]:
        """One shard's real samples as ``{column: array}`` (``"key"`` for a KV dataset)."""
        ...

    def __len__(self) -> int:
        """The samples (real rows only)."""
        ...

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Sample ``index`` as ``{column: array}`` (the map-style feed)."""
        ...


class FeedMixture(Protocol):
    """What a mixture's feed (:class:`~tensorfile.dataset.feed.torch_mixture.TorchMixture`)
    uses of a :class:`~tensorfile.dataset.feed.mixture.Mixture`."""

    @property
    def samples(self) -> int:
        """The positions of an epoch."""
        ...

    def feed_dataset(self) -> FeedDataset:
        """The datasets as one, their shards concatenated (global ids)."""
        ...

    def identity(self) -> dict[str, Any]:
        """What a resume state must match besides the feed's own fields (JSON values)."""
        ...

    def epoch_order(self, epoch: int, options: FeedOptions) -> SampleOrder:
        """The order of ``epoch`` under ``options``, in global ids."""
        ...
