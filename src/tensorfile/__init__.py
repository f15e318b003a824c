"""tensorfile: fast, strict readers and writers for tensor files.

* :func:`tensorfile.open` reads safetensors files (a path or bytes): zero-copy views,
  owned copies, partial slices.
* :mod:`tensorfile.safetensors` is a drop-in for the ``safetensors`` package.
* Every error is a :class:`TensorFileError` (see :mod:`tensorfile.errors`).

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> tensorfile.open(save({"a": np.zeros(3, np.float32)})).keys()
    ['a']
"""

from ._open import open
from .catalog import ByteRange, Catalog, Component, TensorInfo
from .dtypes import DType
from .errors import (
    ChecksumError,
    FormatError,
    InvalidArgumentError,
    SafetensorError,
    SourceError,
    TensorFileError,
    TensorNotFoundError,
    UnsupportedError,
    ZTensorError,
)
from .ops import diff, inspect, structural_hash
from .reader import Reader

__version__ = "0.1.0"

__all__ = [
    "ByteRange",
    "Catalog",
    "ChecksumError",
    "Component",
    "DType",
    "FormatError",
    "InvalidArgumentError",
    "Reader",
    "SafetensorError",
    "SourceError",
    "TensorFileError",
    "TensorInfo",
    "TensorNotFoundError",
    "UnsupportedError",
    "ZTensorError",
    "__version__",
    "diff",
    "inspect",
    "open",
    "structural_hash",
]
