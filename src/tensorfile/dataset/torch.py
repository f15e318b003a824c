"""A dataset's samples for PyTorch: an ``IterableDataset`` that feeds training in an order
independent of the world size and resumes mid-epoch from a small JSON state, and a map-style
view (:meth:`tensorfile.dataset.Dataset.to_torch`).

The public import path; the implementation lives in :mod:`tensorfile.dataset.feed.torch`.
"""

from .feed.torch import ShardedIterable, TorchIterable, TorchMap

__all__ = ["ShardedIterable", "TorchIterable", "TorchMap"]
