"""The order in which an epoch visits a dataset's samples: a function of the dataset's shard
sizes, the seed and the epoch only (never of the number of nodes, ranks or workers).

The public import path; the implementation lives in :mod:`tensorfile.dataset.feed.order`.
"""

from .feed.order import EpochOrder, epoch_order, partition_count

__all__ = ["EpochOrder", "epoch_order", "partition_count"]
