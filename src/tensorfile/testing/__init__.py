"""Conformance suites shipped with tensorfile: base classes with pytest-style ``test_*``
methods that a format or a store subclasses in its tests, so that a new one is added by
passing them (zarr's ``zarr.testing.store.StoreTests`` is the model). Every format and every
store of tensorfile passes them (``tests/formats/test_format_conformance.py``,
``tests/sources/test_store_conformance.py``). ``import tensorfile`` never imports this
package.

Example:
    >>> from tensorfile.testing import FormatConformance, StoreConformance
    >>> [n for n in dir(FormatConformance) if n.startswith("test_")][0]
    'test_a_failed_write_leaves_the_destination_intact'
"""

from .format import FormatConformance
from .store import StoreConformance

__all__ = ["FormatConformance", "StoreConformance"]
