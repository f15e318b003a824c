"""What the public face of the zTensor format is made of, named in one place.

The private modules of :mod:`tensorfile.formats.ztensor` hold the implementation (``_hooks``
opens either container, ``_writer`` chooses the writer a version asks for, ``_layouts`` the
sparse tensors, ``v1/`` and ``v2/`` the two containers). This module names what
:mod:`tensorfile.ztensor` re-exports: :func:`open`, :func:`load_file`, :func:`save_file`,
the writers (:class:`Writer`, :class:`Writer2`), the readers (:class:`ZTensorReader`,
:class:`ZTensor2Reader`), the sparse and extension tensors, and the format's errors.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile.formats.ztensor.faces import load_file, save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.zt")
    >>> save_file({"w": np.arange(3, dtype=np.int8)}, path, version=2)
    >>> load_file(path)["w"].tolist()
    [0, 1, 2]
"""

from tensorfile.core.errors import (
    ZTensorChecksumError,
    ZTensorError,
    ZTensorIOError,
    ZTensorMissingError,
    ZTensorUnsupportedError,
    ZTensorWarning,
)
from tensorfile.formats.ztensor._hooks import load_file, open
from tensorfile.formats.ztensor._layouts import COOTensor, CSRTensor, ExtensionTensor
from tensorfile.formats.ztensor._writer import Writer, save_file
from tensorfile.formats.ztensor.v1._reader import ZTensorReader
from tensorfile.formats.ztensor.v2._reader import ZTensor2Reader
from tensorfile.formats.ztensor.v2._writer import Writer2

__all__ = [
    "COOTensor",
    "CSRTensor",
    "ExtensionTensor",
    "Writer",
    "Writer2",
    "ZTensor2Reader",
    "ZTensorChecksumError",
    "ZTensorError",
    "ZTensorIOError",
    "ZTensorMissingError",
    "ZTensorReader",
    "ZTensorUnsupportedError",
    "ZTensorWarning",
    "load_file",
    "open",
    "save_file",
]
