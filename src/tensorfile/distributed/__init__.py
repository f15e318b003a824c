"""tensorfile.distributed: ``torch.distributed`` checkpoints as hub checkpoints.

:class:`StorageWriter` and :class:`StorageReader` are storage plugins of
``torch.distributed.checkpoint`` (DCP): ``dcp.save`` from N ranks writes a plain
``model.safetensors`` (or an index of shards) of whole tensors, each rank writing its own
shards' bytes at their offsets; ``dcp.load`` into M ranks of any sharding reads only each
rank's pieces, from a local folder, ``http(s)://`` or ``s3://``. torch is imported when one
of them is first used, not with ``tensorfile``.

Example (every rank of a ``torchrun`` job)::

    import torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageReader, StorageWriter
    dcp.save(model.state_dict(), storage_writer=StorageWriter("ckpt"))
    dcp.load(state_dict, storage_reader=StorageReader("ckpt"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reader import StorageReader
    from .writer import StorageWriter

__all__ = ["StorageReader", "StorageWriter"]


def __getattr__(name: str) -> Any:
    if name == "StorageWriter":
        from .writer import StorageWriter

        return StorageWriter
    if name == "StorageReader":
        from .reader import StorageReader

        return StorageReader
    raise AttributeError(f"module 'tensorfile.distributed' has no attribute {name!r}")
