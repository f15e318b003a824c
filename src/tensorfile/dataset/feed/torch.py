"""A dataset's samples for PyTorch: an ``IterableDataset`` that feeds training in an order
independent of the world size, resumes mid-epoch from a small JSON state, and yields ready
batches; and a map-style dataset for the default collate.

**Order** (:mod:`tensorfile.dataset.order`). An epoch's order ``S`` of the ``N`` samples is
a function of the dataset, ``seed`` and the epoch only: without ``shuffle`` the manifest's
order; with it, the shards permuted, cut into ``min(partitions, max(1, N // shuffle_block))``
canonical partitions (``partitions`` default 64, never derived from the world size; never
finer than the shuffle block, so a small dataset is shuffled whole), each partition shuffled
in blocks of ``shuffle_block`` samples and the partitions interleaved ``B`` samples at a
time. Changing
the number of nodes, ranks or workers between runs changes neither which samples an epoch
visits nor their global order. The same seed and epoch give the same order run after run;
call :meth:`TorchIterable.set_epoch` before each epoch (it reaches the DataLoader's workers,
``persistent_workers=True`` ones too, at their next pass: :mod:`.torch_sync`).

**Split** (:mod:`tensorfile.dataset.feed.torch_state`). Ranks consume ``S`` in lockstep steps:
step ``t`` is ``W*B`` positions (``W`` ranks, ``B`` the per-rank batch) and rank ``r`` takes
the contiguous ``r``-th piece of ``B``. DataLoader worker ``w`` of ``K`` produces the steps
``t ≡ w (mod K)`` of its rank, the order DataLoader's round-robin delivers them in, so after
``s`` steps on every rank the samples consumed are exactly ``S[base : base + s*W*B]``
whatever ``W`` and ``K``. ``rank``/``world_size`` default to ``torch.distributed``'s when it
is initialised, else 0 and 1. The tail: ``even=True`` (the default, what
``DistributedSampler`` does with ``drop_last``) gives every rank ``M // W`` of the ``M``
samples left (a last short step where each rank takes an equal piece) and drops the last
``M % W`` positions (a different few each epoch when shuffling); ``even="pad"`` gives
``ceil(M / W)`` each, repeating samples from the start of ``S``; ``even=False`` gives counts
that differ by at most one (a loop with a collective per step can hang on it:
pytorch/pytorch#141069). ``drop_last=True`` drops each rank's short last batch.

**Batches.** ``batch_size=N`` yields ready batches, ``{column: tensor of N rows}`` (a KV
dataset's ``"key"``: a list of str), for ``DataLoader(it, batch_size=None, num_workers=k)``:
gathered from the shards' mapped arrays with numpy indexing, no per-sample Python loop, and
inside a worker written straight into shared memory (:mod:`.torch_batches`). Without
``batch_size`` (or with ``per_sample=True``, where ``batch_size`` is a hint: the
DataLoader's batch size, which keeps the order above) it yields single samples for the
default or a custom collate. ``B`` is ``batch_size``, or 1.

**Resume.** :meth:`TorchIterable.state_dict` is small JSON: the dataset's identity (total,
shards, a digest of the shard paths and counts), the order's parameters, the epoch and
``samples``, the samples of the epoch consumed by all ranks together: the trainer's own
count when given (``state_dict(samples)``, as MosaicML Streaming's), else the object's
progress: in the main process (``num_workers=0``) its iteration so far; in the main process
after DataLoader workers ran, nothing (they run ahead of the training loop, and the main
process cannot see what the loop took): refused, naming ``samples=`` and
``StatefulDataLoader``, until :meth:`~TorchIterable.set_epoch` (another epoch) or
:meth:`~TorchIterable.load_state_dict` makes the position known again; inside a DataLoader
worker (torchdata's ``StatefulDataLoader`` asks there after every batch and hands each
worker its own state back) a lower bound that, maximised over a rank's workers, is exactly
what the main process received, plus the worker's position.
:meth:`TorchIterable.load_state_dict` takes one state (a worker's own, inside that worker of
the same layout: resumed exactly; elsewhere refused), a list of states or a
``StatefulDataLoader.state_dict()`` (globally, at the largest ``samples``), checks that it
is of this dataset and order, and continues the epoch at ``S[samples:]`` split among the
current ranks and workers (which may differ from the saved run's). Worker states of single
samples without the ``batch_size`` hint (several workers) bound nothing globally and refuse
a global resume. The main process's count rounds down to whole steps. Seeking costs
``O(shards)``. The state's epoch becomes the current one; :meth:`set_epoch` with another
epoch starts that one from its beginning, and a pass that ran to its end uses its resume
point up, in the main process or in all of one DataLoader pass's workers (fresh for each
pass, forked from the main process again, too), where "ran to its end" means that they
produced it: they cannot see what the loop took, so a pass broken off within its last
``prefetch_factor x num_workers`` batches may use it up (:mod:`.torch_sync`).

Every value arrives as the matching torch dtype: BF16 as ``torch.bfloat16``, F8 as torch's
float8 types, unsigned integers as torch's ``uint16``/``uint32``/``uint64``. Only the
``torch*`` modules of this package import torch.

Example:
    >>> import numpy as np, os, tempfile
    >>> from tensorfile import dataset
    >>> out = os.path.join(tempfile.mkdtemp(), "ds")
    >>> _ = dataset.write({"x": np.arange(5, dtype=np.float32)}, out, batch_size=2)
    >>> [s["x"].item() for s in TorchIterable(dataset.open(out))]
    [0.0, 1.0, 2.0, 3.0, 4.0]
    >>> opts = FeedOptions(shuffle=True, seed=1, rank=1, world_size=2)
    >>> it = TorchIterable(dataset.open(out), opts)
    >>> len(it), len(list(it))
    (2, 2)
    >>> it = dataset.open(out).to_torch(batch_size=2)  # to_torch: the options as keywords
    >>> batches = iter(it)
    >>> next(batches)["x"].tolist(), it.state_dict()["samples"]
    ([0.0, 1.0], 2)
    >>> again = TorchIterable(dataset.open(out), FeedOptions(batch_size=2))
    >>> again.load_state_dict(it.state_dict())
    >>> [b["x"].tolist() for b in again]
    [[2.0, 3.0], [4.0]]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as _TorchDataset
from torch.utils.data import IterableDataset, get_worker_info

from ...core import dtypes
from ...core.errors import InvalidArgumentError, InvalidTypeError
from ...frameworks.torch import from_numpy
from ..layout.manifest import ShardEntry
from .options import FeedOptions, check_rank
from .order import EpochOrder, SampleOrder, check_int
from .protocol import FeedDataset
from .torch_batches import Gather
from .torch_loader import FeedLoader
from .torch_state import FORMAT, Split, check_state, find_loader_states, make_state, shards_digest
from .torch_sync import Shared

__all__ = ["TorchIterable", "TorchMap"]

NDArray = np.ndarray[Any, Any]
_SAMPLE_CHUNK = 256  # per-sample mode: samples gathered at once


_UNKNOWN_POSITION = (
    "this feed was iterated by DataLoader worker processes, so the main process's object "
    "cannot know how many batches the training loop took (the workers run ahead of it by "
    "prefetch_factor batches each); a state from it would replay or skip samples. Pass the "
    "count: it.state_dict(samples=N), N the samples of this epoch all ranks consumed "
    "(batches taken x batch size x world size), or use torchdata's StatefulDataLoader and "
    "save loader.state_dict(). After set_epoch (another epoch) or load_state_dict the "
    "position is known again."
)


def _rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world_size = dist.get_world_size() if world_size is None else world_size
    rank = 0 if rank is None else rank
    world_size = 1 if world_size is None else world_size
    return rank, world_size


def _to_torch(value: Any) -> Any:
    if isinstance(value, str):
        return value
    arr = np.array(value, copy=True)
    return from_numpy(arr, dtypes.from_numpy(arr.dtype))


def _layout() -> tuple[int, int]:
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


class TorchIterable(IterableDataset):  # type: ignore[type-arg]
    """Samples or batches of a :class:`~tensorfile.dataset.Dataset` (any
    :class:`~tensorfile.dataset.torch.FeedDataset`) as torch tensors, split across
    ranks and workers, resumable (see the module docstring); ``options``: how
    (:class:`~tensorfile.dataset.torch.FeedOptions`, checked when made;
    :meth:`~tensorfile.dataset.Dataset.to_torch` makes it of its keywords)."""

    def __init__(self, dataset: FeedDataset, options: FeedOptions | None = None) -> None:
        opts = FeedOptions() if options is None else options
        if not isinstance(opts, FeedOptions):
            raise InvalidTypeError(f"options must be a FeedOptions, got {type(opts).__name__}")
        self.dataset = dataset
        self.options = opts
        check_rank(*self._where())
        self.counts = [s.samples for s in dataset.manifest.shards]
        self._total = self._length()
        self._digest = shards_digest([s.shard_path for s in dataset.manifest.shards], self.counts)
        self.epoch = 0
        self._resume = 0  # the global resume point: samples of the epoch consumed
        self._worker_resume: dict[str, int] | None = None  # a worker's exact position
        self._base = 0  # where the current (or last) iteration started
        self._next_step: int | None = None  # the next step it produces (None: not started)
        self._shared = Shared()  # with the copies in DataLoader workers (.torch_sync)
        self._gen = 0  # the generation of the shared epoch and resume point this copy has
        self._published = True  # whether its resume point is that generation's (not a worker's own)

    def __getstate__(self) -> dict[str, Any]:
        # pickled for DataLoader workers started by spawn/forkserver, where torch.distributed
        # is not initialised: they get the rank and world size the main process has now
        state = dict(self.__dict__)
        rank, world = self._where()
        state["options"] = replace(self.options, rank=rank, world_size=world)
        return state

    def _length(self) -> int:
        """``N``, the positions of an epoch (a mixture's: its draws, not its samples)."""
        return sum(self.counts)

    def _where(self) -> tuple[int, int]:
        """``(rank, world size)``: the options', else ``torch.distributed``'s, else 0 and 1."""
        return _rank(self.options.rank, self.options.world_size)

    # -- epochs and length ------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` for the next iterations (as ``DistributedSampler``),
        from its beginning; the epoch a state was just loaded for keeps its resume point.
        It reaches a DataLoader's workers, persistent ones too (at their next pass)."""
        epoch = check_int(epoch, "epoch", 0)
        if epoch != self.epoch:  # a new epoch: nothing of it consumed yet
            self._resume, self._worker_resume = 0, None
            self._base, self._next_step = 0, None
            self.epoch = epoch
            self._publish()

    def _publish(self) -> None:
        """In the main process: the epoch and resume point just set reach the workers'
        copies (persistent ones at their next pass), and the position is known again."""
        if get_worker_info() is None:
            self._gen = self._shared.publish(self.epoch, self._resume)
            self._published = True
        else:  # (set in a worker: its own, until the main process publishes again)
            self._published = False

    def _adopt(self) -> None:
        """In a worker: take up the epoch and resume point the main process set after this
        copy was made (a persistent worker's copy), and say that workers ran."""
        gen, epoch, resume = self._shared.current()
        if gen != self._gen:
            self._gen, self.epoch = gen, epoch
            self._resume, self._worker_resume = resume, None
            self._published = True
        self._shared.mark_ran()

    def _sync(self) -> None:
        """Drop a published resume point that a pass used up in another process (DataLoader
        workers forked from the main process each pass copy its resume point, which their
        pass never moves here): the next pass starts the epoch from its beginning, as after
        a pass of the main process's own (:mod:`.torch_sync`)."""
        if self._published and self._resume and self._shared.used(self._gen):
            self._resume, self._worker_resume = 0, None

    def _split(self, base: int) -> Split:
        _, world = self._where()
        return Split(self._total, base, world, self.options.unit, self.options.even)

    def __len__(self) -> int:
        """Batches (batch mode) or samples this rank yields in the next iteration (all its
        workers together; from the resume point after :meth:`load_state_dict`)."""
        rank, _ = self._where()
        self._sync()
        split = self._split(self._resume)
        steps = split.rank_steps(rank, self.options.drop_last)
        if self.options.batched:
            return steps
        full = min(steps, split.full)
        last = 0
        if steps > split.full:
            lo, hi = split.piece(split.full, rank)
            last = hi - lo
        return full * self.options.unit + last

    # -- resume -----------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        return {
            "total": self._total,
            "shards": len(self.counts),
            "digest": self._digest,
            "seed": self.options.seed,
            "shuffle": self.options.shuffle,
            "partitions": self.options.partitions,
            "shuffle_block": self.options.shuffle_block,
            "batch_size": self.options.unit,
        }

    def _start(self, rank: int, world: int, wid: int, workers: int) -> tuple[int, int]:
        """``(base, first step)`` of this worker's next iteration."""
        self._sync()
        w = self._worker_resume
        if w is not None and (w["rank"], w["world_size"], w["id"], w["workers"]) == (
            rank,
            world,
            wid,
            workers,
        ):
            return w["base"], w["next_step"]
        return self._resume, wid

    def state_dict(self, samples: int | None = None) -> dict[str, Any]:
        """The resume state (small, JSON-able): see the module docstring. ``samples``: the
        samples of this epoch consumed by all ranks together, when the trainer counts them
        (batches taken x batch size x world size). Without it, in the main process after
        DataLoader workers iterated this feed, raises
        :class:`~tensorfile.errors.InvalidArgumentError`: the position is not known there.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(8, dtype=np.int8)}, out, batch_size=4)
            >>> it = dataset.open(out).to_torch(batch_size=2, shuffle=True)
            >>> s = it.state_dict(samples=6)
            >>> s["samples"], s["total"], s["shards"], s["format"]
            (6, 8, 2, 'tensorfile.dataset.torch/1')
        """
        fields = {**self._identity(), "epoch": self.epoch}
        if samples is not None:
            samples = check_int(samples, "samples", 0)
            if samples > self._total:
                raise InvalidArgumentError(
                    f"samples {samples} is more than the epoch holds ({self._total})"
                )
            return make_state(fields, samples)
        info = get_worker_info()
        if info is None and self._shared.ran:
            raise InvalidArgumentError(_UNKNOWN_POSITION)
        wid, workers = _layout()
        rank, world = self._where()
        if self._next_step is None:
            base, next_step = self._start(rank, world, wid, workers)
        else:
            base, next_step = self._base, self._next_step
        split = self._split(base)
        done = base + split.consumed(next_step - workers + 1, self.options.drop_last)
        if info is None:
            return make_state(fields, done)
        worker = {"rank": rank, "world_size": world, "id": wid, "workers": workers,
                  "base": base, "next_step": next_step}  # fmt: skip
        # single samples without the batch_size hint, several workers: the DataLoader takes
        # its batch from one worker, not one step from each in turn, so ``samples`` bounds
        # nothing globally; only this worker's exact position is of use
        exact = self.options.batched or self.options.batch_size is not None or workers == 1
        return make_state(fields, done, worker, exact_global=exact)

    def load_state_dict(self, state: Any) -> None:
        """Resume from ``state``: one :meth:`state_dict`, a list of them (the ranks' or
        workers'), or a torchdata ``StatefulDataLoader.state_dict()``. A state of another
        dataset, seed, shuffle, partitions, shuffle block or batch size raises
        :class:`~tensorfile.errors.InvalidArgumentError` naming the field.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(6, dtype=np.int8)}, out, batch_size=3)
            >>> it = dataset.open(out).to_torch(batch_size=2, world_size=1, rank=0)
            >>> it.load_state_dict([{**it.state_dict(samples=2)}, it.state_dict(samples=4)])
            >>> [b["x"].tolist() for b in it]
            [[4, 5]]
        """
        expect = self._identity()
        if isinstance(state, dict) and state.get("format") == FORMAT:
            chosen = check_state(state, expect)
            worker: dict[str, int] | None = chosen.get("worker")
            if worker is not None:
                rank, world = self._where()
                saved = (worker["rank"], worker["world_size"], worker["id"], worker["workers"])
                if get_worker_info() is None or (rank, world, *_layout()) != saved:
                    raise InvalidArgumentError(
                        f"this state was saved by worker {saved[2]} of {saved[3]} on rank "
                        f"{saved[0]} of {saved[1]}; with another layout pass all the states "
                        "to it.load_state_dict (a list, or the whole StatefulDataLoader "
                        "state) before making the loader"
                    )
                self._set_resume(chosen["epoch"], chosen["samples"], worker)
                return
        else:
            found = find_loader_states(state)
            if not found:
                other = state.get("format") if isinstance(state, dict) else None
                raise InvalidArgumentError(
                    f"no tensorfile.dataset.torch resume state in the {type(state).__name__} given"
                    + (f" (its format is {other!r}, not {FORMAT!r})" if other is not None else "")
                )
            checked = [self._advance(check_state(s, expect), after) for s, after in found]
            chosen = max(checked, key=lambda s: (s["epoch"], s["samples"]))
            if chosen.get("exact_global") is False:
                raise InvalidArgumentError(
                    "these states were saved by DataLoader workers yielding single samples "
                    "without the batch_size hint, so their 'samples' say nothing exact about "
                    "the whole run: pass batch_size (the DataLoader's) with per_sample=True, or "
                    "resume with loader.load_state_dict on the same layout (which is exact)"
                )
        self._set_resume(chosen["epoch"], chosen["samples"], None)

    def _advance(self, state: dict[str, Any], batches: int) -> dict[str, Any]:
        """A worker's ``state`` as of its ``StatefulDataLoader``'s last snapshot, after which
        the loader yielded ``batches`` more (each one step of the saving rank): its
        ``samples`` with those steps (the largest over a rank's workers: the steps the
        loader yielded, whichever worker made them), else they would be fed again."""
        worker = state.get("worker")
        if not batches or worker is None:
            return state
        base, world = worker["base"], worker["world_size"]
        split = Split(self._total, base, world, self.options.unit, self.options.even)
        steps = worker["next_step"] - worker["workers"] + 1 + batches
        return {**state, "samples": base + split.consumed(steps, self.options.drop_last)}

    def _set_resume(self, epoch: int, samples: int, worker: dict[str, int] | None) -> None:
        self.epoch = epoch
        self._resume = samples
        self._worker_resume = worker
        self._next_step = None
        self._publish()

    def _end_pass(self) -> None:
        """A pass ran to its end: its resume point is used up, the next pass (without
        :meth:`set_epoch`) is the whole epoch; ``state_dict()`` still says the epoch is done
        until that pass starts; a pass from the published resume point says so to the
        other processes (:mod:`.torch_sync`)."""
        if self._published:
            info = get_worker_info()
            if info is None:
                self._shared.use_up(self._gen)
            else:
                self._shared.ended(info.id, info.num_workers, self._gen)
        self._resume, self._worker_resume = 0, None

    # -- iteration --------------------------------------------------------------------------

    def _ids(self, order: SampleOrder, lo: int, hi: int) -> NDArray:
        """Ids at positions ``[lo, hi)`` of the order, wrapping past its end (``pad``)."""
        total = len(order)
        if hi <= total:
            return order.ids(lo, hi)
        parts, pos = [], lo
        while pos < hi:
            a = pos % total
            b = min(total, a + (hi - pos))
            parts.append(order.ids(a, b))
            pos += b - a
        return np.concatenate(parts)

    def _order(self, epoch: int) -> SampleOrder:
        """The order of ``epoch``."""
        return EpochOrder(
            self.counts,
            seed=self.options.seed,
            epoch=epoch,
            shuffle=self.options.shuffle,
            partitions=self.options.partitions,
            shuffle_block=self.options.shuffle_block,
            unit=self.options.unit,
        )

    def _begin(self, wid: int, workers: int) -> tuple[int, int, int]:
        """Start a pass of worker ``wid`` of ``workers`` now: from here on this object's
        position is the pass's start (a ``StatefulDataLoader`` asks a worker for its state
        before its first batch). ``(epoch, base, first step)`` of the pass."""
        rank, world = self._where()
        base, first = self._start(rank, world, wid, workers)
        self._base, self._next_step = base, first
        return self.epoch, base, first

    def _pass(
        self, start: tuple[int, int, int], workers: int, chunk: int
    ) -> Iterator[list[tuple[int, NDArray]]]:
        """The pieces ``(step, ids)`` of the pass :meth:`_begin` started (``start``), this
        worker's steps ``workers`` apart, ``chunk`` pieces at a time, the shards of the
        pieces ahead handed to the dataset's background download. It does not end the pass
        (the caller does, with :meth:`_end_pass`, once what it yielded was taken)."""
        epoch, base, first = start
        rank, _ = self._where()
        if self._total == 0:  # an empty dataset: nothing to yield (and no schema to gather)
            return
        split = self._split(base)
        order = self._order(epoch)
        steps = iter(range(first, split.rank_steps(rank, self.options.drop_last), workers))
        ahead: deque[tuple[int, NDArray]] = deque()
        queued = 0
        predownload = self.dataset.predownload
        while True:
            added = False
            while len(ahead) < chunk or queued < predownload:
                t = next(steps, None)
                if t is None:
                    break
                ids = self._ids(order, *split.piece(t, rank))
                ahead.append((t, ids))
                queued += ids.size
                added = True
            if not ahead:
                return
            if added and predownload > 0:
                self.dataset.prefetch(self._shards_of(ahead))
            taken = [ahead.popleft() for _ in range(min(chunk, len(ahead)))]
            queued -= sum(ids.size for _, ids in taken)
            yield taken

    def _gather(self, *, shared: bool = False) -> Gather:
        """A gatherer of this feed's samples (``shared``: into shared memory)."""
        return Gather(self.dataset, self.counts, shared=shared)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """A pass, started at once (not at its first item): its position is this pass's
        start from here on. A DataLoader worker calls ``iter`` when a pass begins, a
        persistent one too, and a ``StatefulDataLoader`` then asks it for its state before
        its first batch: the start of this pass, not the end of its previous one."""
        info = get_worker_info()
        if info is not None:
            self._adopt()
        # in the main process after workers ran, an iteration of its own (a peek at a
        # batch) says nothing of what the loop took from them: still refused (.torch_sync)
        wid, workers = _layout()
        return self._yield(self._begin(wid, workers), workers)

    def _yield(self, start: tuple[int, int, int], workers: int) -> Iterator[dict[str, Any]]:
        """The batches or samples of the pass started at ``start`` (:meth:`__iter__`)."""
        in_worker = get_worker_info() is not None
        batched = self.options.batched
        chunk = 1 if batched else max(1, _SAMPLE_CHUNK // self.options.unit)
        gather: Gather | None = None
        for taken in self._pass(start, workers, chunk):
            if gather is None:
                gather = self._gather(shared=in_worker and batched)
            if batched:
                t, ids = taken[0]
                batch = gather(ids)
                self._next_step = t + workers
                yield batch
                continue
            yield from self._samples(gather, taken, workers)
        self._end_pass()

    def loader(
        self,
        *,
        threads: int | None = None,
        depth: int | None = None,
        pin_memory: bool = False,
        device: Any = None,
    ) -> FeedLoader:
        """This feed's batches gathered by threads of this process into reused buffers, in
        place of ``DataLoader(feed, batch_size=None, num_workers=k)`` (no worker
        processes, no shared-memory copy per batch): a
        :class:`~tensorfile.dataset.torch.FeedLoader` (the same batches in the same order,
        an exact ``state_dict()``). Needs ``batch_size``.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from tensorfile import dataset
            >>> out = os.path.join(tempfile.mkdtemp(), "ds")
            >>> _ = dataset.write({"x": np.arange(4, dtype=np.int8)}, out, batch_size=2)
            >>> [b["x"].tolist() for b in dataset.open(out).to_torch(batch_size=3).loader()]
            [[0, 1, 2], [3]]
        """
        return FeedLoader(self, threads=threads, depth=depth, pin_memory=pin_memory, device=device)

    def _samples(
        self, gather: Gather, taken: list[tuple[int, NDArray]], workers: int
    ) -> Iterator[dict[str, Any]]:
        """Single samples of the pieces ``taken``, gathered at once; a piece's step counts
        as done when its last sample is handed out."""
        batch = gather(np.concatenate([ids for _, ids in taken]))
        i = 0
        for t, ids in taken:
            for k in range(ids.size):
                if k == ids.size - 1:
                    self._next_step = t + workers
                yield {c: v[i] for c, v in batch.items()}
                i += 1

    def _shards_of(self, ahead: deque[tuple[int, NDArray]]) -> list[ShardEntry]:
        """The shard entries of the pieces ahead, each once, in the order first needed."""
        ids = np.concatenate([ids for _, ids in ahead])
        starts = np.concatenate([[0], np.cumsum(np.asarray(self.counts, np.int64))])
        shard = np.searchsorted(starts[1:], ids, side="right")
        _, first = np.unique(shard, return_index=True)
        entries = self.dataset.manifest.shards
        return [entries[int(shard[i])] for i in np.sort(first)]


class TorchMap(_TorchDataset):  # type: ignore[type-arg]
    """A map-style torch dataset: ``ds[i]`` as a dict of torch tensors (BF16 as
    ``torch.bfloat16``...), so ``DataLoader``'s default collate stacks any dtype; the keys of
    a KV dataset stay strings (collated into lists). Works with ``DistributedSampler``.

    Example:
        >>> import numpy as np, os, tempfile
        >>> from tensorfile import dataset
        >>> out = os.path.join(tempfile.mkdtemp(), "ds")
        >>> _ = dataset.write({"x": np.ones((4, 2), np.float32)}, out, batch_size=2, dtype="BF16")
        >>> m = TorchMap(dataset.open(out))
        >>> len(m), m[0]["x"].dtype
        (4, torch.bfloat16)
    """

    def __init__(self, dataset: FeedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {k: _to_torch(v) for k, v in self.dataset[index].items()}

    # pickled (DataLoader spawn workers) with its dataset, which pickles as its location,
    # manifest and cache settings, never open files or threads (Dataset.__reduce__)
