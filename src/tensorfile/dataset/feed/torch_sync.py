"""What a :class:`~tensorfile.dataset.torch.TorchIterable` shares with its copies in
DataLoader worker processes: a few integers in shared memory, made with the feed.

A DataLoader with ``num_workers > 0`` iterates copies of the feed in worker processes (forked:
inherited; spawned: pickled into them), so the main process's object sees none of their
progress, and no call of the DataLoader in the main process tells it which batches the
training loop has taken (the workers run ahead by ``prefetch_factor`` batches each, and the
batches they produced are not the batches consumed). What it can know, through this block:

- **the workers ran** (``ran``): a worker sets it when it starts a pass; the main process
  clears it when the position becomes known again (``set_epoch`` to another epoch,
  ``load_state_dict``, an iteration of its own). While it is set, the main process's count
  says nothing and ``state_dict()`` without ``samples=`` is refused;
- **the epoch and resume point the main process last set** (``publish``), with a generation
  number: a worker whose copy is of an older generation (``persistent_workers=True`` keeps the
  copy the worker started with) takes them up at the start of its next pass, so ``set_epoch``
  and ``load_state_dict`` in the main process reach persistent workers too.

The block is a torch tensor in shared memory: torch's reductions hand it to spawned workers as
the same memory, forked workers inherit it, and any other pickling (``copy.deepcopy``) copies
its values.

Example:
    >>> s = Shared()
    >>> s.ran, s.current()
    (False, (0, 0, 0))
    >>> s.mark_ran(); s.ran
    True
    >>> s.publish(epoch=3, resume=40), s.ran, s.current()
    (1, False, (1, 3, 40))
"""

from __future__ import annotations

import torch

__all__ = ["Shared"]

_RAN, _GEN, _EPOCH, _RESUME = range(4)


class Shared:
    """The shared block of one feed and its worker copies (see the module docstring)."""

    def __init__(self) -> None:
        self.values = torch.zeros(4, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    @property
    def ran(self) -> bool:
        """Whether DataLoader workers started a pass since the position was last known."""
        return bool(self.values[_RAN])

    def mark_ran(self) -> None:
        """Called by a worker starting a pass."""
        self.values[_RAN] = 1

    def clear_ran(self) -> None:
        """Called by the main process when its own count is exact again."""
        self.values[_RAN] = 0

    def publish(self, epoch: int, resume: int) -> int:
        """The main process set the epoch and resume point: stored under a new generation
        (returned), and the workers' earlier passes forgotten."""
        gen = int(self.values[_GEN]) + 1
        self.values[_EPOCH] = epoch
        self.values[_RESUME] = resume
        self.values[_RAN] = 0
        self.values[_GEN] = gen
        return gen

    def current(self) -> tuple[int, int, int]:
        """``(generation, epoch, resume)`` as the main process last published them."""
        gen, epoch, resume = self.values[_GEN : _RESUME + 1].tolist()
        return int(gen), int(epoch), int(resume)
