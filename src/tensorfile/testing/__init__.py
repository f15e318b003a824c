"""Conformance suites shipped with tensorfile, for formats (and stores) to pass: base classes
with pytest-style ``test_*`` methods that a test module subclasses (zarr's
``zarr.testing.store.StoreTests`` is the model). Importing this package imports neither
pytest nor torch.

Example:
    >>> from tensorfile.testing import FormatConformance
    >>> [n for n in dir(FormatConformance) if n.startswith("test_")][0]
    'test_a_failed_write_leaves_the_destination_intact'
"""

from .format import FormatConformance

__all__ = ["FormatConformance"]
