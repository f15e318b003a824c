"""Cooperative loads: every byte read from storage once, then sent to the ranks that want it.

:func:`cooperative_load` runs on every rank of a ``torch.distributed`` group:

1. each rank opens the checkpoint and turns its plan into regions; the ranks exchange
   them (:func:`gather`: a few numbers per tensor, each wait bounded by ``timeout``) with
   the checkpoint's identity (a rank that opened another checkpoint, whose plan or
   arguments were refused, or that is late or out of step, fails every rank);
2. every rank computes the same :mod:`schedule <tensorfile.distributed._schedule>`: which
   rank reads which block, and the pieces each block is sent as;
3. each rank posts the receives of the pieces it gets, straight into its results' memory
   (on gloo all at once; on NCCL, which runs the transfers between two ranks in the order
   both post them, each block's as the rank reaches it in the schedule);
   a thread reads the blocks it owns, in order, at most :data:`READ_AHEAD` bytes ahead of
   the sends, each in one planned pass (into its own result when it wants the block whole);
   as each block lands the rank broadcasts it (a block every rank wants whole) or sends
   each piece to its rank, and copies its own; sends still in flight hold at most
   :data:`SEND_WINDOW` bytes;
4. the ranks wait for every transfer (a rank's own block reads each bounded by
   ``timeout``; a wait on other ranks by ``timeout`` for each step of their shares), then
   tell each other whether their reads succeeded: a rank whose read failed sent zeros in its place
   (so that no rank waits for it) and every rank fails with
   :class:`~tensorfile.errors.PeerError`. A rank that dies breaks its connections: the
   ranks waiting on it, and then every rank at the final exchange, fail with a
   :class:`~tensorfile.errors.PeerError` too.

On gloo the pieces travel from and into CPU memory; on NCCL through device buffers of the
rank's current CUDA device (then copied into the results). ``counters`` and a DEBUG line per
rank say what was read, sent and received.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tensorfile.core.catalog import TensorInfo
from tensorfile.core.errors import PeerError, TensorFileError
from tensorfile.core.reader import Reader
from tensorfile.core.selection import Region
from tensorfile.core.selection.read import Want, element_size, new_box, raw, read_regions
from tensorfile.core.selection.runs import take
from tensorfile.formats.open import open as open_checkpoint

from ._exchange import broken, comm_device, gather, is_broken, membership
from ._regions import LoadCounters, identity, path_text, plan_regions, shard, to_torch
from ._schedule import Block, Piece, Schedule, Tensor, schedule

__all__ = ["BLOCK_BYTES", "READ_AHEAD", "SEND_WINDOW", "cooperative_load"]

log = logging.getLogger("tensorfile.distributed")

BLOCK_BYTES = 32 << 20
"""The most bytes of one block (fewer when a checkpoint is small: blocks are cut so that each
rank reads several)."""

READ_AHEAD = 256 << 20
"""Bytes of blocks a rank's read thread may hold that the rank has not sent yet."""

SEND_WINDOW = 256 << 20
"""Bytes of sends a rank may have in flight before it waits for the oldest."""

NDArray = np.ndarray[Any, Any]


def cooperative_load(
    path_or_url: Any,
    plan: Mapping[str, Any] | None,
    group: Any,
    device: Any,
    timeout: float,
    counters: LoadCounters,
    refused: BaseException | None = None,
) -> dict[str, torch.Tensor]:
    """``load(path_or_url, plan, group=group)`` on this rank (see the module docstring);
    ``refused``: what ``load`` refused of this rank's own arguments, told to every rank at
    the exchange (so that no rank waits for one that left)."""
    if not dist.is_initialized():
        raise PeerError("load(group=...) needs torch.distributed initialized (init_process_group)")
    me, _ = membership(group)
    if is_broken(group):
        raise PeerError(
            "an earlier cooperative load on this process group failed out of step with the "
            "other ranks (a rank stopped or timed out): its collectives are no longer paired; "
            "make a new process group"
        )
    wait = datetime.timedelta(seconds=timeout)
    comm = comm_device(group)
    reader: Reader | None = None
    regions: dict[str, Region] = {}
    failure: BaseException | None = refused
    ident = ""
    try:
        if failure is None:
            reader = open_checkpoint(path_text(path_or_url))
            regions = plan_regions(reader, plan)
            ident = identity(reader, counters)
    except Exception as exc:  # (told to every rank, then raised here)
        failure = exc
    mine = {n: r.dims for n, r in regions.items()}
    said = (ident, mine, None if failure is None else f"{type(failure).__name__}: {failure}")
    try:
        heard = gather(said, group, "plans", wait, comm)
        for r, (_, _, text) in enumerate(heard):
            if failure is None and text is not None:
                raise PeerError(f"rank {r} of the group could not start the load: {text}")
        if failure is not None:
            raise failure
        assert reader is not None
        for r, (other, _, _) in enumerate(heard):
            if other != ident:
                raise PeerError(
                    f"rank {r} of the group opened another checkpoint than rank {me} "
                    f"({path_text(path_or_url)}): every rank must load the same one"
                )
        wants = [h[1] for h in heard]
        return _Run(reader, regions, wants, me, group, wait, counters, comm).run(device)
    finally:
        if reader is not None:
            reader.close()


