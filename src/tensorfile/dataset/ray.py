"""A dataset as Ray Data: a ``ray.data`` datasource with one read task per group of shards.

The public import path; the implementation lives in :mod:`tensorfile.dataset.loaders.ray`.
"""

from .loaders.ray import SafetensorsDatasource, to_ray

__all__ = ["SafetensorsDatasource", "to_ray"]
