"""Whole sharded checkpoints as framework tensors: ``load_sharded`` of the faces.

The reference has no loader for a sharded checkpoint (``transformers`` calls ``load_file``
shard by shard). tensorfile reads one through :class:`~tensorfile.formats.checkpoint.ShardedReader`:
the tensors of every shard in one read plan (:mod:`tensorfile.core.plan`), so the shards are
read in parallel rather than one after the other.

Example:
    >>> import tempfile, numpy as np
    >>> from tensorfile.safetensors.numpy import save_sharded
    >>> d = tempfile.mkdtemp()
    >>> _ = save_sharded({"a": np.zeros(3), "b": np.ones(3)}, d, max_shard_size=30)
    >>> sorted(load_sharded(d, "np"))
    ['a', 'b']
"""

from __future__ import annotations

import os
from typing import Any

from tensorfile.frameworks import get_framework

__all__ = ["load_sharded"]


def load_sharded(
    path: str | os.PathLike[str], framework: str, device: Any = "cpu", *, verify: bool = False
) -> dict[str, Any]:
    """Every tensor of the checkpoint ``path`` (an index file or URL, a folder holding one,
    or a single file) as ``framework``'s tensors on ``device``, in the checkpoint's order."""
    from tensorfile.formats.open import open as open_checkpoint

    fw = get_framework(framework, device)
    with open_checkpoint(os.fspath(path), verify=verify or None) as reader:
        names = reader.keys()
        return dict(zip(names, fw.read(reader, names), strict=True))
