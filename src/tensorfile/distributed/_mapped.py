"""A box of a tensor copied out of a mapped local file: one strided copy.

Where a rank's box of a stored tensor is many short runs (a ``Shard(1)`` slab of a
row-major matrix: a run per row), reading run by run spends its time on the runs, not the
bytes. :func:`copy_mapped` maps a local file's tensor read-only (a shared read-only
mapping is not charged against the memory commit, however large the file) and torch copies
the box straight out of it, touching only the pages that hold it (the kernel's read-ahead
brings them in from a cold cache). Where the file cannot be mapped the caller reads run by
run; a file found shorter than the tensor (cut short after it was opened) is a
:class:`~tensorfile.errors.SourceError`, never a SIGBUS from the mapping.

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
from typing import Any

import numpy as np
import torch

from tensorfile.core.selection.read import local_file, mapped

__all__ = ["MANY_RUNS", "copy_box", "copy_mapped"]

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


def copy_mapped(
    source: Any,
    start: int,
    shape: tuple[int, ...],
    stored: torch.dtype,
    box: tuple[tuple[int, ...], tuple[int, ...]],
    dest: torch.Tensor,
) -> bool:
    """:func:`copy_box` of ``box`` (its offsets and lengths) out of a read-only mapping
    of the tensor's bytes in ``source``'s file (unmapped again after); False, copying
    nothing, where ``source`` is not a local file or its file cannot be mapped (the caller
    reads the box run by run). A :class:`~tensorfile.errors.SourceError` where the file
    now ends before the tensor does.
    """
    nbytes = math.prod(shape) * stored.itemsize
    fd = local_file(source, start + nbytes) if nbytes else None
    if fd is None:
        return False
    with mapped(fd, start, nbytes) as buf:
        if buf is None:
            return False
        copy_box(buf, 0, shape, stored, *box, dest)
    return True
