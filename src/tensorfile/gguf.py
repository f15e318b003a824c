"""GGUF files (llama.cpp), read-only: the public face of :mod:`tensorfile.formats.gguf`
(both hold the same names).

Example:
    >>> from tensorfile.gguf import GGUFValue
    >>> GGUFValue("f32", 0.5).value
    0.5
"""

from tensorfile.formats.gguf import *  # noqa: F403
from tensorfile.formats.gguf import __all__ as __all__
