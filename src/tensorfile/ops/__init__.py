"""The operations behind the command line, as pure functions returning dataclasses.

* :func:`load`: the structure of a file, sharded checkpoint or glob, from headers only.
* :func:`inspect`: counts, sizes, metadata and tensors.
* :func:`structural_hash` (weight-inspect's) and :func:`content_hash` (names, dtypes,
  shapes and each tensor's digest, the same across formats; every tensor's bytes are read,
  or with ``trust_stored_digests=True`` the digests a trusted file stores stand for them).
* :func:`diff`: tensors and metadata added, removed and changed (and data, on request).
* :func:`read_metadata` / :func:`edit_metadata`: metadata without touching the tensors.
* :func:`convert`: any format in, safetensors/zTensor v1.0/v2/npz out, tensor by tensor.
* :func:`verify`: every structural rule, digest and shard of a file or checkpoint (and, deep,
  every value: NaN, Inf, BOOL bytes).

Shapes are row-major for every format (a GGUF header's innermost-first dimensions are
reversed; only the structural hash writes them in the file's order, as weight-inspect does)
and dtypes keep one vocabulary (``F32`` in safetensors and GGUF alike; GGUF's quantized types
by their names, ``Q4_K``). A file without tensors gives empty tuples, lists and dicts, never
None. :func:`~tensorfile.ops.inspect.brief_value` shortens a metadata value (a 150,000-token
vocabulary) the way ``inspect`` shows it; :class:`DiffResult` carries whole values for it.

Progress: the operations that can take long take ``progress``, a callable
``(done, total) -> None`` called from the calling thread as work advances (``done`` only
grows and ends at ``total``; the units are the operation's own):

* :func:`structural_hash` and :func:`inspect` (``progress=`` keyword): metadata items
  canonicalised (each item of an array counts) and tensors, after the header is read;
* :func:`content_hash` (``progress``, second argument): bytes of tensor data hashed (the
  total leaves out tensors a stored digest stands for);
* :func:`diff` with ``data=True`` (``progress=`` keyword): bytes of the first file's
  tensors compared.

What a file only claims is bounded before it is used: an ``*.index.json`` over
:data:`MAX_INDEX_BYTES` (64 MiB) is refused unread, and a sparse tensor whose dense form is
over :data:`MAX_DENSE_BYTES` (16 GiB) is refused by :func:`content_hash` and
``diff(..., data=True)`` before any data is read (smaller ones are densified a 16 MiB piece
at a time). An index names its shards by plain relative names, in its own folder.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ops
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(4, np.float32)}, path)
    >>> ops.inspect(path).parameter_count
    4
"""

from ..core.catalog import ShardInfo
from ._catalogs import MAX_INDEX_BYTES, load
from ._dense import MAX_DENSE_BYTES
from .convert import ConvertResult, convert
from .diff import DiffResult, diff
from .hash import content_hash, structural_hash
from .inspect import InspectResult, inspect, module_tree
from .metadata import MetadataEdit, edit_metadata, read_metadata
from .verify import Failure, TensorStats, VerifyReport, verify

__all__ = [
    "MAX_DENSE_BYTES",
    "MAX_INDEX_BYTES",
    "ConvertResult",
    "DiffResult",
    "Failure",
    "InspectResult",
    "MetadataEdit",
    "ShardInfo",
    "TensorStats",
    "VerifyReport",
    "content_hash",
    "convert",
    "diff",
    "edit_metadata",
    "inspect",
    "load",
    "module_tree",
    "read_metadata",
    "structural_hash",
    "verify",
]
