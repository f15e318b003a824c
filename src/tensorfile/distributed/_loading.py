"""``tensorfile.distributed.load``: the slices of many tensors a rank wants, in one pass.

``load(path_or_url, plan)`` reads, of a tensor file or a sharded checkpoint (a local path or
folder, ``http(s)://``, ``s3://``; any format tensorfile reads), what ``plan`` asks for:
a map of tensor names to a basic index (a tuple of ints and slices with any step, ``...``,
``None``), to an :class:`~tensorfile.core.selection.Intervals` (several intervals of one
dimension, concatenated: a fused QKV or gate-up weight split across tensor-parallel
ranks), or to ``None`` (the whole tensor); a name the plan leaves out is not read, and
``plan=None`` reads every tensor. The result is ``{name: torch.Tensor}`` on ``device``.

Alone (``group=None``) the rank reads its regions in one planned pass
(:mod:`tensorfile.core.selection.read`): merged ranges, parallel reads, straight into the
result's memory, never a whole tensor for a slice of it.

With a process group (``group=torch.distributed.group.WORLD`` or any group), the ranks load
*cooperatively* (:mod:`tensorfile.distributed._cooperate`): they exchange their plans, every
byte any of them wants is read from storage by exactly one of them, and is then sent to the
ranks that want it (a broadcast where every rank wants a block whole, point to point
otherwise), reads overlapping sends. Every rank of the group must call ``load`` with the same
checkpoint (plans may differ), which each may reach at a path or URL of its own (a copy on
each node's disk: the ranks compare the tensors' names, dtypes, shapes and places, the
shards' names, and a few samples of each file's bytes). A rank whose plan or arguments are
refused, whose read fails, or that dies, makes every rank of the group fail with a
:class:`~tensorfile.errors.PeerError` (never a hang: ``timeout`` bounds each step of a
load, a block's read or a transfer, and a wait on other ranks by the steps of their
shares). What a rank read and sent is counted in ``counters``
(a :class:`LoadCounters`) and logged at DEBUG by the logger ``tensorfile.distributed``.

Example:
    >>> import numpy as np
    >>> from tensorfile.safetensors.numpy import save_file
    >>> save_file({"w": np.arange(12, dtype=np.float32).reshape(4, 3)}, "tp.safetensors")
    >>> load("tp.safetensors", {"w": (slice(2, 4), slice(None, None, 2))})["w"].tolist()
    [[6.0, 8.0], [9.0, 11.0]]
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from tensorfile.core.errors import InvalidArgumentError, InvalidTypeError, TensorFileError
from tensorfile.core.selection.read import Want, new_box, read_regions
from tensorfile.formats.open import open as open_checkpoint
from tensorfile.frameworks import check_torch_device

from ._cooperate import cooperative_load
from ._regions import LoadCounters, path_text, plan_regions, shard, to_torch

__all__ = ["LoadCounters", "load"]

log = logging.getLogger("tensorfile.distributed")

_DEFAULT_TIMEOUT = 600.0
"""``timeout``'s default (the seconds any step of a load may take)."""

_MAX_TIMEOUT = 1e7
"""The largest ``timeout`` (about 4 months: a wait is a ``timedelta``)."""


def load(
    path_or_url: str | os.PathLike[str],
    plan: Mapping[str, Any] | None = None,
    *,
    group: Any = None,
    device: Any = "cpu",
    timeout: float = _DEFAULT_TIMEOUT,
    counters: LoadCounters | None = None,
) -> dict[str, torch.Tensor]:
    """The regions of ``plan`` (see the module docstring) of the checkpoint at
    ``path_or_url``, as ``{name: tensor}`` on ``device``; with ``group``, loaded
    cooperatively with the group's other ranks."""
    refused: TensorFileError | None = None
    try:
        if (
            not isinstance(timeout, int | float)
            or isinstance(timeout, bool)
            or not 0 < timeout <= _MAX_TIMEOUT
        ):
            raise InvalidArgumentError(
                f"timeout must be a number of seconds in (0, {_MAX_TIMEOUT:g}], got {timeout!r}"
            )
        check_torch_device(device)
        if counters is not None and not isinstance(counters, LoadCounters):
            raise InvalidTypeError(
                f"counters must be a LoadCounters, got {type(counters).__name__}"
            )
    except TensorFileError as exc:
        if group is None:
            raise
        refused = exc  # (told to the group's other ranks, which must not wait for this one)
    counters = LoadCounters() if not isinstance(counters, LoadCounters) else counters
    if group is not None:
        wait = float(timeout) if refused is None else _DEFAULT_TIMEOUT
        return cooperative_load(path_or_url, plan, group, device, wait, counters, refused)
    with open_checkpoint(path_text(path_or_url)) as reader:
        regions = plan_regions(reader, plan)
        boxes = {n: new_box(r, reader.info(n)) for n, r in regions.items()}
        wants = [Want(shard(reader, n), n, regions[n], boxes[n]) for n in regions]
        counters.bytes_read += read_regions(wants)
        counters.reads += 1
        log.debug("read %d bytes of %d tensors from %s", counters.bytes_read, len(wants), reader)
        return {n: to_torch(reader.info(n), regions[n], boxes[n], device) for n in regions}
