"""tensorfile: fast, strict readers and writers for tensor files.

* :func:`tensorfile.open` reads safetensors, zTensor and GGUF files (a path, a URL or
  bytes; the format is detected from the content): zero-copy views, owned copies, partial
  slices. Bytes of no format it knows are an :class:`UnknownFormatError`.
* :mod:`tensorfile.safetensors` is a drop-in for the ``safetensors`` package.
* Every error is a :class:`TensorFileError` (see :mod:`tensorfile.errors`).

Example:
    >>> import numpy as np, tensorfile
    >>> from tensorfile.safetensors.numpy import save
    >>> tensorfile.open(save({"a": np.zeros(3, np.float32)})).keys()
    ['a']
"""

import importlib
import sys
from typing import TYPE_CHECKING, Any

from tensorfile.formats.checkpoint import ShardedReader
from tensorfile.formats.open import open

from ._version import __version__
from .core.catalog import ByteRange, Catalog, Component, TensorInfo
from .core.dtypes import DType
from .core.reader import Reader
from .errors import (
    ChecksumError,
    FormatError,
    InvalidArgumentError,
    SafetensorError,
    SourceError,
    TensorFileError,
    TensorNotFoundError,
    UnknownFormatError,
    UnsupportedError,
    ZTensorError,
)

if TYPE_CHECKING:
    from .ops.convert import convert
    from .ops.diff import diff
    from .ops.hash import structural_hash
    from .ops.inspect import inspect
    from .ops.verify import verify
    from .patching import patch_safetensors, patched_safetensors, unpatch_safetensors

# the operations load on first use: `import tensorfile` stays light
_LAZY = {
    "convert": "tensorfile.ops.convert",
    "diff": "tensorfile.ops.diff",
    "inspect": "tensorfile.ops.inspect",
    "patch_safetensors": "tensorfile.patching",
    "patched_safetensors": "tensorfile.patching",
    "unpatch_safetensors": "tensorfile.patching",
    "structural_hash": "tensorfile.ops.hash",
    "verify": "tensorfile.ops.verify",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # a submodule loaded before this package ran: the import hook loads
        # tensorfile.patching at interpreter start without importing tensorfile
        loaded = sys.modules.get(f"{__name__}.{name}")
        if loaded is not None:
            return loaded
        raise AttributeError(f"module 'tensorfile' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
    "ShardedReader",
    "SourceError",
    "TensorFileError",
    "TensorInfo",
    "TensorNotFoundError",
    "UnknownFormatError",
    "UnsupportedError",
    "ZTensorError",
    "__version__",
    "convert",
    "diff",
    "inspect",
    "open",
    "patch_safetensors",
    "patched_safetensors",
    "structural_hash",
    "unpatch_safetensors",
    "verify",
]
