"""The buffers a :class:`~tensorfile.dataset.torch.FeedLoader` gathers batches into, reused
from batch to batch instead of fresh memory for each (:class:`Ring`).

A batch handed out is a set of views of one :class:`Buffer` (a uint8 tensor per column, the
size of a full batch). A column's memory comes back to the ring **only when nothing refers
to it any more**: the ring compares the use count of the column's storage (every tensor,
view, slice or numpy array over it holds one) and the references to its Python storage
object (a ``.untyped_storage()`` or ``.storage()`` kept, which the first count does not
see) with their counts when idle. So there is no lifetime rule to follow: a batch kept (or a
slice of it, or ``.numpy()`` of it) keeps its memory out of the ring, and the ring makes
another buffer when none is free; a batch dropped lets its buffer be overwritten by a later
batch. A column kept alone (``labels.append(batch["label"])``) becomes the caller's: the
ring puts fresh memory in its place and reuses the rest of the buffer, so what the caller
keeps costs what it would with ``DataLoader``. Memory moved into shared memory (a batch put
on a ``torch.multiprocessing`` queue: another process may map it, unseen) is never reused.
The ring watches the last few buffers handed out (:attr:`Ring.track`); a buffer the caller
still holds past them is left to the caller (freed when dropped, not reused).

Pinned buffers (``pin=True``) that came back are also made to wait for the copies already
queued on the current CUDA stream (a ``.to(device, non_blocking=True)`` of the batch, whose
source must not change until it ran); a copy queued on another stream, or to another
device than the current one, must be waited for
(``torch.cuda.current_stream().wait_stream(s)``, or a synchronize) before the batch is
dropped. The loader's own copies (``device=``) are waited for on that device's stream.

Bit-packed columns (F4, F6) are packed into a fresh tensor for each batch (a copy), as
:class:`~tensorfile.dataset.feed.torch_batches.Gather` does.

Example:
    >>> import torch
    >>> from tensorfile.dataset.feed.torch_batches import Column
    >>> ring = Ring({"x": Column("F32", [2])}, rows=4, keep=2)
    >>> buf = ring.take()
    >>> views = ring.views(buf, 3)
    >>> views["x"][:] = 1.5
    >>> batch = ring.hand_out(buf, 3, views)
    >>> del views  # (the loader's fill drops its views too)
    >>> batch["x"].tolist()[0], buf.free()
    ([1.5, 1.5], False)
    >>> del batch
    >>> buf.free()
    True
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

from .torch_batches import Column

__all__ = ["Buffer", "Ring"]

NDArray = np.ndarray[Any, Any]


def _uses(raw: torch.Tensor) -> tuple[int, int]:
    """The references to the storage of ``raw``: its use count (its tensors, views, numpy
    arrays) and those of its Python storage object (a kept ``untyped_storage()``: torch keeps
    one such object per storage, which adds nothing to the first count once it exists)."""
    storage = raw.untyped_storage()
    return int(torch._C._storage_Use_Count(storage._cdata)), sys.getrefcount(storage)


class Buffer:
    """One batch's memory: a uint8 tensor per (not bit-packed) column, of ``rows`` rows."""

    def __init__(self, columns: dict[str, Column], rows: int, pin: bool) -> None:
        self.pin = pin
        self.raw: dict[str, torch.Tensor] = {}
        self.idle: dict[str, tuple[int, int]] = {}
        for name, col in columns.items():
            if not col.packed:
                self._new(name, rows * col.row_bytes)
        self.event: Any = None  # a CUDA event the next writer waits for (pinned buffers)

    def _new(self, name: str, nbytes: int) -> None:
        raw = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin)
        self.raw[name] = raw
        self.idle[name] = _uses(raw)

    def held(self) -> list[str]:
        """The columns whose memory something outside the ring refers to."""
        out = []
        for name, raw in self.raw.items():
            uses, idle = _uses(raw), self.idle[name]
            if uses[0] > idle[0] or uses[1] > idle[1]:
                out.append(name)
        return out

    def shared(self) -> list[str]:
        """The columns moved into shared memory (a batch put on a ``torch.multiprocessing``
        queue): another process may map them, unseen."""
        return [name for name, raw in self.raw.items() if raw.is_shared()]  # type: ignore[no-untyped-call]

    def free(self) -> bool:
        """Whether nothing outside the ring refers to this buffer's memory."""
        return not self.held() and not self.shared()

    def release(self, names: list[str]) -> None:
        """Leave the memory of columns ``names`` to whoever holds it: fresh memory in its
        place."""
        for name in names:
            self._new(name, self.raw[name].numel())

    def wait(self) -> None:
        """Wait for the device copies queued from this buffer before it came back."""
        if self.event is not None:
            self.event.synchronize()
            self.event = None


