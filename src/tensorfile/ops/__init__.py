"""The operations behind the command line, as pure functions returning dataclasses.

* :func:`load`: the structure of a file, sharded checkpoint or glob, from headers only.
* :func:`inspect`: counts, sizes, metadata and tensors.
* :func:`structural_hash` (weight-inspect's) and :func:`content_hash` (names, dtypes,
  shapes and bytes, the same across formats).
* :func:`diff`: tensors and metadata added, removed and changed (and data, on request).
* :func:`read_metadata` / :func:`edit_metadata`: metadata without touching the tensors.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import ops
    >>> from tensorfile.safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "m.safetensors")
    >>> save_file({"w": np.zeros(4, np.float32)}, path)
    >>> ops.inspect(path).parameter_count
    4
"""

from ._structure import ShardInfo, Structure, TensorEntry, load
from .diff import DiffResult, diff
from .hash import content_hash, structural_hash
from .inspect import InspectResult, inspect, module_tree
from .metadata import MetadataEdit, edit_metadata, read_metadata

__all__ = [
    "DiffResult",
    "InspectResult",
    "MetadataEdit",
    "ShardInfo",
    "Structure",
    "TensorEntry",
    "content_hash",
    "diff",
    "edit_metadata",
    "inspect",
    "load",
    "module_tree",
    "read_metadata",
    "structural_hash",
]
