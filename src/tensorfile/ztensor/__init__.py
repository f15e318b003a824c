"""zTensor: read and write both containers, v1.0 (the zTensor v1.0 specification, magic
``ZTEN1000``) and v2 (the container ztensor 2.x writes, magic ``89 5A 54 32 0D 0A 1A 0A``).

:func:`open`, :func:`load_file` and ``tensorfile.open`` read either, told apart by the
magic. Writing is v1.0 by default; ``version=2`` writes v2 (:class:`Writer2`).

zTensor v2 (reading: :class:`ZTensor2Reader`):

* a 40-byte footer points at a deterministic-CBOR manifest (XXH3-64 checked, at most
  1 GiB); every rule of the spec's validation summary is checked on open;
* storage dtypes and logical types (``bool``, the fp8 family, ``f4_e2m1``, ``complex64``,
  ``complex128``) map onto tensorfile's dtypes; ``zt.sparse_csr/1`` and
  ``zt.sparse_coo/1`` objects come back as :class:`CSRTensor`/:class:`COOTensor`;
  unknown layouts, encodings and types are listed and readable as stored bytes, and
  refused when decoded;
* ``zt.zstd-seekable/1`` parts are decoded frame by frame, never past the declared size;
  ``xxh3:``/``sha256:`` digests cover the decoded bytes (v1.0's cover the stored bytes:
  ``Component.digest_over`` says which);
* attributes are any CBOR values (:attr:`ZTensor2Reader.attributes`); ``metadata`` has
  them as text (text as it is, anything else as JSON);
* parts in other files (a shard table) are found next to a local root as
  ``<stem>-<shard>.zt``; a data shard opens with no tensors.

``save_file(tensors, path, version=2, checksum="xxh3")`` writes canonical form, the file
ztensor 2.1.2 writes for the same tensors; ``compression="zstd"`` writes seekable zstd where
it makes a part smaller, small tensors packed at 4096 (never a bigger file than raw);
``align`` any multiple of 4096, for every blob.

zTensor v1.0:

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
    >>> ztensor.save_file({"w": np.arange(3, dtype=np.int8)}, path, version=2,
    ...                   attributes={"epoch": 3}, checksum="xxh3")
    >>> with ztensor.open(path) as f:
    ...     f.catalog.version, f.get_tensor("w").tolist(), f.attributes
    ('2', [0, 1, 2], {'epoch': 3})
"""

from tensorfile.formats.ztensor.faces import *  # noqa: F403
from tensorfile.formats.ztensor.faces import __all__ as __all__
