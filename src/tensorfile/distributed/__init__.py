"""tensorfile.distributed: ``torch.distributed`` checkpoints as hub checkpoints, and
rank-aware loads.

:class:`StorageWriter` and :class:`StorageReader` are storage plugins of
``torch.distributed.checkpoint`` (DCP): ``dcp.save`` from N ranks writes a plain
``model.safetensors`` (or an index of shards) of whole tensors, each rank writing its own
shards' bytes at their offsets; ``dcp.load`` into M ranks of any sharding reads only each
rank's pieces, from a local folder, ``http(s)://`` or ``s3://``. torch is imported when one
of them is first used, not with ``tensorfile``.

:func:`load` reads the slices of many tensors a rank wants (a plan: basic indexing, or
:class:`Intervals` of one dimension) in one planned pass; with a process group the ranks
load cooperatively, every byte read from storage by one rank and sent to those that want it.

Example (every rank of a ``torchrun`` job)::

    import torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageReader, StorageWriter
    dcp.save(model.state_dict(), storage_writer=StorageWriter("ckpt"))
    dcp.load(state_dict, storage_reader=StorageReader("ckpt"))
    from tensorfile.distributed import load
    shard = load("ckpt", {"wq": (slice(rank * 512, (rank + 1) * 512),)}, group=dist.group.WORLD)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorfile.core.selection import Intervals

if TYPE_CHECKING:
    from ._loading import LoadCounters, load
    from .reader import StorageReader
    from .writer import StorageWriter

__all__ = ["Intervals", "LoadCounters", "StorageReader", "StorageWriter", "load"]


def __getattr__(name: str) -> Any:
    if name in ("load", "LoadCounters"):
        from . import _loading

        return getattr(_loading, name)
    if name == "StorageWriter":
        from .writer import StorageWriter

        return StorageWriter
    if name == "StorageReader":
        from .reader import StorageReader

        return StorageReader
    raise AttributeError(f"module 'tensorfile.distributed' has no attribute {name!r}")
