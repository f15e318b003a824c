"""``StorageReader``: ``torch.distributed.checkpoint`` loads from hub checkpoints.

``dcp.load(state_dict, storage_reader=StorageReader("ckpt"))`` fills a state dict of any
sharding (DTensors, plain tensors, non-tensor entries) from a hub checkpoint: what
:class:`~tensorfile.distributed.StorageWriter` saved, a plain ``model.safetensors`` or
index of shards (transformers' ``save_pretrained``, ``save_sharded``), and both layouts of
torch's ``HuggingFaceStorageWriter`` (its consolidated folder, and its per-rank files with
``DCP_SHARDING_INFO``). The checkpoint may be a local folder, an ``http(s)://`` folder or
an ``s3://`` prefix.

Each rank reads only its own pieces: every ``ReadItem`` (a box of a stored chunk) becomes
the byte runs of that box (:mod:`tensorfile.distributed._runs`), read by tensorfile's read
planner (merged neighbours, parallel pieces) straight into the destination tensor where its
bytes are contiguous, else into one buffer per item that is then copied in. No file is read
whole. Remote files are opened as :func:`tensorfile.sources.open_path` opens them: through
the chunk cache when ``$TENSORFILE_CACHE_DIR`` is set (a second load on the machine reads
the tensors from its folder); an error opening one names its URL.

``verify=True`` checks the digests the files record (``StorageWriter(checksum=...)``): a rank
then reads each whole tensor it needs part of, once, to check it.

Example (with ``torchrun``, every rank runs the same lines)::

    import torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageReader
    dcp.load(state_dict, storage_reader=StorageReader("s3://bucket/ckpt"))
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader as _DCPStorageReader
from torch.futures import Future

from tensorfile.core import dtypes, plan
from tensorfile.core.catalog import ByteRange
from tensorfile.core.errors import FormatError, InvalidArgumentError, UnsupportedError, naming
from tensorfile.core.reader import Reader
from tensorfile.formats import get as get_format
from tensorfile.formats import open_reader
from tensorfile.formats.safetensors.hub import hub_chunks
from tensorfile.sources import Store, open_path, store_for

from . import _objects
from ._runs import runs

__all__ = ["StorageReader"]

_MAX_PAIRWISE = 512
"""Chunks of one tensor checked pairwise for overlap (beyond: their volumes only)."""


class StorageReader(_DCPStorageReader):
    """Load a ``torch.distributed.checkpoint`` state dict from the hub checkpoint at
    ``path_or_url`` (see the module docstring).

    Args:
        path_or_url: a local folder, an ``http(s)://`` folder URL or an ``s3://`` prefix.
        verify: check the digests the checkpoint records for every tensor read.
        storage_options: options of the remote store (an ``s3://`` endpoint, credentials),
            as :func:`tensorfile.sources.store_for` takes them.

    Example::

        dcp.load(state_dict, storage_reader=StorageReader("https://host/ckpt"))
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        verify: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(verify, bool):
            raise InvalidArgumentError(f"verify must be a bool, got {verify!r}")
        self.path = _text(path_or_url)
        self.verify = verify
        self.storage_options = dict(storage_options) if storage_options else None
        self._readers: dict[str, Reader] = {}
        self._store: Store | None = None
        self._storage: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_readers"] = {}
        state["_store"] = None
        return state

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's folder or URL."""
        return self.path

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new load begins (from ``checkpoint_id`` when given)."""
        self._close()
        if checkpoint_id is not None:
            self.path = _text(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a path or URL."""
        try:
            _text(checkpoint_id)
        except InvalidArgumentError:
            return False
        return True

    def _the_store(self) -> Store:
        if self._store is None:
            self._store = store_for(self.path, self.storage_options, read_only=True)
        return self._store

    def _open(self, name: str) -> Reader:
        reader = self._readers.get(name)
        if reader is None:
            fmt = get_format("safetensors")
            store = self._the_store()
            url = store.open_url(name)
            found = (
                store.locate(name, first=fmt.first_request())
                if url is None  # a local folder (or files in memory)
                else open_path(url, first=fmt.first_request(), **store.options)
            )  # (a remote file through the chunk cache when $TENSORFILE_CACHE_DIR is set)
            if isinstance(found, str):
                reader = open_reader(
                    found, format="safetensors", verify="stored" if self.verify else None
                )
            else:
                try:
                    with naming(found.name):  # every error names the file
                        reader = fmt.open_reader(found, verify=self.verify)
                except BaseException:
                    found.close()
                    raise
            self._readers[name] = reader
        return reader

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's tensors (each file's part of each, as a chunk) and objects."""
        store = self._the_store()
        chunks, readers = hub_chunks(store, open_file=self._open)
        sdm: dict[str, Any] = {}
        storage: dict[Any, Any] = {}
        for c in chunks:
            info = readers[c.file].info(c.name)
            dt = _torch_dtype(info.dtype, c.name)
            md = sdm.get(c.name)
            if md is None:
                md = sdm[c.name] = TensorStorageMetadata(
                    TensorProperties(dtype=dt), torch.Size(c.shape), []
                )
            elif md.properties.dtype != dt or len(md.size) != len(c.shape):
                raise FormatError(
                    f"{store.url(c.file)}: tensor {c.name!r} is {info.dtype.name} "
                    f"{list(c.shape)} here and {md.properties.dtype} {list(md.size)} elsewhere"
                )
            md.chunks.append(ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.shape)))
            md.size = torch.Size(
                [max(a, o + s) for a, o, s in zip(md.size, c.offsets, c.shape, strict=True)]
            )
            storage[MetadataIndex(c.name, torch.Size(c.offsets))] = (
                c.file,
                info.byte_range.start,
                c.shape,
                dt,
            )
        for name, md in sdm.items():
            _check_cover(name, md, store.url())
        for name, value in self._objects(store, readers).items():
            if name in sdm:
                raise FormatError(f"{store.url()}: {name!r} is both a tensor and an object")
            sdm[name] = BytesStorageMetadata()
            storage[MetadataIndex(name)] = value
        return Metadata(state_dict_metadata=sdm, storage_data=storage)

    def _objects(self, store: Store, readers: Mapping[str, Reader]) -> dict[str, bytes]:
        names = {r.metadata.get(_objects.POINTER_KEY) for r in readers.values()} - {None}
        if not names:
            return {}
        if len(names) > 1:
            raise FormatError(f"{store.url()}: the files name different objects files")
        name = names.pop()
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise FormatError(f"{store.url()}: the objects file {name!r:.100} is not a file name")
        raw = store.read_bounded(name, "the objects file", _objects.MAX_OBJECTS_BYTES)
        if raw is None:
            raise FormatError(f"{store.url(name)}: the checkpoint names it, but it is missing")
        return _objects.decode(raw, store.url(name))

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        """Keep the metadata's places of the chunks."""
        if not isinstance(metadata.storage_data, dict):
            raise FormatError(f"{self.path}: the metadata was not read by this reader")
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Every rank's plan as it is."""
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """The plans as they are."""
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read this rank's items into their destinations (see the module docstring)."""
        try:
            self._read(plan, planner)
        finally:
            self._close()
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _read(self, load: LoadPlan, planner: LoadPlanner) -> None:
        jobs: dict[str, list[plan.Job]] = {}
        after: list[tuple[Any, torch.Tensor, torch.Tensor | None]] = []
        checked: set[tuple[str, str]] = set()
        for ri in load.items:
            fqn = ri.storage_index.fqn
            if ri.type == LoadItemType.BYTE_IO:
                value = self._storage.get(MetadataIndex(fqn))
                if not isinstance(value, bytes):
                    raise FormatError(f"{self.path}: no object {fqn!r}")
                planner.load_bytes(ri, io.BytesIO(value))
                continue
            place = self._storage.get(ri.storage_index)
            if place is None:
                raise FormatError(f"{self.path}: no chunk {ri.storage_index}")
            file, start, shape, stored = place
            if self.verify and (file, fqn) not in checked:
                checked.add((file, fqn))
                self._open(file).get_tensor(fqn)  # (its digest checked on the way)
            dest = planner.resolve_tensor(ri).detach()
            itemsize = stored.itemsize
            r = runs(tuple(shape), tuple(ri.storage_offsets), tuple(ri.lengths), itemsize)
            if r.count == 0:
                after.append((ri, dest, None))
                continue
            # straight into the destination where its bytes are the box's, in order
            direct = dest.device.type == "cpu" and dest.is_contiguous() and dest.dtype == stored
            target = dest if direct else torch.empty(tuple(ri.lengths), dtype=stored)
            if target.numel() * itemsize != r.nbytes:
                raise FormatError(
                    f"{self.path}: chunk {fqn!r} holds {r.nbytes} bytes for a box of "
                    f"{list(ri.lengths)} {dest.dtype}"
                )
            buf = memoryview(target.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
            n = r.length
            jobs.setdefault(file, []).extend(
                (fqn, ByteRange(start + s, start + s + n), buf[i * n : (i + 1) * n])
                for i, s in enumerate(r.starts.tolist())
            )
            after.append((ri, dest, None if direct else target))
        pieces: list[plan.Piece] = []
        for file, file_jobs in jobs.items():  # one plan per file: neighbours share requests
            reader = self._open(file)
            pieces.extend(plan.plan(_Frugal(reader.source), reader.readinto, file_jobs))
        plan.execute(pieces)
        for ri, dest, bounce in after:
            if bounce is not None:
                dest.copy_(bounce)
            planner.commit_tensor(ri, dest)

    def _close(self) -> None:
        readers, self._readers = self._readers, {}
        for r in readers.values():
            r.close()


class _Frugal:
    """A source's tuning for one rank's reads: its gap may be read over only while the
    bytes read for nothing stay under ``coalesce_waste`` of those wanted (a gap between one
    rank's pieces is another rank's bytes: all ranks together then fetch at most that much
    more than the checkpoint)."""

    coalesce_waste = 0.1

    def __init__(self, source: Any) -> None:
        self._source = source

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def _text(path: object) -> str:
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"a checkpoint is a path or URL, got {type(path).__name__}"
        ) from None
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("a checkpoint is a non-empty path or URL")
    return text


