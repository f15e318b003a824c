"""The exceptions tensorfile raises (the tree is drawn in :mod:`tensorfile.core.errors`).

This module is the public name of :mod:`tensorfile.core.errors`; both hold the same classes.

Example:
    >>> from tensorfile.errors import FormatError, TensorFileError
    >>> issubclass(FormatError, TensorFileError)
    True
"""

from .core.errors import *  # noqa: F403
from .core.errors import __all__ as __all__
