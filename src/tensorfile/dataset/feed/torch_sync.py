"""What a :class:`~tensorfile.dataset.torch.TorchIterable` shares with its copies in
DataLoader worker processes: a few integers in shared memory.

A DataLoader with ``num_workers > 0`` iterates copies of the feed in worker processes (forked:
inherited; spawned: pickled into them), so the main process's object sees none of their
progress, and no call of the DataLoader in the main process tells it which batches the
training loop has taken (the workers run ahead by ``prefetch_factor`` batches each, and the
batches they produced are not the batches consumed). What it can know, through this block:

- **the workers ran** (``ran``): a worker sets it when it starts a pass; the main process
  clears it when the position becomes known again (``set_epoch`` to another epoch,
  ``load_state_dict``; not an iteration of its own, which says nothing of what the workers'
  batches were). While it is set, the main process's count says nothing and
  ``state_dict()`` without ``samples=`` is refused;
- **the epoch and resume point the main process last set** (``publish``), with a generation
  number: a worker whose copy is of an older generation (``persistent_workers=True`` keeps the
  copy the worker started with) takes them up at the start of its next pass, so ``set_epoch``
  and ``load_state_dict`` in the main process reach persistent workers too;
- **which workers ran their share of a pass from that resume point to its end** (``ended``,
  one slot per worker id, each written by its own worker only) and, once all of one pass's
  workers did, that the resume point is **used up** (``used``): as a pass that ran to its
  end in the main process uses it up, the next pass (fresh workers forked from the main
  process again, whose own copy never moved) starts the epoch from its beginning. A worker
  id past the slots (more than 504 workers) is not tracked: its passes never use the resume
  point up. A worker's share "ran to its end" once the worker *produced* it: no worker, and
  no code of the feed in the main process, can see which batches the training loop took
  (the DataLoader calls nothing of the feed in the main process, and its workers are asked
  for their next batch ``prefetch_factor`` batches ahead of the loop and stopped the same way
  whether the loop ran to the end or broke off), so a pass broken off within its last
  ``prefetch_factor x num_workers`` batches may use the resume point up (review35m m01;
  loading the state again restores it).

**Memory.** The block is made with the feed as anonymous shared memory (``mmap`` of no
file): forked workers inherit it, and it holds no file descriptor, so a program may keep
thousands of feeds. A process that is not forked cannot reach it: when the feed is pickled
for another process (spawned or forkserver DataLoader workers, a multiprocessing queue:
multiprocessing's ``ForkingPickler``) a second block is made once, a torch tensor in shared
memory (one file descriptor, which torch hands to the other process), and from then on the
main process writes both and reads the workers' ``ran`` from either. Any other pickling
(``copy.deepcopy``, ``pickle.dumps``) copies the values into a new block of the copy's own.
A block that cannot be made (no file descriptor left, no memory) raises
:class:`~tensorfile.errors.SourceError`.

Example:
    >>> s = Shared()
    >>> s.ran, s.current()
    (False, (0, 0, 0))
    >>> s.mark_ran(); s.ran
    True
    >>> s.publish(epoch=3, resume=40), s.ran, s.current()
    (1, False, (1, 3, 40))
    >>> s.ended(worker=0, workers=2, gen=1), s.used(1)
    (None, False)
    >>> s.ended(worker=1, workers=2, gen=1), s.used(1), s.used(0)
    (None, True, False)
"""

from __future__ import annotations

import mmap
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from ...core.errors import SourceError

__all__ = ["Shared"]

_RAN, _GEN, _EPOCH, _RESUME, _USED, _WORKERS = range(6)
_FIELDS = 8  # (the fields, then one slot per worker id)
_SIZE = 512  # int64 values: one page
_SLOTS = _SIZE - _FIELDS
_NONE = -1  # (no generation)
NDArray = np.ndarray[Any, Any]


def _initial() -> list[int]:
    values = [0] * _SIZE
    values[_USED] = _NONE
    values[_FIELDS:] = [_NONE] * _SLOTS
    return values


