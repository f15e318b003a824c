"""zTensor v1.0: read and write the format of ``shared/seeds/004`` (magic ``ZTEN1000``).

* :func:`save_file` / :class:`Writer`: dense tensors of every zTensor dtype, sparse CSR and
  COO tensors, file attributes, per-component zstd compression and crc32c/sha256 digests.
  Writes are atomic; :class:`Writer` appends one tensor at a time (and
  :meth:`Writer.add_stream` one chunk at a time), so files larger than memory can be written.
* :func:`open` / :func:`load_file`: every step of the spec's parsing algorithm, version
  negotiation, zero-copy views of raw dense tensors, zstd decompression bounded by the
  declared size, digest verification (``verify=False`` skips it), extension layouts read as
  raw components.
* Every problem with a file is a :class:`ZTensorError`.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ztensor
    >>> path = os.path.join(tempfile.mkdtemp(), "model.zt")
    >>> sparse = ztensor.CSRTensor.from_dense(np.eye(3, dtype=np.float32))
    >>> ztensor.save_file({"w": np.ones((2, 2), np.float16), "s": sparse}, path,
    ...                   attributes={"license": "MIT"}, compression="zstd", checksum="crc32c")
    >>> loaded = ztensor.load_file(path)
    >>> loaded["w"].dtype, loaded["s"].to_dense().trace()
    (dtype('float16'), np.float32(3.0))
"""

from ..core.errors import (
    ZTensorChecksumError,
    ZTensorError,
    ZTensorIOError,
    ZTensorMissingError,
    ZTensorUnsupportedError,
    ZTensorWarning,
)
from ._layouts import COOTensor, CSRTensor, ExtensionTensor
from ._reader import ZTensorReader, load_file, open
from ._writer import Writer, save_file

__all__ = [
    "COOTensor",
    "CSRTensor",
    "ExtensionTensor",
    "Writer",
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
