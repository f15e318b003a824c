"""``StorageReader``: ``torch.distributed.checkpoint`` loads from hub checkpoints.

``dcp.load(state_dict, storage_reader=StorageReader("ckpt"))`` fills a state dict of any
sharding (DTensors, plain tensors, non-tensor entries) from a hub checkpoint: what
:class:`~tensorfile.distributed.StorageWriter` saved, a plain ``model.safetensors`` or
index of shards (transformers' ``save_pretrained``, ``save_sharded``), and both layouts of
torch's ``HuggingFaceStorageWriter`` (its consolidated folder, and its per-rank files with
``DCP_SHARDING_INFO``). The checkpoint may be a local folder, an ``http(s)://`` folder or
an ``s3://`` prefix.

The checkpoint's files are ``<prefix>.safetensors.index.json`` and its shards, else
``<prefix>.safetensors`` (``prefix="model"`` by default, as ``StorageWriter`` names them),
else every ``*.safetensors`` of the folder: torch's per-rank files. A folder that holds
shards named as huggingface_hub names them (``model-00001-of-00002.safetensors``) but not
their index is refused (a :class:`~tensorfile.errors.FormatError`): a save that did not
finish, or a broken checkpoint, whose files may belong to two saves. The chunks of each
tensor must cover it exactly once (their volumes add up and no two overlap, checked in
numpy blocks; more than :data:`MAX_CHUNKS` chunks of one tensor is refused). A rank keeps at
most :data:`MAX_OPEN` files open, and nothing of a failed ``read_metadata`` (DCP retries it).

Each rank reads only its own pieces: every ``ReadItem`` (a box of a stored chunk) becomes
the byte runs of that box (:mod:`tensorfile.distributed._runs`), read by tensorfile's read
planner (merged neighbours, parallel pieces) straight into the destination tensor where its
bytes are contiguous, else into one buffer per item that is then copied in. No file is read
whole. Remote files are opened as :func:`tensorfile.sources.open_path` opens them: through
the chunk cache when ``$TENSORFILE_CACHE_DIR`` is set (a second load on the machine reads
the tensors from its folder); an error opening one names its URL.

A box of very many runs close together (more than :data:`MANY_RUNS`, at most
:data:`SPAN_STRIDE` bytes apart on average: a ``Shard(1)`` piece of a tall, narrow matrix,
one short run per row) is read otherwise: the span of the tensor's bytes its runs lie in is
one read into a buffer, and one strided numpy copy moves the runs out of it. The trade-off:
the rank reads, and holds for a moment, the other ranks' columns between its runs (at most
``SPAN_STRIDE`` bytes per run, never more than the tensor), where a read per run would need
a request (or a system call) and some 500 bytes of Python objects per run: a million rows
of 8 bytes, split in two, took ~940 MiB of memory per rank that way, and take ~20 MiB now.
All ranks together then fetch up to M times such a tensor (M ranks splitting its columns);
runs further apart, and boxes of fewer runs, are read run by run, where the gaps between a
rank's runs are read over only while they stay under 10% of the bytes it wants.

From a local file, a box of more than :data:`~tensorfile.distributed._mapped.MANY_RUNS`
runs is copied out of the file's mapping in one strided copy
(:mod:`tensorfile.distributed._mapped`): the pages that hold it are read (by the kernel's
read-ahead when cold), and no work is spent per run.

Objects (the state dict's entries that are not tensors, kept in the objects file as
``torch.save`` bytes) are handed to DCP's planner, whose ``load_bytes`` unpickles them with
``torch.load(weights_only=False)``: a pickle can run any code. Unless
``allow_pickle=True``, each object is first read by tensorfile's own pickle reader
(:func:`tensorfile.formats.torch_pickle.check_plain`, which runs nothing) and must hold
only tensors, containers and plain values; else the load fails with a
:class:`~tensorfile.errors.FormatError` naming it. That passes ``torch.get_rng_state()``,
``torch.cuda.get_rng_state()`` (a CPU ``ByteTensor`` too), ``random.getstate()`` (a tuple
of ints) and numpy's ``Generator.bit_generator.state`` (a dict of ints), and refuses
``numpy.random.get_state()`` (it holds a numpy array) and any object of a class. An object
whose destination in the state dict is a tensor is always refused (DCP would put the
object in the tensor's place).

``verify=True`` checks the digests the files record (``StorageWriter(checksum=...)``): a rank
then reads each whole tensor it needs part of, once, to check it; the tensors it reads that
no digest covers are named in a :class:`~tensorfile.errors.NoDigestsWarning`.

Example (with ``torchrun``, every rank runs the same lines)::

    import torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageReader
    dcp.load(state_dict, storage_reader=StorageReader("s3://bucket/ckpt"))
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader as _DCPStorageReader
from torch.futures import Future

from tensorfile.core import dtypes, plan
from tensorfile.core.catalog import ByteRange
from tensorfile.core.digests import not_covered, warn_outside
from tensorfile.core.errors import (
    FormatError,
    InvalidArgumentError,
    NoDigestsWarning,
    UnsupportedError,
    naming,
)
from tensorfile.core.reader import Reader
from tensorfile.core.selection.read import Frugal
from tensorfile.formats import get as get_format
from tensorfile.formats import open_reader
from tensorfile.formats.safetensors.hub import check_prefix, hub_chunks
from tensorfile.formats.torch_pickle import check_plain
from tensorfile.sources import Store, open_path, store_for

from . import _mapped, _objects
from ._regions import path_text
from ._runs import box_view, overlap, runs

__all__ = ["StorageReader"]

MAX_CHUNKS = 1 << 16
"""The most chunks one tensor may be stored in (torch's per-rank files: one per rank that
holds part of it); more is a :class:`~tensorfile.errors.FormatError`."""

MAX_OPEN = 64
"""The most files a rank keeps open at once."""

MANY_RUNS = 1024
"""A box of more runs than this, at most :data:`SPAN_STRIDE` bytes apart on average, is read
as the span of the tensor's bytes they lie in (see the module docstring)."""

