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
rank (SIGKILL) leaves it so, and its staging files are removed by the next save. The
coordinator holds a lock of the folder from step 1 to 3: a second job saving to the same
folder meanwhile fails with :class:`~tensorfile.errors.ConcurrentWriteError`.

Entries that are not tensors go to a JSON sidecar named in every header
(:mod:`tensorfile.distributed._objects`).

Example (one process; with ``torchrun`` every rank runs the same lines)::

    import torch, torch.distributed.checkpoint as dcp
    from tensorfile.distributed import StorageWriter
    dcp.save({"w": torch.ones(2, 2), "step": 3}, storage_writer=StorageWriter("ckpt"))
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import fcntl
import io
import os
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageWriter as _DCPStorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from tensorfile.core import dtypes
from tensorfile.core.atomic import (
    TEMP_TAG,
    atomic_write,
    is_temp_name,
    preallocate,
    remove_if_unlocked,
    remove_stale_temps,
    write_all,
)
from tensorfile.core.digests import ALGORITHMS, Digest
from tensorfile.core.errors import (
    ConcurrentWriteError,
    InvalidArgumentError,
    SourceError,
    UnsupportedError,
)
from tensorfile.core.parallel import in_threads
from tensorfile.core.sizes import parse_size
from tensorfile.formats.safetensors.hub import HubPlan, plan_hub, publish
from tensorfile.sources import local_path_of

from . import _objects
from ._runs import runs

__all__ = ["StorageWriter"]

_STAGING = ".tensorfile-dcp-"
_READ_STEP = 16 << 20