class Ring:
    """Buffers of ``rows`` rows of ``columns`` (:class:`~.torch_batches.Column`), reused;
    at most ``keep`` kept when they come back (more are made while the caller holds more
    batches, and dropped when they come back); ``pin``: page-locked (for CUDA copies)."""

    def __init__(self, columns: dict[str, Column], rows: int, keep: int, pin: bool = False):
        self.columns = columns
        self.rows = rows
        self.keep = max(1, keep)
        self.pin = pin
        self.track = max(64, 4 * self.keep)
        """buffers handed out that are watched for their return (the latest: a caller that
        keeps its last few batches still gets buffers back; each take polls them all)"""
        self._free: list[Buffer] = []
        self._out: list[Buffer] = []  # handed out (a buffer being filled is in neither)

    def take(self) -> Buffer:
        """A buffer to fill (it is the caller's until :meth:`hand_out`): one that came
        back, else a new one."""
        self._reclaim()
        return self._free.pop() if self._free else Buffer(self.columns, self.rows, self.pin)

    def _reclaim(self) -> None:
        out: list[Buffer] = []
        for buf in self._out:
            held = buf.held()
            if held and len(held) == len(buf.raw):  # the whole batch is still held
                out.append(buf)
                continue
            # columns kept alone, or shared with another process: theirs now
            buf.release(sorted({*held, *buf.shared()}))
            if self.pin and buf.event is None and torch.cuda.is_available():
                # (an event already there: the loader's own copy, device=, the only one)
                buf.event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                buf.event.record()  # after the copies the caller queued from it
            if len(self._free) < self.keep:
                self._free.append(buf)
        self._out = out

    def views(self, buf: Buffer, n: int) -> dict[str, NDArray]:
        """``{column: numpy array of n rows}`` to fill: views of ``buf`` (fresh arrays for
        bit-packed columns). Waits for the buffer's pending device copies first."""
        buf.wait()
        out: dict[str, NDArray] = {}
        for name, col in self.columns.items():
            shape = (n, *col.shape)
            if col.packed:
                out[name] = np.empty(shape, dtype=col.dt.numpy)
                continue
            out[name] = buf.raw[name][: n * col.row_bytes].numpy().view(col.dt.numpy).reshape(shape)
        return out

    def hand_out(self, buf: Buffer, n: int, filled: dict[str, NDArray]) -> dict[str, Any]:
        """The batch of ``n`` rows filled into ``buf`` (``filled``: what :meth:`views`
        gave) as ``{column: torch tensor}``, views of the buffer's memory (and ``"key"``, a
        key-value dataset's keys, when ``filled`` has them); the buffer comes back to the
        ring once nothing refers to them."""
        self._out.append(buf)
        if len(self._out) > self.track:  # the oldest, held all along: left to the caller
            del self._out[0]
        batch: dict[str, Any] = {}
        for name, col in self.columns.items():
            if col.packed:
                batch[name] = col.finish(filled[name])
                continue
            nbytes = n * col.row_bytes
            batch[name] = buf.raw[name][:nbytes].view(col.tdt).reshape(n, *col.shape)
        if "key" in filled:
            batch["key"] = filled["key"]
        return batch