SPAN_STRIDE = 4096


class StorageReader(_DCPStorageReader):
    """Load a ``torch.distributed.checkpoint`` state dict from the hub checkpoint at
    ``path_or_url`` (see the module docstring).

    Args:
        path_or_url: a local folder, an ``http(s)://`` folder URL or an ``s3://`` prefix.
        verify: check the digests the checkpoint records for every tensor read (a
            :class:`~tensorfile.errors.NoDigestsWarning` names those no digest covers).
        storage_options: options of the remote store (an ``s3://`` endpoint, credentials),
            as :func:`tensorfile.sources.store_for` takes them.
        prefix: the files' name stem, as ``StorageWriter(prefix=...)`` wrote them
            (``model``: ``model.safetensors`` or ``model.safetensors.index.json``).
        allow_pickle: hand every object of the checkpoint (the state dict's entries that
            are not tensors) to DCP, which passes it to ``torch.load(weights_only=False)``
            (as DCP's own ``FileSystemReader`` does: loading it can run any code). Default
            False: an object must be tensors, containers and plain values only (what
            :func:`tensorfile.formats.torch_pickle.check_plain` passes), else the load
            fails with a :class:`~tensorfile.errors.FormatError` naming it.

    Example::

        dcp.load(state_dict, storage_reader=StorageReader("https://host/ckpt"))
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        verify: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        prefix: str = "model",
        allow_pickle: bool = False,
    ) -> None:
        super().__init__()
        for flag, value in (("verify", verify), ("allow_pickle", allow_pickle)):
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{flag} must be a bool, got {value!r}")
        self.path = path_text(path_or_url)
        self.verify = verify
        self.allow_pickle = allow_pickle
        self.prefix = check_prefix(prefix)
        self.storage_options = dict(storage_options) if storage_options else None
        self._readers: OrderedDict[str, Reader] = OrderedDict()
        self._identities: dict[str, tuple[Any, ...]] = {}
        self._store: Store | None = None
        self._storage: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_readers"] = OrderedDict()
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
            self.path = path_text(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a path or URL."""
        try:
            path_text(checkpoint_id)
        except InvalidArgumentError:
            return False
        return True

    def _the_store(self) -> Store:
        if self._store is None:
            self._store = store_for(self.path, self.storage_options, read_only=True)
        return self._store

    def _open_file(self, name: str) -> Reader:
        """A new reader of the checkpoint's file ``name`` (the caller closes it)."""
        fmt = get_format("safetensors")
        store = self._the_store()
        url = store.open_url(name)
        found = (
            store.locate(name, first=fmt.first_request())
            if url is None  # a local folder (or files in memory)
            else open_path(url, first=fmt.first_request(), **store.options)
        )  # (a remote file through the chunk cache when $TENSORFILE_CACHE_DIR is set)
        if isinstance(found, str):
            return open_reader(
                found, format="safetensors", verify="stored" if self.verify else None
            )
        try:
            with naming(found.name):  # every error names the file
                return fmt.open_reader(found, verify=self.verify)
        except BaseException:
            found.close()
            raise

    def _open(self, name: str) -> Reader:
        """The reader of ``name``, kept open among the last :data:`MAX_OPEN` used."""
        reader = self._readers.get(name)
        if reader is None:
            reader = self._readers[name] = self._open_file(name)
            seen, now = self._identities.get(name), _identity(reader)
            if seen is None:
                self._identities[name] = now
            elif seen != now:  # reopened for read_data: the file the metadata came from?
                del self._readers[name]
                reader.close()
                raise FormatError(
                    f"{self._the_store().url(name)} changed since the checkpoint's metadata "
                    "was read (another save published over it?); load again"
                )
            while len(self._readers) > MAX_OPEN:
                self._readers.popitem(last=False)[1].close()
        else:
            self._readers.move_to_end(name)
        return reader

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's tensors (each file's part of each, as a chunk) and objects."""
        self._close()  # (DCP retries a failed call: nothing of the last attempt is kept)
        self._identities = {}
        try:
            return self._metadata()
        except BaseException:
            self._close()
            raise

    def _metadata(self) -> Metadata:
        store = self._the_store()
        chunks, file_metadata = hub_chunks(
            store, open_file=self._open, prefix=self.prefix, close=False
        )  # (the last MAX_OPEN files stay open for read_data)
        sdm: dict[str, Any] = {}
        storage: dict[Any, Any] = {}
        for c in chunks:
            dt = _torch_dtype(c.dtype, c.name)
            md = sdm.get(c.name)
            if md is None:
                md = sdm[c.name] = TensorStorageMetadata(
                    TensorProperties(dtype=dt), torch.Size(c.shape), []
                )
            elif md.properties.dtype != dt or len(md.size) != len(c.shape):
                raise FormatError(
                    f"{store.url(c.file)}: tensor {c.name!r} is {c.dtype.name} "
                    f"{list(c.shape)} here and {md.properties.dtype} {list(md.size)} elsewhere"
                )
            if len(md.chunks) >= MAX_CHUNKS:
                raise FormatError(
                    f"{store.url()}: tensor {c.name!r} is stored in more than {MAX_CHUNKS:,} "
                    "chunks; tensorfile reads no more"
                )
            md.chunks.append(ChunkStorageMetadata(torch.Size(c.offsets), torch.Size(c.shape)))
            md.size = torch.Size(
                [max(a, o + s) for a, o, s in zip(md.size, c.offsets, c.shape, strict=True)]
            )
            storage[MetadataIndex(c.name, torch.Size(c.offsets))] = (c.file, c.start, c.shape, dt)
        storage[_FILES] = dict(self._identities)  # (checked where a rank opens them again)
        for name, md in sdm.items():
            _check_cover(name, md, store.url())
        for name, value in self._objects(store, file_metadata).items():
            if name in sdm:
                raise FormatError(f"{store.url()}: {name!r} is both a tensor and an object")
            sdm[name] = BytesStorageMetadata()
            storage[MetadataIndex(name)] = value
        return Metadata(state_dict_metadata=sdm, storage_data=storage)

    def _objects(self, store: Store, metadata: Mapping[str, Mapping[str, str]]) -> dict[str, bytes]:
        names = {m.get(_objects.POINTER_KEY) for m in metadata.values()} - {None}
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
        files = self._storage.get(_FILES)
        expected = dict(files) if isinstance(files, dict) else {}
        for name in [n for n in self._readers if self._identities.get(n) != expected.get(n)]:
            self._readers.pop(name).close()  # (opened at another moment: checked again)
        self._identities = expected

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

    def _object(self, ri: ReadItem, planner: LoadPlanner) -> bytes:
        """The bytes of the object ``ri`` asks for, checked (see ``allow_pickle``)."""
        fqn = ri.storage_index.fqn
        value = self._storage.get(MetadataIndex(fqn))
        if not isinstance(value, bytes):
            raise FormatError(f"{self.path}: no object {fqn!r}")
        held = getattr(planner, "state_dict", None)  # (DefaultLoadPlanner's, flattened)
        dest = held.get(ri.dest_index.fqn) if isinstance(held, Mapping) else None
        if isinstance(dest, torch.Tensor):
            raise FormatError(
                f"{self.path}: the checkpoint holds {fqn!r} as an object, not a tensor; the "
                "state dict has a tensor there (DCP would replace it with the object)"
            )
        if not self.allow_pickle:
            try:
                check_plain(value, f"{self.path}: object {fqn!r}")
            except FormatError as exc:
                raise FormatError(
                    f"{exc}; StorageReader(allow_pickle=True) hands it to torch.load, which "
                    "runs what a pickle asks: only for checkpoints you trust",
                    format="pytorch",
                ) from None
        return value

    def _read(self, load: LoadPlan, planner: LoadPlanner) -> None:
        jobs: dict[str, list[plan.Job]] = {}
        objects: list[tuple[ReadItem, bytes]] = []
        spans: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        after: list[tuple[ReadItem, torch.Tensor, torch.Tensor | None]] = []
        checked: set[tuple[str, str]] = set()
        unverified: list[str] = []
        for ri in load.items:
            fqn = ri.storage_index.fqn
            if ri.type == LoadItemType.BYTE_IO:
                objects.append((ri, self._object(ri, planner)))
                continue
            place = self._storage.get(ri.storage_index)
            if place is None:
                raise FormatError(f"{self.path}: no chunk {ri.storage_index}")
            file, start, shape, stored = place
            if self.verify and (file, fqn) not in checked:
                checked.add((file, fqn))
                reader = self._open(file)
                reader.get_tensor(fqn)  # (its digest checked on the way)
                if not reader.checks_digest(fqn) and reader.info(fqn).numel:
                    unverified.append(fqn)
            dest = planner.resolve_tensor(ri).detach()
            itemsize = stored.itemsize
            box = tuple(ri.lengths)
            r = runs(tuple(shape), tuple(ri.storage_offsets), box, itemsize)
            if r.count == 0:
                after.append((ri, dest, None))
                continue
            if r.count > _mapped.MANY_RUNS and _mapped.copy_mapped(  # (False: read by runs)
                self._open(file).source, start, tuple(shape), stored,
                (tuple(ri.storage_offsets), box), dest,
            ):  # fmt: skip
                after.append((ri, dest, None))
                continue
            # straight into the destination where its bytes are the box's, in order
            direct = dest.device.type == "cpu" and dest.is_contiguous() and dest.dtype == stored
            target = dest if direct else torch.empty(box, dtype=stored)
            if target.numel() * itemsize != r.nbytes:
                raise FormatError(
                    f"{self.path}: chunk {fqn!r} holds {r.nbytes} bytes for a box of "
                    f"{list(ri.lengths)} {dest.dtype}"
                )
            flat = target.reshape(-1).view(torch.uint8).numpy()
            n = r.length
            lo, hi = int(r.starts[0]), int(r.starts[-1]) + n
            if r.count > MANY_RUNS and hi - lo <= SPAN_STRIDE * r.count:
                # many runs close together (a Shard(1) piece of a tall narrow matrix): their
                # span in one read into a buffer, copied out by one strided numpy copy
                span = np.empty(hi - lo, np.uint8)
                jobs.setdefault(file, []).append(
                    (fqn, ByteRange(start + lo, start + hi), memoryview(span))  # type: ignore[arg-type]
                )
                view = box_view(span, tuple(shape), box, itemsize)
                spans.append((view, flat.reshape(view.shape)))
            else:
                buf = memoryview(flat)  # type: ignore[arg-type]
                jobs.setdefault(file, []).extend(
                    (fqn, ByteRange(start + s, start + s + n), buf[i * n : (i + 1) * n])
                    for i, s in enumerate(r.starts.tolist())
                )
            after.append((ri, dest, None if direct else target))
        files = list(jobs)
        for at in range(0, len(files), MAX_OPEN):  # (at most MAX_OPEN files open at once)
            pieces: list[plan.Piece] = []
            for file in files[at : at + MAX_OPEN]:  # one plan per file: neighbours share
                reader = self._open(file)
                pieces.extend(plan.plan(Frugal(reader.source), reader.readinto, jobs[file]))
            plan.execute(pieces)
        for view, out in spans:
            np.copyto(out, view)
        spans.clear()
        for ri, value in objects:
            planner.load_bytes(ri, io.BytesIO(value))
        for ri, dest, bounce in after:
            if bounce is not None:
                dest.copy_(bounce)
            planner.commit_tensor(ri, dest)
        if unverified:
            warn_outside(
                f"{self.path}: {not_covered(list(dict.fromkeys(unverified)))}; verify=True "
                "cannot check their bytes (the checkpoint was saved without checksum=)",
                NoDigestsWarning,
            )

    def _close(self) -> None:
        readers, self._readers = self._readers, OrderedDict()
        for r in readers.values():
            r.close()


_FILES = "__tensorfile_files__"
"""The key of the metadata's storage data holding each file's identity (:func:`_identity`)."""


def _identity(reader: Reader) -> tuple[Any, ...]:
    """What tells this file apart from another of its name: its size, header and tensors'
    places, its version where the server gives one (an ETag), and a local file's inode and
    modification time."""
    src = reader.source
    cat = reader.catalog
    places = [(n, i.dtype.name, list(i.shape), list(i.byte_range)) for n, i in cat.tensors.items()]
    digest = hashlib.sha256(repr(places).encode()).hexdigest()  # (the same in every process)
    local: tuple[int, ...] = ()
    name = getattr(src, "name", None)
    if isinstance(name, str) and os.path.isabs(name):
        try:
            st = os.stat(name)
            local = (st.st_ino, st.st_mtime_ns, st.st_size)  # (st_dev differs across hosts)
        except OSError:
            local = (-1,)
    version = getattr(src, "version", None)
    return (src.size, version if isinstance(version, str) else None, cat.header_size, digest, local)


def _torch_dtype(dt: dtypes.DType, name: str) -> torch.dtype:
    found = getattr(torch, dt.torch_name, None) if dt.torch_name and not dt.is_subbyte else None
    if not isinstance(found, torch.dtype):
        raise UnsupportedError(f"tensor {name!r}: {dt.name} has no torch dtype to load into")
    return found


def _check_cover(name: str, md: TensorStorageMetadata, where: str) -> None:
    """The chunks of a tensor cover it exactly once (a missing rank file would leave part of
    every destination unset): their volumes add up to the tensor's and no two overlap."""
    sizes = np.array([tuple(c.sizes) for c in md.chunks], np.int64).reshape(len(md.chunks), -1)
    starts = np.array([tuple(c.offsets) for c in md.chunks], np.int64).reshape(sizes.shape)
    volume = sum(math.prod(c.sizes) for c in md.chunks)
    if volume != math.prod(md.size) or overlap(starts, sizes) is not None:
        raise FormatError(
            f"{where}: the chunks of tensor {name!r} do not cover its shape "
            f"{list(md.size)} exactly once (a file of the checkpoint missing?)"
        )
