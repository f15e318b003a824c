"""``StorageWriter``: ``torch.distributed.checkpoint`` saves as a plain hub checkpoint.

``dcp.save(state_dict, storage_writer=StorageWriter("ckpt"))`` writes ``ckpt/model.safetensors``
(or ``model-0000k-of-0000n.safetensors`` and ``model.safetensors.index.json``) of whole
tensors named by their FQNs, which ``from_pretrained``, the reference ``safetensors`` and
torch's ``HuggingFaceStorageReader`` load as they are. No rank gathers a tensor and nothing
is written twice:

1. the coordinator, once DCP has the global plan (every tensor's name, dtype and global
   shape), lays out the files (:func:`~tensorfile.formats.safetensors.hub.plan_hub`), so
   every tensor's offset is known; it creates each file under a hidden staging name, header
   written and data region reserved;
2. every rank writes the bytes of its own shards straight into those files at their offsets
   (a dim-0 shard is one run of bytes; a ``Shard(1)`` shard one run per row), on a few
   threads;
3. once every rank has written, the coordinator publishes: the staging files renamed into
   place, the index last (:func:`~tensorfile.formats.safetensors.hub.publish`).

Until step 3 the folder holds the previous checkpoint whole; a save that fails or loses a
rank (SIGKILL) leaves it so. Its staging files and lock file go at once when the error is
on the coordinator's rank, else when the coordinator's writer object is collected or saves
again, or at any later save once the coordinator's process has ended. The
coordinator holds a lock of the folder from step 1 to 3: a second job saving to the same
folder meanwhile fails with :class:`~tensorfile.errors.ConcurrentWriteError`.

Entries that are not tensors go to a JSON sidecar named in every header
(:mod:`tensorfile.distributed._objects`).

To an ``s3://`` folder the same checkpoint is written as one multipart upload per file,
each rank uploading the parts that are all its own (:mod:`tensorfile.distributed._upload`).

Example (one process; with ``torchrun`` every rank runs the same lines)::

    import torch, torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageWriter
    dcp.save({"w": torch.ones(2, 2), "step": 3}, storage_writer=StorageWriter("ckpt"))
"""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import uuid
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageWriter as _DCPStorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from tensorfile.core import dtypes
from tensorfile.core.atomic import atomic_write, write_all
from tensorfile.core.digests import ALGORITHMS
from tensorfile.core.errors import (
    ConcurrentWriteError,
    InvalidArgumentError,
    SourceError,
    UnsupportedError,
)
from tensorfile.core.parallel import in_threads
from tensorfile.core.plan import MAX_THREADS
from tensorfile.core.sizes import parse_size
from tensorfile.formats.safetensors.hub import HubPlan, check_prefix, plan_hub, publish
from tensorfile.sources import local_path_of, store_for

from . import _folder, _objects, _pieces, _upload
from ._regions import path_text
from ._runs import check_cover, runs
from ._shard_bytes import shard_bytes, spans

__all__ = ["StorageWriter"]


