"""A mixture of datasets (:class:`~tensorfile.dataset.feed.mixture.Mixture`) as a PyTorch
training feed: :class:`TorchMixture`, a :class:`~tensorfile.dataset.torch.TorchIterable`
whose epoch is the mixture's order (:mod:`~tensorfile.dataset.feed.mix_order`) of global ids
over the datasets' shards together, so the split between ranks and workers, the batches, the
resume state and anything that drives a feed through its pieces (``_pass``, ``_gather``,
``state_dict``) work on it unchanged. Its resume state also holds a digest of each dataset's
shards and the weights: a state of another mixture is refused, naming the field.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> root = tempfile.mkdtemp()
    >>> for name, first in (("a", 0), ("b", 10)):
    ...     _ = dataset.write({"x": np.arange(first, first + 3, dtype=np.int8)},
    ...                       os.path.join(root, name), batch_size=3)
    >>> m = dataset.mix([dataset.open(os.path.join(root, n)) for n in "ab"])
    >>> it = m.to_torch(batch_size=2)
    >>> batches = iter(it)
    >>> next(batches)["x"].tolist(), it.state_dict()["samples"]
    ([0, 10], 2)
    >>> again = m.to_torch(batch_size=2)
    >>> again.load_state_dict(it.state_dict())
    >>> [b["x"].tolist() for b in again]
    [[1, 11], [2, 12]]
"""

from __future__ import annotations

from typing import Any

from .options import FeedOptions
from .order import SampleOrder
from .protocol import FeedMixture
from .torch import TorchIterable

__all__ = ["TorchMixture"]


class TorchMixture(TorchIterable):
    """The training feed of a :class:`~tensorfile.dataset.feed.mixture.Mixture` (made by
    :meth:`~tensorfile.dataset.feed.mixture.Mixture.to_torch`; see the module docstring)."""

    def __init__(self, mixture: FeedMixture, options: FeedOptions | None = None) -> None:
        self.mixture = mixture
        super().__init__(mixture.feed_dataset(), options)

    def _length(self) -> int:
        return self.mixture.samples

    def _identity(self) -> dict[str, Any]:
        return {**super()._identity(), **self.mixture.identity()}

    def _order(self, epoch: int) -> SampleOrder:
        return self.mixture.epoch_order(epoch, self.options)
