"""A dataset's samples for PyTorch: an ``IterableDataset`` that feeds training in an order
independent of the world size and resumes mid-epoch from a small JSON state, and a map-style
view (:meth:`tensorfile.dataset.Dataset.to_torch`), a mixture's feed (:class:`TorchMixture`,
:meth:`tensorfile.dataset.Mixture.to_torch`); the feed's options as one typed value
(:class:`FeedOptions`), what it needs of a dataset (:class:`FeedDataset`), and its batches
gathered by threads of the training process into reused buffers (:class:`FeedLoader`).

The public import path; the implementation lives in :mod:`tensorfile.dataset.feed`.
"""

from .feed.options import FeedOptions
from .feed.protocol import FeedDataset
from .feed.torch import TorchIterable, TorchMap
from .feed.torch_loader import FeedLoader
from .feed.torch_mixture import TorchMixture

__all__ = ["FeedDataset", "FeedLoader", "FeedOptions", "TorchIterable", "TorchMap", "TorchMixture"]