class StorageWriter(_DCPStorageWriter, AsyncStager):
    """Save a ``torch.distributed.checkpoint`` state dict as a hub checkpoint in the local
    folder ``path`` (see the module docstring).

    Args:
        path: the checkpoint folder (made if missing); every rank must see it (one machine,
            or a shared file system across machines).
        max_shard_size: the largest file before the checkpoint is split into shards
            (huggingface_hub's rule; ``"5GB"``, ``"500MiB"`` or a number of bytes).
        checksum: ``"sha256"``, ``"xxh3"`` or ``"crc32c"``: each tensor's digest is stored
            in its file's header (tensorfile's ``tensorfile.digests``), for
            ``StorageReader(verify=True)``; the coordinator reads the files once more to
            compute them.
        fsync: flush every file and the folder to stable storage before publishing.
        thread_count: threads writing on each rank (default 4).
        prefix: the files' name stem (``model``).

    Example::

        dcp.save(state_dict, storage_writer=StorageWriter("ckpt", max_shard_size="2GB"))
    """

    _synchronize_after_execute: bool = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_shard_size: int | str = "5GB",
        checksum: str | None = None,
        fsync: bool = False,
        thread_count: int = 4,
        prefix: str = "model",
    ) -> None:
        super().__init__()
        self.path = _local_folder(path)
        self.max_shard_size = parse_size(max_shard_size)
        if checksum is not None and checksum not in ALGORITHMS:
            raise InvalidArgumentError(
                f"checksum must be one of {', '.join(sorted(ALGORITHMS))}, got {checksum!r}"
            )
        if not isinstance(fsync, bool):
            raise InvalidArgumentError(f"fsync must be a bool, got {fsync!r}")
        if isinstance(thread_count, bool) or not isinstance(thread_count, int) or thread_count < 1:
            raise InvalidArgumentError(f"thread_count must be a positive int, got {thread_count!r}")
        if not isinstance(prefix, str) or not prefix or prefix.startswith(".") or "/" in prefix:
            raise InvalidArgumentError(f"prefix {prefix!r}: a plain file name stem")
        self.checksum = checksum
        self.fsync = fsync
        self.thread_count = thread_count
        self.prefix = prefix
        self.save_id = uuid.uuid4().hex[:16]
        self.is_coordinator = False
        self.rank: int | None = None
        self._lock_fd: int | None = None
        self._plan: HubPlan | None = None
        self._staged: list[tuple[str, str]] = []
        self._sidecar: str | None = None

    # -- pickling (async_save in a process): no open lock travels --------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lock_fd"] = None
        return state

    def __del__(self) -> None:
        self._unlock()

    # -- DCP's StorageWriter ---------------------------------------------------------------

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint folder."""
        return self.path

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new save begins (in ``checkpoint_id`` when given)."""
        self._unlock()
        if checkpoint_id is not None:
            self.path = _local_folder(checkpoint_id)
        self.save_id = uuid.uuid4().hex[:16]

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a folder this writer can save to (a local path)."""
        try:
            _local_folder(checkpoint_id)
        except InvalidArgumentError:
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
        """On the coordinator: lay out the files from every rank's plan, create them under
        staging names, and tell each rank where its items go."""
        self._unlock()
        self.save_id = uuid.uuid4().hex[:16]
        entries, objects = _entries(plans)
        self._sidecar = _objects.sidecar_name(self.prefix, self.save_id) if objects else None
        meta = {_objects.POINTER_KEY: self._sidecar} if self._sidecar else None
        hub = plan_hub(
            entries,
            max_shard_size=self.max_shard_size,
            metadata=meta,
            checksum=self.checksum,
            prefix=self.prefix,
        )
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as exc:
            raise SourceError(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        self._lock()
        try:
            _remove_dead_saves(self.path, self.prefix, hub.index_name)
            self._staged = []
            for f in hub.files:
                stage = os.path.join(self.path, f"{_STAGING}{self.save_id}-{f.name}.part")
                self._staged.append((stage, os.path.join(self.path, f.name)))
                _create(stage, f.header, f.size)
        except BaseException:
            self._abandon()
            raise
        self._plan = hub
        where = {
            name: (i, start)
            for i, f in enumerate(hub.files)
            for name, (start, _) in f.regions.items()
        }
        files = [stage for stage, _ in self._staged]
        return [
            dataclasses.replace(
                p,
                storage_data={
                    "files": files,
                    "at": {
                        it.index.fqn: where[it.index.fqn]
                        for it in p.items
                        if it.type != WriteItemType.BYTE_IO
                    },
                },
            )
            for p in plans
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """On every rank: write the bytes of this rank's items at their offsets."""
        data = plan.storage_data
        if not isinstance(data, dict) or "files" not in data:
            raise InvalidArgumentError(
                "this plan was not prepared by tensorfile's StorageWriter (a cached plan of "
                "another writer?)"
            )
        files: list[str] = data["files"]
        at: dict[str, tuple[int, int]] = data["at"]
        fds: dict[int, int] = {}
        opening = threading.Lock()
        results: list[WriteResult] = []

        def fd_of(i: int) -> int:
            with opening:
                if i not in fds:
                    try:
                        fds[i] = os.open(files[i], os.O_WRONLY | os.O_CLOEXEC)
                    except OSError as exc:
                        raise SourceError(
                            f"cannot open {files[i]}: {exc.strerror or exc} (was the save "
                            "abandoned, or is the folder not shared by every rank?)"
                        ) from exc
                return fds[i]

        def one(item: Any) -> None:
            if item.type == WriteItemType.BYTE_IO:
                got = planner.resolve_data(item)
                if not isinstance(got, io.BytesIO):
                    raise InvalidArgumentError(
                        f"{item.index.fqn!r}: the planner gave {type(got).__name__} for an object"
                    )
                value = got.getvalue()
                results.append(WriteResult(index=item.index, size_in_bytes=len(value),
                                           storage_data=bytes(value)))  # fmt: skip
                return
            file_no, start = at[item.index.fqn]
            n = _write_item(item, planner.resolve_data(item), fd_of(file_no), start)
            results.append(WriteResult(index=item.index, size_in_bytes=n, storage_data=None))

        try:
            in_threads(self.thread_count, plan.items, one)
            if self.fsync:
                for fd in fds.values():
                    os.fsync(fd)
        finally:
            for fd in fds.values():
                os.close(fd)
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """On the coordinator, once every rank has written: the objects file, the digests,
        then the files published, the index last."""
        if self._plan is None:
            raise InvalidArgumentError("finish() without prepare_global_plan() on this rank")
        try:
            if self._sidecar is not None:
                objects = {
                    wr.index.fqn: wr.storage_data
                    for rank in results
                    for wr in rank
                    if isinstance(wr.storage_data, bytes)
                }
                with atomic_write(os.path.join(self.path, self._sidecar), fsync=self.fsync) as fd:
                    write_all(fd, memoryview(_objects.encode(objects)))
            if self.checksum is not None:
                self._write_digests(self.checksum)
            if self.fsync:
                for stage, _ in self._staged:
                    _fsync_file(stage)
            index = self._plan.index
            publish(
                self.path,
                self._staged,
                self.prefix,
                index,
                tag=self.save_id,
                keep=[self._sidecar] if self._sidecar else [],
                fsync=self.fsync,
            )
            _remove_old_sidecars(self.path, self.prefix, self._sidecar)
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

    def _lock(self) -> None:
        """An exclusive ``flock`` of the folder itself (no lock file is left behind; the
        lock goes with the coordinator's process, however it ends)."""
        path = self.path
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise SourceError(f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConcurrentWriteError(
                    f"{self.path}: another job is saving a checkpoint to this folder; "
                    "nothing was written"
                ) from None
            raise SourceError(f"cannot lock {path}: {exc.strerror or exc}") from exc
        self._lock_fd = fd

    def _unlock(self) -> None:
        fd, self._lock_fd = getattr(self, "_lock_fd", None), None
        if fd is not None:
            os.close(fd)  # (releases the lock)

    def _abandon(self) -> None:
        """Remove this save's staging files and release the folder."""
        for stage, _ in self._staged:
            try:
                os.unlink(stage)
            except OSError:
                pass
        self._staged = []
        self._plan = None
        self._unlock()

    def _write_digests(self, algorithm: str) -> None:
        assert self._plan is not None
        for (stage, _), f in zip(self._staged, self._plan.files, strict=True):
            fd = os.open(stage, os.O_RDWR | os.O_CLOEXEC)
            try:
                found = _digests(fd, stage, f.regions, algorithm, self.thread_count)
                write_all(fd, memoryview(f.header_with(found)), 0)
            finally:
                os.close(fd)


def _digests(
    fd: int, shown: str, regions: dict[str, tuple[int, int]], algorithm: str, threads: int
) -> dict[str, str]:
    """The digest of each tensor's bytes in the open file ``fd``, on ``threads`` threads."""
    found: dict[str, str] = {}

    def one(item: tuple[str, tuple[int, int]]) -> None:
        name, (start, stop) = item
        d = Digest(algorithm)
        pos = start
        while pos < stop:
            chunk = os.pread(fd, min(_READ_STEP, stop - pos), pos)
            if not chunk:
                raise SourceError(f"{shown} ended early at byte {pos}")
            d.update(chunk)
            pos += len(chunk)
        found[name] = d.value()

    in_threads(threads, list(regions.items()), one)
    return found


def _local_folder(path: object) -> str:
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(
            f"a checkpoint folder is a path, got {type(path).__name__}"
        ) from None
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("a checkpoint folder is a non-empty path")
    local = local_path_of(text)
    if local is None:
        raise UnsupportedError(
            f"{text}: StorageWriter saves to local (or shared) folders; StorageReader reads "
            "http(s):// and s3:// checkpoints"
        )
    return os.path.abspath(local)


def _entries(plans: list[SavePlan]) -> tuple[list[tuple[str, str, tuple[int, ...]]], bool]:
    """Every tensor of the global plan as ``(fqn, safetensors dtype, global shape)``, in
    the order of first appearance; and whether there are other objects."""
    specs: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    objects = False
    for p in plans:
        for it in p.items:
            if it.type == WriteItemType.BYTE_IO:
                objects = True
                continue
            td = it.tensor_data
            if td is None:
                raise InvalidArgumentError(f"{it.index.fqn!r}: a tensor item with no tensor data")
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
    return entries, objects


def _write_item(item: Any, tensor: Any, fd: int, start: int) -> int:
    """Write one shard's bytes at its runs; the bytes written."""
    td = item.tensor_data
    if td is None or not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError(
            f"{item.index.fqn!r}: the planner gave {type(tensor).__name__}, not a tensor"
        )
    t = tensor.detach()
    if t.dtype != td.properties.dtype or tuple(t.shape) != tuple(td.chunk.sizes):
        raise InvalidArgumentError(
            f"{item.index.fqn!r}: the shard is {t.dtype} {list(t.shape)}; the plan says "
            f"{td.properties.dtype} {list(td.chunk.sizes)}"
        )
    r = runs(tuple(td.size), tuple(td.chunk.offsets), tuple(td.chunk.sizes), t.element_size())
    if r.count == 0:
        return 0
    if t.device.type != "cpu":
        t = t.cpu()
    flat = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    view = memoryview(flat)  # type: ignore[arg-type]
    n = r.length
    try:
        for i, s in enumerate(r.starts.tolist()):
            write_all(fd, view[i * n : (i + 1) * n], start + s)
    except OSError as exc:
        raise SourceError(f"writing {item.index.fqn!r} failed: {exc.strerror or exc}") from exc
    return r.nbytes


def _create(stage: str, header: bytes, size: int) -> None:
    """A staging file: the header, then the data region reserved."""
    try:
        fd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise SourceError(f"cannot create {stage}: {exc.strerror or exc}") from exc
    try:
        write_all(fd, memoryview(header))
        preallocate(fd, size - len(header), len(header))
        os.ftruncate(fd, size)
    except OSError as exc:
        raise SourceError(f"cannot write {stage}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_dead_saves(folder: str, prefix: str, index_name: str) -> None:
    """The staging files of saves that died (under the folder's lock no save is live), and
    the temporary files their commits left: an objects file's (a name no later save writes
    again) and the index's (a later save of one file writes no index)."""
    sidecars = f".{prefix}.dcp-objects-"
    for name in _listing(folder):
        path = os.path.join(folder, name)
        if name.startswith(_STAGING):
            try:
                os.unlink(path)
            except OSError:
                pass
        elif name.startswith(sidecars) and f".{TEMP_TAG}-" in name:
            if is_temp_name(name, name[1 : name.rfind(f".{TEMP_TAG}-")]):
                remove_if_unlocked(path)
    remove_stale_temps(os.path.join(folder, index_name))


def _remove_old_sidecars(folder: str, prefix: str, keep: str | None) -> None:
    stem = f"{prefix}.dcp-objects-"
    for name in _listing(folder):
        if name.startswith(stem) and name.endswith(".json") and name != keep:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def _listing(folder: str) -> Iterable[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


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
        return (
            type(obj)(*map(_staged, obj))
            if hasattr(obj, "_fields")
            else tuple(_staged(v) for v in obj)
        )
    return copy.deepcopy(obj)
