"""A dataset as a Hugging Face ``datasets.Dataset`` (or ``IterableDataset``).

The public import path; the implementation lives in :mod:`tensorfile.dataset.loaders.hf`.
"""

from .loaders.hf import features_of, to_hf

__all__ = ["features_of", "to_hf"]
