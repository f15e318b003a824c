"""The buffers a :class:`~tensorfile.dataset.torch.FeedLoader` gathers batches into, reused
from batch to batch instead of fresh memory for each (:class:`Ring`).

A batch handed out is a set of views of one :class:`Buffer` (a uint8 tensor per column, the
size of a full batch). The buffer comes back to the ring **only when nothing refers to its
memory any more**: the ring compares the use count of each column's storage (every tensor,
view, slice or numpy array over it holds one) with the count when idle. So there is no
lifetime rule to follow: a batch kept (or a slice of it, or ``.numpy()`` of it) keeps its
buffer out of the ring, and the ring makes another buffer when none is free; a batch dropped
lets its buffer be overwritten by a later batch. Pinned buffers (``pin=True``) that came
back are also made to wait for the copies already queued on the current CUDA stream (a
``.to(device, non_blocking=True)`` of the batch, whose source must not change until it ran).

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

import math
from typing import Any

import numpy as np
import torch

from .torch_batches import Column

__all__ = ["Buffer", "Ring"]

NDArray = np.ndarray[Any, Any]


def _uses(raw: torch.Tensor) -> int:
    """How many references the storage of ``raw`` has (its tensors, views, numpy arrays)."""
    return int(torch._C._storage_Use_Count(raw.untyped_storage()._cdata))


class Buffer:
    """One batch's memory: a uint8 tensor per (not bit-packed) column, of ``rows`` rows."""

    def __init__(self, columns: dict[str, Column], rows: int, pin: bool) -> None:
        self.raw: dict[str, torch.Tensor] = {}
        for name, col in columns.items():
            if col.packed:
                continue
            nbytes = rows * col.row_bytes
            self.raw[name] = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        self.idle = {name: _uses(raw) for name, raw in self.raw.items()}
        self.event: Any = None  # a CUDA event the next writer waits for (pinned buffers)

    def free(self) -> bool:
        """Whether nothing outside the ring refers to this buffer's memory."""
        return all(_uses(raw) <= self.idle[name] for name, raw in self.raw.items())

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
        self._free: list[Buffer] = []
        self._out: list[Buffer] = []  # handed out (a buffer being filled is in neither)

    def take(self) -> Buffer:
        """A buffer to fill (it is the caller's until :meth:`hand_out`): one that came
        back, else a new one."""
        self._reclaim()
        return self._free.pop() if self._free else Buffer(self.columns, self.rows, self.pin)

    def _reclaim(self) -> None:
        back = [b for b in self._out if b.free()]
        if not back:
            return
        self._out = [b for b in self._out if not b.free()]
        for buf in back:
            if self.pin and torch.cuda.is_available():
                buf.event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                buf.event.record()  # after the copies the caller queued from it
            if len(self._free) < self.keep:
                self._free.append(buf)

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
            nbytes = math.prod(shape) * col.itemsize
            out[name] = buf.raw[name][:nbytes].numpy().view(col.dt.numpy).reshape(shape)
        return out

    def hand_out(self, buf: Buffer, n: int, filled: dict[str, NDArray]) -> dict[str, Any]:
        """The batch of ``n`` rows filled into ``buf`` (``filled``: what :meth:`views`
        gave) as ``{column: torch tensor}``, views of the buffer's memory; the buffer comes
        back to the ring once nothing refers to them."""
        self._out.append(buf)
        batch: dict[str, Any] = {}
        for name, col in self.columns.items():
            if col.packed:
                batch[name] = col.finish(filled[name])
                continue
            nbytes = n * col.row_bytes
            batch[name] = buf.raw[name][:nbytes].view(col.tdt).reshape(n, *col.shape)
        return batch