def _anonymous(values: list[int] | None = None) -> tuple[mmap.mmap, NDArray]:
    """A block of anonymous shared memory (inherited by forked processes, no descriptor)."""
    try:
        memory = mmap.mmap(-1, _SIZE * 8, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    except OSError as exc:
        raise SourceError(
            f"cannot map the few bytes of shared memory a torch feed shares with its "
            f"DataLoader workers: {exc} (too many feeds alive, or the process's memory "
            "mappings at their limit)"
        ) from exc
    block: NDArray = np.frombuffer(memory, dtype=np.int64)
    if values is not None:
        block[:] = values
    return memory, block


class Shared:
    """The shared block of one feed and its worker copies (see the module docstring)."""

    def __init__(self) -> None:
        self._memory: mmap.mmap | None  # the anonymous block (none in a spawned copy)
        self._memory, first = _anonymous(_initial())
        self._tensor: torch.Tensor | None = None  # the block other processes can open
        self._blocks: list[NDArray] = [first]

    @classmethod
    def _of_tensor(cls, tensor: torch.Tensor) -> Shared:
        """The copy in a process the feed was pickled into: the tensor's block alone."""
        self = cls.__new__(cls)
        self._memory, self._tensor, self._blocks = None, tensor, [tensor.numpy()]
        return self

    @classmethod
    def _of_values(cls, values: list[int]) -> Shared:
        self = cls.__new__(cls)
        self._memory, first = _anonymous(values)
        self._tensor, self._blocks = None, [first]
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        # copy.deepcopy, pickle: the copy's own block, with the values of this one
        return (Shared._of_values, ([int(v) for v in self._blocks[0]],))

    def for_process(self) -> torch.Tensor:
        """The block as a torch tensor in shared memory, made on the first call (pickled
        for another process; see the module docstring)."""
        if self._tensor is None:
            try:
                tensor = torch.tensor(self._blocks[0].tolist(), dtype=torch.int64)
                tensor.share_memory_()  # type: ignore[no-untyped-call]
            except (RuntimeError, OSError) as exc:
                raise SourceError(
                    "cannot make the shared memory block a torch feed shares with DataLoader "
                    f"workers started by spawn or forkserver: {exc} (raise the open files "
                    "limit, `ulimit -n`, or use fewer feeds with such workers)"
                ) from exc
            self._tensor = tensor
            self._blocks.append(tensor.numpy())
        return self._tensor

    def _set(self, index: int, value: int) -> None:
        for block in self._blocks:
            block[index] = value

    @property
    def ran(self) -> bool:
        """Whether DataLoader workers started a pass since the position was last known."""
        return any(bool(block[_RAN]) for block in self._blocks)

    def mark_ran(self) -> None:
        """Called by a worker starting a pass."""
        self._set(_RAN, 1)

    def publish(self, epoch: int, resume: int) -> int:
        """The main process set the epoch and resume point: stored under a new generation
        (returned), and the workers' earlier passes forgotten."""
        gen = int(self._blocks[0][_GEN]) + 1
        self._set(_EPOCH, epoch)
        self._set(_RESUME, resume)
        self._set(_RAN, 0)
        self._set(_USED, _NONE)
        self._set(_WORKERS, 0)
        self._set(_GEN, gen)
        return gen

    def ended(self, worker: int, workers: int, gen: int) -> None:
        """Called by worker ``worker`` of ``workers`` that ran its share of a pass from the
        resume point of generation ``gen`` to its end (each worker writes its own slot:
        no two processes write one value, but the same)."""
        if not 0 <= worker < workers <= _SLOTS:
            return  # (not tracked: see the module docstring)
        self._set(_FIELDS + worker, _pass_of(gen, workers))
        self._set(_WORKERS, workers)
        self.used(gen)

    def use_up(self, gen: int) -> None:
        """The resume point of generation ``gen`` is used up (a pass in the main process
        ran to its end)."""
        self._set(_USED, gen)

    def used(self, gen: int) -> bool:
        """Whether a pass from the resume point of generation ``gen`` ran to its end: in
        the main process, or in every worker of one DataLoader pass (then recorded)."""
        for block in self._blocks:
            if int(block[_USED]) == gen:
                return True
            workers = int(block[_WORKERS])
            slots = block[_FIELDS : _FIELDS + workers]
            if 0 < workers <= _SLOTS and bool(np.all(slots == _pass_of(gen, workers))):
                self.use_up(gen)
                return True
        return False

    def current(self) -> tuple[int, int, int]:
        """``(generation, epoch, resume)`` as the main process last published them."""
        gen, epoch, resume = (int(v) for v in self._blocks[0][_GEN : _RESUME + 1])
        return gen, epoch, resume


def _pass_of(gen: int, workers: int) -> int:
    """A worker slot's value: a pass of ``workers`` workers from generation ``gen`` (one
    of another number of workers, a pass of another DataLoader, never matches it)."""
    return gen * (_SLOTS + 1) + workers


def _reduce_for_process(shared: Shared) -> tuple[Any, ...]:
    return (Shared._of_tensor, (shared.for_process(),))


ForkingPickler.register(Shared, _reduce_for_process)
