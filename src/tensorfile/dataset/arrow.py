"""A dataset's samples as Arrow: a ``pyarrow.Table`` or record batches streamed shard by shard.

The public import path; the implementation lives in :mod:`tensorfile.dataset.loaders.arrow`.
"""

from .loaders.arrow import LOW_PRECISION, arrow_schema, iter_arrow, to_arrow

__all__ = ["LOW_PRECISION", "arrow_schema", "iter_arrow", "to_arrow"]
