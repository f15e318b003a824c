"""Sharded checkpoints read as one file: the public face of
:mod:`tensorfile.formats.checkpoint`.

Example:
    >>> from tensorfile.checkpoint import ShardedReader
    >>> ShardedReader.__name__
    'ShardedReader'
"""

from tensorfile.formats.checkpoint import ShardedReader
from tensorfile.formats.open import open

__all__ = ["ShardedReader", "open"]