def _block_bytes(total: int, world: int) -> int:
    return max(1 << 20, min(BLOCK_BYTES, total // max(world * 4, 1)))


class _Run:
    """One rank's part of a cooperative load."""

    def __init__(
        self,
        reader: Reader,
        regions: dict[str, Region],
        wants: list[dict[str, Any]],
        me: int,
        group: Any,
        wait: datetime.timedelta,
        counters: LoadCounters,
        comm: torch.device | None,
    ) -> None:
        self.reader = reader
        self.regions = regions
        self.me = me
        self.group = group
        self.wait_for = wait
        self.counters = counters
        names = {n for w in wants for n in w}
        places = {n: reader.info(n) for n in names}
        order = sorted(names, key=lambda n: (places[n].file or "", _start(places[n])))
        tensors = [
            Tensor(n, places[n].shape, element_size(places[n]), raw(shard(reader, n), places[n]))
            for n in order
        ]
        total = sum(places[n].nbytes for n in names)  # (a bound: the union is at most the tensors)
        self.schedule: Schedule = schedule(wants, tensors, _block_bytes(total, len(wants)))
        # a wait on other ranks may span their whole share: each of their steps (a block's
        # read, its sends) is bounded by ``wait``, so the wait is bounded by that many
        owned = [0] * len(wants)
        for b in self.schedule.blocks:
            owned[b.owner] += 1
        self.patience = wait * (2 + 2 * max(owned, default=0))
        self.boxes = {n: new_box(r, reader.info(n)) for n, r in regions.items()}
        self.comm = comm
        self.staged: list[tuple[torch.Tensor, NDArray]] = []  # (device buffer, its place)
        # this rank's sends and broadcasts, oldest first: (work, bytes, what it keeps alive)
        self.sends: deque[tuple[Any, int, list[Any]]] = deque()
        self.receives: list[tuple[Any, int, list[Any]]] = []  # waited for at the end only
        self.in_flight = 0
        self.failed: BaseException | None = None

    # -- the places pieces land in ------------------------------------------------------

    def _rows(self, name: str, rows: tuple[int, int]) -> NDArray:
        """The rows ``rows`` of this rank's box of ``name``, as a flat byte array."""
        box = self.boxes[name]
        flat = box.reshape(-1)
        if box.ndim == 1:  # a 0-d tensor's box: its element's bytes
            return flat
        per = flat.size // max(box.shape[0], 1)
        return flat[rows[0] * per : rows[1] * per]

    def _wire(self, arr: NDArray) -> torch.Tensor:
        """``arr`` (flat bytes) as a tensor the backend can send."""
        t = torch.from_numpy(arr)
        return t if self.comm is None else t.to(self.comm)

    def _landing(self, dest: NDArray) -> torch.Tensor:
        """Where a transfer into ``dest`` lands: ``dest`` itself, or a device buffer copied
        into it after the waits."""
        if self.comm is None:
            return torch.from_numpy(dest)
        buf = torch.empty(dest.size, dtype=torch.uint8, device=self.comm)
        self.staged.append((buf, dest))
        return buf

    # -- the steps -----------------------------------------------------------------------

    def run(self, device: Any) -> dict[str, torch.Tensor]:
        tags = self._tags()
        eager = self.comm is None  # gloo: every receive posted up front, in any order
        reads = _Reads(self)
        try:
            if eager:
                for block in self.schedule.blocks:
                    self._receive(block, tags)
            reads.start()
            for block in self.schedule.blocks:
                if not eager:  # NCCL runs a pair's transfers in the order both post them
                    self._receive(block, tags)
                if block.broadcast:
                    self._broadcast(block, reads)
                elif block.owner == self.me:
                    self._send(block, reads.get(block), tags)
            self._drain(0)
            for work in self.receives:
                self._wait(work[0])
        except TensorFileError:
            reads.stop(wait=False)
            raise
        except Exception as exc:  # the backend refusing to post a transfer (a peer is gone)
            reads.stop(wait=False)
            raise broken(
                self.group,
                PeerError(f"rank {self.me}: a transfer of the cooperative load failed: {exc}"),
            ) from exc
        except BaseException:
            reads.stop(wait=False)
            raise
        reads.stop()
        for buf, dest in self.staged:
            dest[...] = buf.cpu().numpy()
        failures = gather(
            None if self.failed is None else f"{type(self.failed).__name__}: {self.failed}",
            self.group,
            "outcome",
            self.patience,
            self.comm,
        )
        if self.failed is not None:
            raise self.failed
        for r, text in enumerate(failures):
            if text is not None:
                raise PeerError(f"rank {r} of the group failed to read its part: {text}")
        c = self.counters
        log.debug(
            "rank %d: read %d bytes in %d blocks; sent %d bytes in %d messages; received %d "
            "bytes in %d messages",
            self.me, c.bytes_read, c.reads, c.bytes_sent, c.messages_sent, c.bytes_received,
            c.messages_received,
        )  # fmt: skip
        return {
            n: to_torch(self.reader.info(n), r, self.boxes[n], device)
            for n, r in self.regions.items()
        }

    def _tags(self) -> dict[tuple[int, int], int]:
        """The tags of all point-to-point pieces, by (block, piece): the same on every rank."""
        tags: dict[tuple[int, int], int] = {}
        for block in self.schedule.blocks:
            if block.broadcast:
                continue
            for k, piece in enumerate(block.pieces):
                if piece.rank != block.owner:
                    tags[(block.index, k)] = len(tags)
        return tags

    def _receive(self, block: Block, tags: dict[tuple[int, int], int]) -> None:
        """Post the receives of the point-to-point pieces of ``block`` this rank gets."""
        if block.broadcast or block.owner == self.me:
            return
        for k, piece in enumerate(block.pieces):
            if piece.rank != self.me:
                continue
            dest = self._landing(self._rows(block.name, piece.rows))
            tag = tags[(block.index, k)]
            work = dist.irecv(dest, group_src=block.owner, group=self.group, tag=tag)
            self.receives.append((work, 0, [dest]))
            self.counters.bytes_received += piece.nbytes
            self.counters.messages_received += 1

    def _broadcast(self, block: Block, reads: _Reads) -> None:
        mine = next(p for p in block.pieces if p.rank == self.me)
        if block.owner == self.me:
            buf = reads.get(block)
            dest = self._rows(block.name, mine.rows)
            if not np.may_share_memory(buf, dest):
                dest[...] = buf.reshape(-1)
            t = self._wire(dest)
            n = dest.size * (len(block.pieces) - 1)
            self.counters.bytes_sent += n
            self.counters.messages_sent += len(block.pieces) - 1
            work = dist.broadcast(t, group_src=block.owner, group=self.group, async_op=True)
            self._track(work, n, [t])
            return
        t = self._landing(self._rows(block.name, mine.rows))
        self.counters.bytes_received += mine.nbytes
        self.counters.messages_received += 1
        work = dist.broadcast(t, group_src=block.owner, group=self.group, async_op=True)
        self.receives.append((work, 0, [t]))

    def _send(self, block: Block, buf: NDArray, tags: dict[tuple[int, int], int]) -> None:
        for k, piece in enumerate(block.pieces):
            if piece.rank == self.me:
                dest = self._rows(block.name, piece.rows)
                if not np.may_share_memory(buf, dest):  # (else read in place)
                    _extract(buf, piece, dest)
                continue
            part = _extract(buf, piece, None)
            t = self._wire(part)
            work = dist.isend(t, group_dst=piece.rank, group=self.group, tag=tags[(block.index, k)])
            self.counters.bytes_sent += piece.nbytes
            self.counters.messages_sent += 1
            self._track(work, piece.nbytes, [t, part])

    def _track(self, work: Any, nbytes: int, keep: list[Any]) -> None:
        self.sends.append((work, nbytes, keep))
        self.in_flight += nbytes
        self._drain(SEND_WINDOW)

    def _drain(self, limit: int) -> None:
        """Wait for this rank's oldest sends until at most ``limit`` bytes are in flight.

        Only sends: a rank never waits, before its last block, for what another rank sends
        (that rank may itself be waiting for a broadcast this rank has not reached yet)."""
        while self.sends and (limit == 0 or self.in_flight > limit):
            work, nbytes, _ = self.sends.popleft()
            self._wait(work)
            self.in_flight -= nbytes

    def _wait(self, work: Any) -> None:
        """Wait for a transfer, as long as the other ranks' shares may take (each of their
        steps bounded by ``timeout``: :attr:`patience`)."""
        try:
            work.wait(self.patience)
        except Exception as exc:
            raise broken(
                self.group,
                PeerError(
                    f"rank {self.me}: a transfer of the cooperative load failed (another rank "
                    f"stopped, or did not answer within {self.patience.total_seconds():g} s, "
                    f"timeout= for each of its steps): {exc}"
                ),
            ) from exc


def _start(info: Any) -> int:
    first = info.first
    return -1 if first is None else int(first.range.start)


def _extract(buf: NDArray, piece: Piece, out: NDArray | None) -> NDArray:
    """``piece`` of a block's box ``buf`` (shape ``(*box, itemsize)``) as flat bytes: a view
    where they are contiguous in ``buf``, else copied (into ``out`` when given)."""
    if buf.ndim == 1:  # a 0-d tensor
        part = buf
    else:
        rows = buf[piece.src[0] : piece.src[1]]
        whole = all(iv == ((0, n),) for iv, n in zip(piece.inner, rows.shape[1:-1], strict=True))
        if whole:
            part = rows
        else:
            inner = (sum(b - a for a, b in iv) for iv in piece.inner)
            box = (rows.shape[0], *inner, rows.shape[-1])
            dest = np.empty(box, np.uint8) if out is None else out.reshape(box)
            take(rows, (((0, rows.shape[0]),), *piece.inner), dest)
            return dest.reshape(-1)
    flat = part.reshape(-1)
    if out is not None:
        out[...] = flat
        return out
    return flat


class _Reads:
    """The thread that reads a rank's blocks, in schedule order, ahead of its sends."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.mine = [b for b in run.schedule.blocks if b.owner == run.me]
        self.done: dict[int, NDArray | BaseException] = {}
        self.held = 0
        self.stopped = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._work, name="tensorfile-coop-read", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop reading; wait for the thread (``wait=False``, on a failure: not for a read
        that may hang, the thread is a daemon and its file is closed next)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread.ident is not None:  # (started)
            self.thread.join(None if wait else 1.0)

    def _target(self, block: Block, reg: Region, info: TensorInfo) -> NDArray:
        """Where ``block`` (the region ``reg`` of the tensor ``info``) is read: this rank's
        own result rows when it wants the whole block as it is, else a new buffer."""
        run = self.run
        own = [p for p in block.pieces if p.rank == run.me]
        if len(own) == 1 and _is_whole(own[0], block):
            return run._rows(block.name, own[0].rows).reshape(*reg.box_shape, element_size(info))
        return new_box(reg, info)

    def _work(self) -> None:
        run = self.run
        for block in self.mine:
            with self.cond:
                while not self.stopped and self.held > 0 and self.held + block.nbytes > READ_AHEAD:
                    self.cond.wait()
                if self.stopped:
                    return
            try:
                info = run.reader.info(block.name)
                reg = Region(info.shape, block.dims, None, _box_shape(block.dims))
                target = self._target(block, reg, info)
                got = read_regions([Want(shard(run.reader, block.name), block.name, reg, target)])
                run.counters.bytes_read += got
                run.counters.reads += 1
                result: NDArray | BaseException = target
            except BaseException as exc:  # (told to every rank at the end)
                result = exc
            with self.cond:
                self.done[block.index] = result
                self.held += block.nbytes
                self.cond.notify_all()

    def get(self, block: Block) -> NDArray:
        """The block, once read (zeros in its place when its read failed: the failure is
        told to every rank at the end)."""
        limit = time.monotonic() + self.run.wait_for.total_seconds()
        with self.cond:
            while block.index not in self.done:
                if not self.thread.is_alive():
                    raise PeerError(f"rank {self.run.me}: the read thread stopped early")
                if time.monotonic() > limit:
                    raise broken(
                        self.run.group,
                        PeerError(
                            f"rank {self.run.me}: reading its block of tensor {block.name!r} took "
                            f"more than {self.run.wait_for.total_seconds():g} s (timeout=)"
                        ),
                    )
                self.cond.wait(1.0)
            result = self.done.pop(block.index)
            self.held -= block.nbytes
            self.cond.notify_all()
        if isinstance(result, BaseException):
            if self.run.failed is None:
                self.run.failed = (
                    result if isinstance(result, TensorFileError) else PeerError(str(result))
                )
            info = self.run.reader.info(block.name)
            return np.zeros((*_box_shape(block.dims), element_size(info)), np.uint8)
        return result


def _box_shape(dims: tuple[tuple[tuple[int, int], ...], ...]) -> tuple[int, ...]:
    return tuple(sum(b - a for a, b in iv) for iv in dims)


def _is_whole(piece: Piece, block: Block) -> bool:
    shape = _box_shape(block.dims)
    if not shape:
        return True
    return piece.src == (0, shape[0]) and all(
        iv == ((0, n),) for iv, n in zip(piece.inner, shape[1:], strict=True)
    )
