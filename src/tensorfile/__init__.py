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

from typing import TYPE_CHECKING

from ._version import __version__
from .core.catalog import ByteRange, Catalog, Component, TensorInfo
from .core.dtypes import DType
from .core.extras import lazy_names
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
    from .formats.checkpoint import ShardedReader
    from .formats.open import open
    from .ops.convert import convert
    from .ops.diff import diff
    from .ops.hash import structural_hash
    from .ops.inspect import inspect
    from .ops.verify import verify
    from .patching import patch_safetensors, patched_safetensors, unpatch_safetensors

# the operations and the opening of checkpoints load on first use: `import tensorfile` (and
# the drop-in faces, which import it) stays light
_LAZY = {
    "ShardedReader": "tensorfile.formats.checkpoint",
    "open": "tensorfile.formats.open",
    "convert": "tensorfile.ops.convert",
    "diff": "tensorfile.ops.diff",
    "inspect": "tensorfile.ops.inspect",
    "patch_safetensors": "tensorfile.patching",
    "patched_safetensors": "tensorfile.patching",
    "unpatch_safetensors": "tensorfile.patching",
    "structural_hash": "tensorfile.ops.hash",
    "verify": "tensorfile.ops.verify",
}

__getattr__ = lazy_names(__name__, _LAZY)


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