def _torch_dtype(dt: dtypes.DType, name: str) -> torch.dtype:
    found = getattr(torch, dt.torch_name, None) if dt.torch_name and not dt.is_subbyte else None
    if not isinstance(found, torch.dtype):
        raise UnsupportedError(f"tensor {name!r}: {dt.name} has no torch dtype to load into")
    return found


def _check_cover(name: str, md: TensorStorageMetadata, where: str) -> None:
    """The chunks of a tensor cover it exactly once (a missing rank file would leave part of
    every destination unset)."""
    boxes = [(tuple(c.offsets), tuple(c.sizes)) for c in md.chunks]
    volume = sum(math.prod(s) for _, s in boxes)
    if volume != math.prod(md.size) or (1 < len(boxes) <= _MAX_PAIRWISE and _overlap(boxes)):
        raise FormatError(
            f"{where}: the chunks of tensor {name!r} do not cover its shape "
            f"{list(md.size)} exactly once (a file of the checkpoint missing?)"
        )


def _overlap(boxes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> bool:
    live = [b for b in boxes if math.prod(b[1])]
    for i, (oa, sa) in enumerate(live):
        for ob, sb in live[i + 1 :]:
            if all(a < b + m and b < a + n for a, n, b, m in zip(oa, sa, ob, sb, strict=True)):
                return True
    return False
