"""A dataset's columns as lazily loaded ``dask.array``s, one chunk per shard.

The public import path; the implementation lives in :mod:`tensorfile.dataset.loaders.dask`.
"""

from .loaders.dask import to_dask

__all__ = ["to_dask"]
