"""GGUF files (llama.cpp), read-only: the public face of :mod:`tensorfile.formats.gguf`.

Example:
    >>> from tensorfile.gguf import GGUFValue
    >>> GGUFValue("f32", 0.5).value
    0.5
"""

from tensorfile.formats.gguf import (
    GGML_TYPES,
    MAX_ARRAY_ITEMS,
    MAX_HEADER_BYTES,
    MAX_STRING_BYTES,
    PLAIN_TYPES,
    GGUFHeader,
    GGUFTensor,
    GGUFValue,
    catalog_of,
    open_reader,
    read_catalog,
    read_header,
)

__all__ = [
    "GGML_TYPES",
    "MAX_ARRAY_ITEMS",
    "MAX_HEADER_BYTES",
    "MAX_STRING_BYTES",
    "PLAIN_TYPES",
    "GGUFHeader",
    "GGUFTensor",
    "GGUFValue",
    "catalog_of",
    "open_reader",
    "read_catalog",
    "read_header",
]