class StorageWriter(_DCPStorageWriter, AsyncStager):
    """Save a ``torch.distributed.checkpoint`` state dict as a hub checkpoint in
    ``path_or_url`` (see the module docstring).

    Args:
        path_or_url: the checkpoint folder (made if missing), which every rank must see
            (one machine, or a file system shared by all), or an ``s3://`` folder.
        max_shard_size: the largest file before the checkpoint is split into shards
            (huggingface_hub's rule; ``"5GB"``, ``"500MiB"`` or a number of bytes).
        checksum: ``"sha256"``, ``"xxh3"`` or ``"crc32c"``: each tensor's digest is stored
            in its file's header (tensorfile's ``tensorfile.digests``), for
            ``StorageReader(verify=True)``; the coordinator reads the files once more to
            compute them (local folders only).
        fsync: flush every file and the folder to stable storage before publishing.
        thread_count: threads writing (or uploading) on each rank (1 to 64; no more than
            the rank has items to write).
        prefix: the files' name stem (``model``): letters, digits, ``_``, ``.`` and ``-``,
            not starting with ``.``.
        storage_options: options of an ``s3://`` store (endpoint, credentials), as
            :func:`tensorfile.sources.store_for` takes them.

    Example::

        dcp.save(state_dict, storage_writer=StorageWriter("ckpt", max_shard_size="2GB"))
    """

    _synchronize_after_execute: bool = False

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        max_shard_size: int | str = "5GB",
        checksum: str | None = None,
        fsync: bool = False,
        thread_count: int = 4,
        prefix: str = "model",
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.max_shard_size = parse_size(max_shard_size)
        if checksum is not None and checksum not in ALGORITHMS:
            raise InvalidArgumentError(
                f"checksum must be one of {', '.join(sorted(ALGORITHMS))}, got {checksum!r}"
            )
        if not isinstance(fsync, bool):
            raise InvalidArgumentError(f"fsync must be a bool, got {fsync!r}")
        if (
            isinstance(thread_count, bool)
            or not isinstance(thread_count, int)
            or not 1 <= thread_count <= MAX_THREADS
        ):
            raise InvalidArgumentError(
                f"thread_count must be an int from 1 to {MAX_THREADS}, got {thread_count!r}"
            )
        check_prefix(prefix)
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise InvalidArgumentError("storage_options must be a mapping")
        self.checksum = checksum
        self.fsync = fsync
        self.thread_count = thread_count
        self.prefix = prefix
        self.storage_options = dict(storage_options) if storage_options else None
        self.path, self.remote = _target(path_or_url, self.storage_options)
        if self.remote and checksum is not None:
            raise UnsupportedError(
                f"{self.path}: checksum= is for local folders (the digests of a tensor "
                "split over ranks need its bytes read back)"
            )
        self.save_id = uuid.uuid4().hex[:16]
        self.is_coordinator = False
        self.rank: int | None = None
        self._lock_fd: int | None = None
        self._plan: HubPlan | None = None
        self._staged: list[tuple[str, str]] = []
        self._sidecar: str | None = None
        self._uploads: dict[str, Any] | None = None
        self._versions: dict[str, str | None] = {}

    # -- pickling (async_save in a process): no open lock travels --------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lock_fd"] = None
        return state

    def __del__(self) -> None:
        """A save this object still coordinates (it failed on another rank) is given up:
        its staging files and lock file removed."""
        if getattr(self, "_lock_fd", None) is not None:
            try:
                self._abandon()
            except Exception:  # (at interpreter exit, perhaps: nothing to be done)
                pass

    # -- DCP's StorageWriter ---------------------------------------------------------------

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint folder."""
        return self.path

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new save begins (in ``checkpoint_id`` when given)."""
        self._abandon()
        if checkpoint_id is not None:
            self.path, self.remote = _target(checkpoint_id, self.storage_options)
        self.save_id = uuid.uuid4().hex[:16]

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a folder this writer can save to."""
        try:
            _target(checkpoint_id, None)
        except (InvalidArgumentError, UnsupportedError):
            return False
        return True

    def storage_meta(self) -> StorageMeta | None:
        """The checkpoint's folder and this save's id, for the planner."""
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Remember this rank's role; refuse DCP's experimental ``use_collectives=False``
        (each rank would publish alone)."""
        if kwargs.get("use_collectives") is False:
            raise UnsupportedError(
                "tensorfile's StorageWriter needs the ranks to save together "
                "(use_collectives=False would have each rank publish a checkpoint alone)"
            )
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Every rank's plan as it is."""
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """On the coordinator: lay out the files from every rank's plan, create them (or
        their uploads), and tell each rank where its items go."""
        self._abandon()  # (a save of this writer that failed on another rank: given up)
        if not all(p.usable for p in plans):
            raise UnsupportedError(_NO_CACHING)
        self.save_id = uuid.uuid4().hex[:16]
        entries, objects = _entries(plans)
        self._sidecar = _objects.sidecar_name(self.prefix, self.save_id) if objects else None
        pointer = {_objects.POINTER_KEY: self._sidecar} if self._sidecar else {}
        hub = plan_hub(
            entries,
            max_shard_size=self.max_shard_size,
            shard_metadata={"format": "pt", **pointer},
            checksum=self.checksum,
            prefix=self.prefix,
        )
        shared: dict[str, Any]
        if self.remote:
            store = _upload.uploading_store(store_for(self.path, self.storage_options))
            self._versions = {n: store.version(n) for n in _published(hub)}
            self._uploads = _upload.plan_uploads(store, hub, plans)
            shared = {"uploads": self._uploads}
        else:
            self._stage_files(hub)
            shared = {"files": [stage for stage, _ in self._staged]}
        self._plan = hub
        where = {
            name: (i, start)
            for i, f in enumerate(hub.files)
            for name, (start, _) in f.regions.items()
        }
        return [
            dataclasses.replace(
                p,
                storage_data={
                    **shared,
                    "rank": rank,
                    "save": self.save_id,
                    "at": {
                        it.index.fqn: where[it.index.fqn]
                        for it in p.items
                        if it.type != WriteItemType.BYTE_IO
                    },
                },
            )
            for rank, p in enumerate(plans)
        ]

    def _stage_files(self, hub: HubPlan) -> None:
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as exc:
            raise SourceError(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        with _folder.folder_lock(self.path):
            _folder.remove_dead_saves(self.path, self.prefix, hub.index_name)
            self._lock_fd = _folder.save_lock(self.path, self.save_id)
            self._versions = {n: _folder.version(self.path, n) for n in _published(hub)}
            try:
                self._staged = []
                for f in hub.files:
                    stage = os.path.join(self.path, _folder.staging_name(self.save_id, f.name))
                    self._staged.append((stage, os.path.join(self.path, f.name)))
                    _folder.create(stage, f.header, f.size)
            except BaseException:
                self._abandon()
                raise

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """On every rank: write (or upload) the bytes of this rank's items."""
        try:
            return self._write_data(plan, planner)
        except BaseException:
            if self.is_coordinator:
                self._abandon()  # (what another rank fails in stays until __del__ or the next save)
            raise

    def _write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        if getattr(planner, "_enable_plan_caching", False):
            raise UnsupportedError(_NO_CACHING)
        data = plan.storage_data
        if not isinstance(data, dict) or "at" not in data:
            raise InvalidArgumentError(
                "this plan was not prepared by tensorfile's StorageWriter (a cached plan of "
                "another writer?)"
            )
        at: dict[str, tuple[int, int]] = data["at"]
        results: list[WriteResult] = []
        shards: list[tuple[Any, int, int, Any]] = []
        for item in plan.items:  # (objects first: they are small)
            if item.type == WriteItemType.BYTE_IO:
                got = planner.resolve_data(item)
                if not isinstance(got, io.BytesIO):
                    raise InvalidArgumentError(
                        f"{item.index.fqn!r}: the planner gave {type(got).__name__} for an object"
                    )
                value = got.getvalue()
                results.append(WriteResult(index=item.index, size_in_bytes=len(value),
                                           storage_data=value))  # fmt: skip
            else:
                shards.append((item, *at[item.index.fqn], planner))
        if "uploads" in data:
            results.extend(self._upload(data, shards))
        else:
            results.extend(self._write_local(data["files"], shards, data["save"]))
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def _write_local(self, files: list[str], shards: list[Any], save: str) -> list[WriteResult]:
        """Each item's runs written at their offsets, a ``pwrite`` a run, the item's file
        opened for it alone (a rank of many files holds a descriptor per thread)."""
        results: list[WriteResult] = []
        written: set[int] = set()

        def one(job: tuple[Any, int, int, Any]) -> None:
            item, file_no, start, planner = job
            r, data = _bytes_of(item, planner)
            if r.count:
                written.add(file_no)
                try:
                    fd = os.open(files[file_no], os.O_WRONLY | os.O_CLOEXEC)
                except OSError as exc:
                    raise SourceError(
                        f"cannot open {files[file_no]}: {exc.strerror or exc} (was the save "
                        "abandoned, or is the folder not shared by every rank?)"
                    ) from exc
                try:
                    for _, off, piece in spans(file_no, start, r, data):
                        write_all(fd, piece, off)
                    if self.fsync:  # this item's pages, flushed while the others write
                        first = start + int(r.starts[0])
                        _folder.flush_range(fd, first, start + int(r.starts[-1]) + r.length - first)
                except OSError as exc:
                    raise SourceError(
                        f"writing {item.index.fqn!r} failed: {exc.strerror or exc}"
                    ) from exc
                finally:
                    os.close(fd)
            results.append(WriteResult(index=item.index, size_in_bytes=r.nbytes,
                                       storage_data=save))  # fmt: skip

        in_threads(self.thread_count, shards, one)
        if self.fsync and not _folder.CAN_FLUSH_RANGE:
            for file_no in sorted(written):
                _folder.fsync_file(files[file_no])
        return results

    def _upload(self, data: dict[str, Any], shards: list[Any]) -> list[WriteResult]:
        store = _upload.uploading_store(store_for(self.path, self.storage_options))
        results: list[WriteResult] = []
        held: list[_pieces.Piece] = []
        for item, file_no, start, planner in shards:
            r, raw = _bytes_of(item, planner)
            held.append(_pieces.piece(file_no, start, r.starts, r.length, raw))
            results.append(WriteResult(index=item.index, size_in_bytes=r.nbytes,
                                       storage_data=None))  # fmt: skip
        sent = _upload.rank_uploads(store, data["uploads"], data["rank"], held, self.thread_count)
        sent["save"] = data["save"]
        if results:
            results[0] = dataclasses.replace(results[0], storage_data=sent)
        elif sent["etags"] or sent["pieces"]:
            raise InvalidArgumentError("a rank with no shards holds bytes of a part")
        return results

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """On the coordinator, once every rank has written: the objects file, the digests,
        then the files published, the index last."""
        if self._plan is None:
            raise InvalidArgumentError("finish() without prepare_global_plan() on this rank")
        saves = {_save_of(wr.storage_data) for rank in results for wr in rank} - {None}
        if saves - {self.save_id}:  # (its state is another save's now: leave it be)
            raise ConcurrentWriteError(
                f"{self.path}: another save began on this StorageWriter before this one "
                "finished (use one writer per save in flight); this one published nothing"
            )
        objects = {wr.index.fqn: wr.storage_data for rank in results for wr in rank
                   if isinstance(wr.storage_data, bytes)}  # fmt: skip
        sidecar = (self._sidecar, _objects.encode(objects)) if self._sidecar else None
        if self.remote:
            assert self._uploads is not None
            sent = [wr.storage_data for rank in results for wr in rank
                    if isinstance(wr.storage_data, dict)]  # fmt: skip
            store = _upload.uploading_store(store_for(self.path, self.storage_options))
            _upload.finish_uploads(store, self._plan, self._uploads, sent,
                                   save_id=self.save_id, versions=self._versions, sidecar=sidecar,
                                   prefix=self.prefix, threads=self.thread_count)  # fmt: skip
            self._plan, self._uploads = None, None
            return
        try:
            if sidecar is not None:
                with atomic_write(os.path.join(self.path, sidecar[0]), fsync=self.fsync) as fd:
                    write_all(fd, memoryview(sidecar[1]))
            if self.checksum is not None:
                self._write_digests(self.checksum)
            if self.fsync:
                for stage, _ in self._staged:
                    _folder.fsync_file(stage)
            with _folder.folder_lock(self.path):
                for name, version in self._versions.items():
                    if _folder.version(self.path, name) != version:
                        raise ConcurrentWriteError(
                            f"{self.path}: another save published {name} since this one "
                            "began; this one published nothing",
                            changed=name,
                        )
                publish(self.path, self._staged, self.prefix, self._plan.index,
                        tag=self.save_id, keep=[self._sidecar] if self._sidecar else [],
                        fsync=self.fsync)  # fmt: skip
                _folder.remove_old_sidecars(self.path, self.prefix, self._sidecar)
                _folder.drop_save_lock(self.path, self.save_id)
        except BaseException:
            self._abandon()
            raise
        self._plan = None
        self._staged = []
        self._unlock()

    # -- AsyncStager: dcp.async_save copies the state dict with this -----------------------

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``state_dict`` on the CPU that training may go on changing the original
        under (each DTensor's local shard copied whole, whatever view it is)."""
        staged: dict[str, Any] = _staged(state_dict)
        return staged

    def synchronize_staging(self) -> None:
        """Staging is done when :meth:`stage` returns."""

    def close(self) -> None:
        """Nothing to release between saves."""

    # -- helpers ---------------------------------------------------------------------------

    def _unlock(self) -> None:
        fd, self._lock_fd = getattr(self, "_lock_fd", None), None
        if fd is not None:
            os.close(fd)  # (releases the lock)

    def _abandon(self) -> None:
        """Give up this save: remove its staging files and its lock file, and release the
        lock."""
        for stage, _ in getattr(self, "_staged", []):
            try:
                os.unlink(stage)
            except OSError:
                pass
        self._staged = []
        self._plan = None
        if getattr(self, "_lock_fd", None) is not None:
            _folder.drop_save_lock(self.path, self.save_id)  # (still held: nobody races it)
        self._unlock()

    def _write_digests(self, algorithm: str) -> None:
        assert self._plan is not None
        for (stage, _), f in zip(self._staged, self._plan.files, strict=True):
            fd = os.open(stage, os.O_RDWR | os.O_CLOEXEC)
            try:
                found = _folder.digests(fd, stage, f.regions, algorithm, self.thread_count)
                write_all(fd, memoryview(f.header_with(found)), 0)
            finally:
                os.close(fd)


_NO_CACHING = (
    "tensorfile's StorageWriter lays out each save's files anew and cannot reuse a cached "
    "plan: use DefaultSavePlanner(enable_plan_caching=False) (the default), not "
    "DefaultSavePlanner(enable_plan_caching=True)"
)


def _target(path: object, options: Mapping[str, Any] | None) -> tuple[str, bool]:
    """The checkpoint's local folder (absolute) or ``s3://`` URL, and whether it is remote."""
    text = path_text(path)
    local = local_path_of(text)
    if local is not None:
        if options:
            raise InvalidArgumentError(f"storage_options are for URLs, not the folder {text}")
        return os.path.abspath(local), False
    _upload.uploading_store(store_for(text, options))
    return text.rstrip("/"), True


def _save_of(data: Any) -> str | None:
    """The save a rank's write result belongs to."""
    if isinstance(data, str):
        return data
    if isinstance(data, dict) and isinstance(data.get("save"), str):
        return str(data["save"])
    return None


def _published(hub: HubPlan) -> tuple[str, str]:
    """The files whose change tells that another save published: the index and the file."""
    return hub.index_name, hub.single_name


def _entries(plans: list[SavePlan]) -> tuple[list[tuple[str, str, tuple[int, ...]]], bool]:
    """Every tensor of the global plan as ``(fqn, safetensors dtype, global shape)``, in
    the order of first appearance, once its shards are checked to cover it exactly; and
    whether there are other objects."""
    specs: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    boxes: dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    objects = False
    for p in plans:
        for it in p.items:
            if it.type == WriteItemType.BYTE_IO:
                objects = True
                continue
            td = it.tensor_data
            if td is None:
                raise InvalidArgumentError(f"{it.index.fqn!r}: a tensor item with no tensor data")
            boxes.setdefault(it.index.fqn, []).append(
                (tuple(td.chunk.offsets), tuple(td.chunk.sizes))
            )
            spec = (td.properties.dtype, tuple(td.size))
            seen = specs.setdefault(it.index.fqn, spec)
            if seen != spec:
                raise InvalidArgumentError(
                    f"tensor {it.index.fqn!r}: the ranks disagree on its dtype and shape "
                    f"({seen[0]} {list(seen[1])} and {spec[0]} {list(spec[1])})"
                )
    entries = []
    for fqn, (dt, shape) in specs.items():
        try:
            d = dtypes.from_torch(dt)
        except (KeyError, TypeError):
            raise UnsupportedError(f"tensor {fqn!r}: {dt} has no safetensors dtype") from None
        if d.is_subbyte:
            raise UnsupportedError(f"tensor {fqn!r}: sub-byte {d.name} tensors are not saved")
        entries.append((fqn, d.name, shape))
    for fqn, (_, shape) in specs.items():
        check_cover(fqn, shape, boxes[fqn])  # (no byte of the files left unwritten)
    return entries, objects


def _bytes_of(item: Any, planner: Any) -> tuple[Any, memoryview]:
    """The runs of ``item``'s shard and its bytes (resolved now: one shard in memory)."""
    td = item.tensor_data
    r = runs(tuple(td.size), tuple(td.chunk.offsets), tuple(td.chunk.sizes),
             td.properties.dtype.itemsize)  # fmt: skip
    tensor = planner.resolve_data(item)
    return shard_bytes(item.index.fqn, tensor, td.properties.dtype, tuple(td.chunk.sizes), r)


def _staged(obj: Any) -> Any:
    from torch.distributed.tensor import DTensor

    if isinstance(obj, DTensor):
        local = obj.to_local().detach().to("cpu", copy=True)
        return DTensor.from_local(
            local,
            obj.device_mesh,
            obj.placements,
            run_check=False,
            shape=obj.shape,
            stride=obj.stride(),
        )
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _staged(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_staged(v) for v in obj]
    if isinstance(obj, tuple):
        if hasattr(obj, "_fields"):
            return type(obj)(*map(_staged, obj))
        return tuple(_staged(v) for v in obj)
    return copy.deepcopy(obj)
