"""A feed's batches without DataLoader's transport: :class:`FeedLoader` gathers them in
threads of the training process, straight from the shards' mapped arrays into buffers it
reuses.

``DataLoader(feed, batch_size=None, num_workers=k)`` pays for every batch twice over before
the loop sees it: the worker writes it into a fresh shared-memory segment (new pages, which
cost more than the copy on many hosts) and the main process receives it through a pickled
handle on a queue. With data already in memory-mapped shards none of that is needed: a
gather is numpy indexing, whose copies release the GIL, so threads of the training process
run them in parallel with the loop and with each other, into buffers of a :class:`~.torch_ring.Ring`
that are used again once the loop has dropped the batch (a batch, or anything made of its
memory, that the loop keeps is never overwritten: the ring makes another buffer).

It is a drop-in for the ``DataLoader`` loop over the same feed:

* the same batches in the same order: the rank's steps in order (what ``DataLoader``'s
  round-robin over its workers delivers), the same split between ranks, ``even``,
  ``drop_last``;
* :meth:`FeedLoader.state_dict` is exact without ``samples=`` (the loop takes its batches
  from this object, so it knows what was taken) and is the feed's state: it resumes with
  another world size, another number of threads, or a ``DataLoader`` and the other way
  round; :meth:`~FeedLoader.load_state_dict` and :meth:`~FeedLoader.set_epoch` are the
  feed's (a ``DataLoader`` pass over the same feed after the loader's makes the position
  unknown again, as for the feed; the loader's next pass makes it known);
* ``pin_memory=True`` gathers into page-locked buffers (no extra host copy before a
  ``.to(device, non_blocking=True)``); ``device=`` (a CUDA device; others are refused)
  copies each batch there itself, asynchronously, the buffer reused once the copy ran.

Only ready batches (``batch_size`` given, not ``per_sample``). The feed itself stays usable
in a ``DataLoader`` (or torchdata's ``StatefulDataLoader``).

A pass is its iterator: dropping it (a ``break``, an exception out of the loop) or
:meth:`FeedLoader.close` ends it and stops its threads; ``iter()`` again, ``load_state_dict``,
``set_epoch`` with another epoch (the loader's or the feed's), or a pass of the feed itself
end the pass under way too (its iterator stops: it cannot go on in another epoch's or
resume point's state). The last batch handed out ends the pass (its resume point is used
up), as the last batch produced does for ``DataLoader`` workers. The loader runs in the
training process in place of a ``DataLoader``: inside a ``DataLoader`` worker it is refused
(iterate the feed there), and a forked process cannot go on with a pass its parent started
(the threads stayed in the parent; it starts its own). A loader pickles or copies as its
feed and settings, without the pass under way.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(10, dtype=np.float32)}, out, batch_size=4)
    >>> loader = dataset.open(out).to_torch(batch_size=4).loader(threads=2)
    >>> [b["x"].tolist() for b in loader]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    >>> batches = iter(loader)
    >>> _ = next(batches)
    >>> loader.state_dict()["samples"]
    4
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import get_worker_info

from ...core.errors import InvalidArgumentError, InvalidTypeError
from .options import FeedOptions
from .order import check_int
from .torch_batches import Gather
from .torch_ring import Buffer, Ring
from .torch_sync import Shared

__all__ = ["FeedLoader", "default_threads"]

NDArray = np.ndarray[Any, Any]
MAX_THREADS = 256


class LoaderFeed(Protocol):
    """What the loader drives of a :class:`~tensorfile.dataset.torch.TorchIterable` (its
    pass as a plan, its gatherer, its position and resume state)."""

    options: FeedOptions
    epoch: int
    _next_step: int | None
    _shared: Shared

    def __len__(self) -> int: ...
    def set_epoch(self, epoch: int) -> None: ...
    def state_dict(self, samples: int | None = None) -> dict[str, Any]: ...
    def load_state_dict(self, state: Any) -> None: ...
    def _begin(self, wid: int, workers: int) -> tuple[int, int, int]: ...
    def _pass(
        self, start: tuple[int, int, int], workers: int, chunk: int
    ) -> Iterator[list[tuple[int, NDArray]]]: ...
    def _gather(self, *, shared: bool = False) -> Gather: ...
    def _end_pass(self) -> None: ...
    def _publish(self) -> None: ...


def default_threads() -> int:
    """Gathering threads when not given: half the cores this process may use, 2 to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not on Linux)
        cores = os.cpu_count() or 2
    return max(2, min(8, cores // 2))


def _device(device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidArgumentError(f"device {device!r} is not a torch device: {exc}") from None
    if dev.type not in ("cpu", "cuda"):  # (meta: no data; others: untested stream rules)
        raise InvalidArgumentError(
            f"device={device!r}: the loader copies batches to 'cuda' devices only (or keeps "
            f"them on the cpu); move them to {dev.type!r} in the loop"
        )
    return None if dev.type == "cpu" else dev


class FeedLoader:
    """The batches of ``feed`` (a :class:`~tensorfile.dataset.torch.TorchIterable` of
    ready batches) gathered by ``threads`` threads (default :func:`default_threads`; 0: in
    the calling thread, when the loop asks for the batch), ``depth`` batches ahead of the
    loop (default twice the threads, at least 1), into reused buffers
    (see the module docstring); ``pin_memory``: page-locked buffers (needs CUDA);
    ``device``: each batch copied there (``non_blocking``) before it is handed out.
    Made by :meth:`TorchIterable.loader <tensorfile.dataset.torch.TorchIterable.loader>`.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> _ = dataset.write({"x": np.arange(6, dtype=np.int64)}, out, batch_size=2)
        >>> feed = dataset.open(out).to_torch(batch_size=2, shuffle=True, seed=1)
        >>> loader = feed.loader()
        >>> len(loader), sorted(v for b in loader for v in b["x"].tolist())
        (3, [0, 1, 2, 3, 4, 5])
    """

    def __init__(
        self,
        feed: LoaderFeed,
        *,
        threads: int | None = None,
        depth: int | None = None,
        pin_memory: bool = False,
        device: Any = None,
    ) -> None:
        if not feed.options.batched:
            raise InvalidArgumentError(
                "FeedLoader hands out ready batches: make the feed with batch_size=N "
                "(and not per_sample=True)"
            )
        if not isinstance(pin_memory, bool):
            raise InvalidTypeError(f"pin_memory must be a bool, got {type(pin_memory).__name__}")
        self.feed = feed
        self.threads = (
            default_threads() if threads is None else check_int(threads, "threads", 0, MAX_THREADS)
        )
        self.depth = (
            max(1, 2 * self.threads) if depth is None else check_int(depth, "depth", 1, 4096)
        )
        self.device = _device(device)
        cuda = self.device is not None and self.device.type == "cuda"
        if (pin_memory or cuda) and not torch.cuda.is_available():
            what = "pin_memory=True" if pin_memory else f"device={device!r}"
            raise InvalidArgumentError(f"{what} needs CUDA, and torch sees no CUDA device here")
        self.pin = pin_memory or cuda
        # the pass under way, weakly: a pass the loop dropped (a break) ends at once, its
        # threads stopped, without waiting for the next pass or close()
        self._current: weakref.ref[Generator[dict[str, Any], None, None]] | None = None
        # kept from pass to pass: the shards' mapped arrays (no page-table faults again in
        # the next epoch) and the buffers (no fresh memory again); made in process _owner
        self._gather: Gather | None = None
        self._ring: Ring | None = None
        self._owner = 0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        # (the pass, its threads, the arrays and buffers stay with this object)
        state.update(_current=None, _gather=None, _ring=None, _owner=0)
        return state

    # -- the feed's epoch and resume state --------------------------------------------------

    def __len__(self) -> int:
        """The batches of this rank in the next pass (the feed's ``len``)."""
        return len(self.feed)

    def set_epoch(self, epoch: int) -> None:
        """The feed's :meth:`~tensorfile.dataset.torch.TorchIterable.set_epoch` (a pass
        under way in another epoch is ended first)."""
        before = self.feed.epoch
        self.feed.set_epoch(epoch)  # (checked first: a refused epoch leaves the pass alone)
        if self.feed.epoch != before:
            self.close()

    def state_dict(self, samples: int | None = None) -> dict[str, Any]:
        """The feed's resume state at the batches this loader handed out (exact: no
        ``samples=`` needed, though it is taken as the feed takes it). Refused, as the
        feed's, when ``DataLoader`` workers iterated the feed since this loader's last pass
        started (their loop's position is not known here).

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(8, dtype=np.int8)}, out, batch_size=4)
            >>> loader = dataset.open(out).to_torch(batch_size=2).loader()
            >>> it = iter(loader); _ = next(it), next(it)
            >>> state = loader.state_dict()
            >>> again = dataset.open(out).to_torch(batch_size=2).loader()
            >>> again.load_state_dict(state)
            >>> [b["x"].tolist() for b in again]
            [[4, 5], [6, 7]]
        """
        return self.feed.state_dict(samples)

    def load_state_dict(self, state: Any) -> None:
        """The feed's :meth:`~tensorfile.dataset.torch.TorchIterable.load_state_dict` (a
        pass under way is ended first)."""
        self.feed.load_state_dict(state)  # (checked first: a refused state leaves the pass)
        self.close()

    # -- the pass ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if get_worker_info() is not None:
            raise InvalidArgumentError(
                "FeedLoader takes the place of a DataLoader, in the training process; inside a "
                "DataLoader worker each worker would give the whole rank, and the batches it "
                "sends would be overwritten by later ones: iterate the feed itself there "
                "(DataLoader(feed, batch_size=None, num_workers=k))"
            )
        self.close()  # one pass at a time: a new one ends the one under way
        run = self._run(self.feed._begin(0, 1))  # started now: state_dict() says so
        if self.feed._shared.ran:  # DataLoader workers ran: the position is this pass's again
            self.feed._publish()
        self._current = weakref.ref(run)
        return run

    def close(self) -> None:
        """End the pass under way (its threads stop; the batches handed out stay valid)."""
        run = self._current() if self._current is not None else None
        if run is not None:
            run.close()
        self._current = None

    def _run(self, start: tuple[int, int, int]) -> Generator[dict[str, Any], None, None]:
        feed = self.feed
        pid = os.getpid()
        if feed._next_step != start[2]:  # the feed moved before the pass began (set_epoch...)
            return
        plan = _Plan(feed._pass(start, 1, 1))
        if not plan:  # nothing for this rank
            feed._end_pass()
            return
        if self._gather is None or self._ring is None or self._owner != pid:
            # (made again in a forked process: a lock of the parent's may be held for good)
            self._gather = feed._gather()
            self._ring = Ring(self._gather.columns, feed.options.unit, self.depth + 2, self.pin)
            self._owner = pid
        gather, ring = self._gather, self._ring
        pending: deque[tuple[int, int, Buffer, Future[dict[str, Any]]]] = deque()
        pool: ThreadPoolExecutor | _Inline = (
            ThreadPoolExecutor(self.threads, "tensorfile-feed") if self.threads else _Inline()
        )
        try:
            while True:
                for t, ids in plan.take(self.depth - len(pending)):
                    buf = ring.take()
                    pending.append((t, ids.size, buf, pool.submit(_fill, gather, ring, buf, ids)))
                if not pending:
                    return
                t, n, buf, job = pending.popleft()
                filled = job.result()
                batch = ring.hand_out(buf, n, filled)
                del filled, job
                if self.device is not None:
                    batch = self._to_device(batch, buf)
                feed._next_step = t + 1
                if not pending and not plan:  # the last batch: the pass ran to its end
                    feed._end_pass()
                yield batch
                del batch
                if os.getpid() != pid:
                    raise InvalidArgumentError(
                        f"this pass was started in process {pid}, and this process is a fork "
                        "of it: the pass's threads stayed there; start a pass of its own "
                        "(iter(loader), from the feed's resume point)"
                    )
                if feed._next_step != t + 1:  # set_epoch, load_state_dict or another pass
                    return
        finally:
            for *_, job in pending:
                job.cancel()
            if os.getpid() == pid:  # (a forked process has no threads to wait for)
                pool.shutdown(wait=True, cancel_futures=True)

    def _to_device(self, batch: dict[str, Any], buf: Buffer) -> dict[str, Any]:
        """``batch`` copied to the device (tensors; the keys stay), the copy queued on the
        current stream; ``buf`` is reused after it ran."""
        moved = {
            c: v.to(self.device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for c, v in batch.items()
        }
        # (a cuda device: the only one _device lets through) on the stream the copies ran
        # on: the device's, not the current device's
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(self.device))
        buf.event = event
        return moved


class _Plan:
    """The pieces ``(step, ids)`` of a pass (what ``TorchIterable._pass`` yields, a piece at
    a time), looked one ahead: false once none is left."""

    def __init__(self, pieces: Iterator[list[tuple[int, NDArray]]]) -> None:
        self._pieces = pieces
        self._next = next(pieces, None)

    def __bool__(self) -> bool:
        return self._next is not None

    def take(self, k: int) -> list[tuple[int, NDArray]]:
        """Up to ``k`` pieces."""
        out: list[tuple[int, NDArray]] = []
        while len(out) < k and self._next is not None:
            out.extend(self._next)
            self._next = next(self._pieces, None)
        return out


class _Inline:
    """``threads=0``: each batch gathered in the calling thread when it is asked for."""

    def submit(self, fn: Any, *args: Any) -> Future[dict[str, Any]]:
        done: Future[dict[str, Any]] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # (raised where the batch is taken, as from a thread)
            done.set_exception(exc)
        return done

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Nothing to stop."""


def _fill(gather: Gather, ring: Ring, buf: Buffer, ids: NDArray) -> dict[str, Any]:
    """One batch gathered into ``buf`` (run in a loader thread): ``{column: filled array}``
    and ``"key"``: the keys of a key-value dataset."""
    views: dict[str, Any] = ring.views(buf, int(ids.size))
    keys = gather.fill(ids, views)
    if keys is not None:
        views["key"] = keys
    return views
