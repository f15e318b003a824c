"""Conformance suites shipped with tensorfile: base classes with pytest-style ``test_*``
methods that a format, a store or a source subclasses in its tests, so that a new one is
added by passing them (zarr's ``zarr.testing.store.StoreTests`` is the model). Every format,
store and source of tensorfile passes them (``tests/formats/test_format_conformance.py``,
``tests/sources/test_store_conformance.py``, ``tests/sources/test_source_conformance.py``).
``import tensorfile`` never imports this package.

Example:
    >>> from tensorfile.testing import FormatConformance, SourceConformance, StoreConformance
    >>> [n for n in dir(FormatConformance) if n.startswith("test_")][0]
    'test_a_failed_write_leaves_the_destination_intact'
    >>> "test_reads_from_several_threads_at_once" in dir(SourceConformance)
    True
"""

from .format import FormatConformance
from .source import SourceConformance
from .store import StoreConformance

__all__ = ["FormatConformance", "SourceConformance", "StoreConformance"]
