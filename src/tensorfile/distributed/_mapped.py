"""A box of a tensor copied out of a mapped local file: one strided copy.

Where a rank's box of a stored tensor is many short runs (a ``Shard(1)`` slab of a
row-major matrix: a run per row), reading run by run spends its time on the runs, not the
bytes. A local file is mapped already (:meth:`~tensorfile.core.source.Source.buffer`): torch
copies the box straight out of the mapping, touching only the pages that hold it (the
kernel's read-ahead brings them in from a cold cache).

Example:
    >>> import torch
    >>> data = memoryview(bytes(range(24)))
    >>> dest = torch.empty(2, 2, dtype=torch.uint8)
    >>> copy_box(data, 0, (4, 6), torch.uint8, (1, 2), (2, 2), dest).tolist()
    [[8, 9], [14, 15]]
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

__all__ = ["MANY_RUNS", "copy_box"]

MANY_RUNS = 64
"""Runs of a box from which one strided copy beats a read per run."""


def copy_box(
    buf: memoryview,
    start: int,
    shape: tuple[int, ...],
    stored: torch.dtype,
    offsets: tuple[int, ...],
    lengths: tuple[int, ...],
    dest: torch.Tensor,
) -> torch.Tensor:
    """Copy the box ``offsets``/``lengths`` of the ``stored`` tensor of ``shape`` whose
    bytes start at ``start`` of ``buf`` into ``dest`` (converted to its dtype); ``dest``."""
    nbytes = math.prod(shape) * stored.itemsize
    raw = np.frombuffer(buf, np.uint8, count=nbytes, offset=start)
    with warnings.catch_warnings():  # (read-only: it is only read from)
        warnings.simplefilter("ignore", UserWarning)
        whole = torch.from_numpy(raw)
    tensor = whole.view(stored).reshape(shape)
    box = tensor[tuple(slice(o, o + n) for o, n in zip(offsets, lengths, strict=True))]
    dest.copy_(box)
    return dest
