"""Exact sample accounting for the torch feed across a change of layout: every sample id
counted, none twice, none lost, exactly the ids the epoch's order says, when a run with
``W`` ranks of ``K`` DataLoader workers each is resumed by one with ``W'`` ranks of ``K'``.

The ranks are simulated in this process (``rank=``/``world_size=`` given, one loader per
rank, consumed in lockstep: one batch from each rank per training step); the workers are
real DataLoader processes (forked; spawned where said). Each scenario runs epochs 0 and 1
whole, breaks off mid-epoch 2, saves (the trainer's count, ``state_dict(samples=N)``, or
the ``StatefulDataLoader``'s states), resumes with another layout and checks that what
epoch 2 consumed before and after the resume is that epoch's order, ``S[0:N]`` then
``S[N:]`` split among the new ranks as the module docstring of
:mod:`tensorfile.dataset.feed.torch` says (``even=True``: the last ``M % W'`` positions
dropped; ``"pad"``: wrapped to the start of ``S``; ``False``: all of them), and that epoch 3
afterwards is whole and in its own order.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tensorfile import dataset
from tensorfile.dataset.feed.torch_state import find_states
from tensorfile.dataset.order import epoch_order
from tensorfile.errors import InvalidArgumentError

# 131 samples in shards of 16 (8 full, one of 3), batches of 4; shuffled in blocks of 8 cut
# into 4 partitions, so the interleave of partitions (which depends on B) is exercised
N, SHARD, B, SEED = 131, 16, 4, 7
ORDER = {"seed": SEED, "partitions": 4, "shuffle_block": 8}
COUNTS = [SHARD] * (N // SHARD) + [N % SHARD]


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("accounting") / "ds")
    ids = np.arange(N, dtype=np.int64)
    dataset.write({"id": ids, "twice": 2 * ids}, out, batch_size=SHARD, columns=None)
    return out


def _order(epoch: int, shuffle: bool) -> list[int]:
    """``S``: the epoch's order of every sample id (independent of any layout)."""
    return epoch_order(COUNTS, epoch=epoch, shuffle=shuffle, unit=B, **ORDER).tolist()


def _expected(
    order: Sequence[int], start: int, world: int, even: Any, drop_last: bool = False
) -> list[int]:
    """What ``world`` ranks consume from position ``start`` to the epoch's end, step by step
    (each step rank 0's piece, then rank 1's...): ``M`` positions are left; ``even=True``
    drops the last ``M % world``, ``"pad"`` wraps ``ceil(M / world) * world - M`` to the
    start of the order, ``False`` takes all of them. ``drop_last`` (``even`` True or
    ``"pad"``, where every rank's last batch is as short): only the steps of whole batches."""
    left = len(order) - start
    if even is True:
        stop = start + left // world * world
    elif even == "pad":
        stop = start + math.ceil(left / world) * world
    else:
        stop = len(order)
    if drop_last:
        assert even is not False
        stop = start + (stop - start) // world // B * B * world
    return [order[p % len(order)] for p in range(start, stop)]


@dataclass(frozen=True)
class Layout:
    """``world`` ranks, each with a loader of ``workers`` DataLoader workers (a
    ``StatefulDataLoader`` where ``stateful``: its workers' states snapshotted every
    ``snapshot`` batches)."""

    world: int
    workers: int
    persistent: bool = False
    stateful: bool = False
    context: str = "fork"
    snapshot: int = 1

    def __str__(self) -> str:
        kind = ("stateful-" if self.stateful else "") + ("persistent-" if self.persistent else "")
        kind += f"snapshot{self.snapshot}-" if self.snapshot != 1 else ""
        return f"{self.world}x{self.workers}-{kind}{self.context}"


@dataclass(frozen=True)
class Mode:
    """How the feed runs: the order (``shuffle``), the split's tail (``even``) and batches
    (``per_sample``: single samples with the ``batch_size`` hint, the DataLoader batching
    them; else ready batches)."""

    shuffle: bool = True
    even: Any = True
    per_sample: bool = False
    drop_last: bool = False

    def __str__(self) -> str:
        feed = "samples" if self.per_sample else "batches"
        drop = "-drop_last" if self.drop_last else ""
        return f"{'shuffle' if self.shuffle else 'ordered'}-even{self.even}-{feed}{drop}"


class Run:
    """One run of ``layout.world`` simulated ranks: a feed and a loader per rank."""

    def __init__(self, path: str, layout: Layout, mode: Mode) -> None:
        self.layout, self.mode = layout, mode
        self.feeds = [
            dataset.open(path).to_torch(
                shuffle=mode.shuffle,
                batch_size=B,
                per_sample=mode.per_sample,
                even=mode.even,
                drop_last=mode.drop_last,
                rank=r,
                world_size=layout.world,
                **ORDER,
            )
            for r in range(layout.world)
        ]
        self.loaders = [self._loader(it) for it in self.feeds]
        self.restored = False

    def _loader(self, it: Any) -> Any:
        kw: dict[str, Any] = {"batch_size": B if self.mode.per_sample else None}
        if self.layout.workers:
            kw.update(
                num_workers=self.layout.workers,
                persistent_workers=self.layout.persistent,
                multiprocessing_context=self.layout.context,
            )
        if self.layout.stateful:
            return StatefulDataLoader(it, snapshot_every_n_steps=self.layout.snapshot, **kw)
        return DataLoader(it, **kw)

    def set_epoch(self, epoch: int) -> None:
        for it in self.feeds:
            it.set_epoch(epoch)

    def load(self, state: Any, epoch: int = 2) -> None:
        """Resume every rank's feed from ``state`` (a trainer's loop then calls
        ``set_epoch`` with the epoch it saved: the same one, which changes nothing)."""
        for it in self.feeds:
            it.load_state_dict(state)
        self.set_epoch(epoch)

    def restore(self, states: list[Any], epoch: int = 2) -> None:
        """The same layout: each rank's ``StatefulDataLoader`` gets its own state back."""
        for loader, state in zip(self.loaders, states, strict=True):
            loader.load_state_dict(state)
        self.set_epoch(epoch)
        self.restored = True  # (the loaders' workers know where they are; the feeds do not)

    def steps(self, limit: int | None = None) -> list[list[list[int]]]:
        """A pass of all ranks in lockstep (broken off after ``limit`` steps): per step,
        each rank's batch of ids (``[]`` from a rank with no batch left)."""
        passes = [iter(loader) for loader in self.loaders]
        got: list[list[list[int]]] = []
        # (the limit checked before the next batch is taken: a StatefulDataLoader counts it)
        for batches in itertools.islice(itertools.zip_longest(*passes), limit):
            step = []
            for b in batches:
                ids = [] if b is None else b["id"].tolist()
                assert b is None or b["twice"].tolist() == [2 * i for i in ids]
                step.append(ids)
            got.append(step)
        return got

    def consume(self, limit: int | None = None) -> list[int]:
        """The ids a pass consumes (all ranks, step by step), checking the split: each rank
        takes at most ``B`` a step; ``even`` True or ``"pad"``: every rank the same count;
        a whole pass: on each rank what ``len`` said before it (batches, or samples)."""
        lengths = [len(it) for it in self.feeds]
        steps = self.steps(limit)
        per_rank = [0] * self.layout.world
        batches = [0] * self.layout.world
        for step in steps:
            for r, piece in enumerate(step):
                assert len(piece) <= B
                per_rank[r] += len(piece)
                batches[r] += 1 if piece else 0
        if self.mode.even is not False:
            assert len(set(per_rank)) == 1, per_rank
        else:
            assert max(per_rank) - min(per_rank) <= 1, per_rank
        if limit is None and not self.restored:
            assert lengths == (per_rank if self.mode.per_sample else batches)
        self.restored = False
        return [i for step in steps for piece in step for i in piece]

    def saved(self, steps: int, before: int = 0) -> Any:
        """The state a checkpoint after ``steps`` steps of this run keeps: the loaders'
        own (a ``StatefulDataLoader``'s, all ranks') or the trainer's count (``before``:
        the samples of the epoch consumed before this run)."""
        if self.layout.stateful:
            return json.loads(json.dumps([loader.state_dict() for loader in self.loaders]))
        count = before + steps * self.layout.world * B
        return json.loads(json.dumps(self.feeds[0].state_dict(samples=count)))


def _whole(run: Run, epoch: int) -> None:
    run.set_epoch(epoch)
    mode = run.mode
    want = _expected(_order(epoch, mode.shuffle), 0, run.layout.world, mode.even, mode.drop_last)
    assert run.consume() == want


def _save_mid_epoch(
    path: str, layout: Layout, mode: Mode, steps: int, epoch: int = 2
) -> tuple[list[int], Any]:
    """Run ``layout``: epochs ``0 .. epoch-1`` whole (each checked), then ``steps`` steps
    of ``epoch``; what that epoch consumed and the checkpoint."""
    run = Run(path, layout, mode)
    for e in range(epoch):
        _whole(run, e)
    run.set_epoch(epoch)
    head = run.consume(steps)
    assert head == _order(epoch, mode.shuffle)[: steps * layout.world * B]
    return head, run.saved(steps)


def _check_resumed(head: list[int], rest: list[int], epoch: int, world: int, mode: Mode) -> None:
    """What the epoch consumed before (``head``) and after the resume (``rest``) with
    ``world`` ranks: the epoch's order exactly, from where the first run stopped."""
    order = _order(epoch, mode.shuffle)
    assert head == order[: len(head)]
    assert rest == _expected(order, len(head), world, mode.even, mode.drop_last)
    if mode.drop_last:
        return
    if mode.even is False:  # nothing dropped, nothing repeated: every sample once
        assert sorted(head + rest) == list(range(N))
    elif mode.even is True:
        assert len(set(head + rest)) == len(head + rest) > N - world


# -- persistent workers: set_epoch and load_state_dict between passes, another layout ------


@pytest.mark.parametrize(
    ("before", "after", "mode"),
    [
        (Layout(2, 2, persistent=True), Layout(3, 1, persistent=True), Mode()),
        (
            Layout(3, 1, persistent=True),
            Layout(2, 2, persistent=True),
            Mode(shuffle=False, even="pad"),
        ),
        (
            Layout(1, 2, persistent=True),
            Layout(2, 2, persistent=True),
            Mode(even=False, per_sample=True),
        ),
        (
            Layout(2, 1, persistent=True),
            Layout(1, 2, persistent=True),
            Mode(even="pad", per_sample=True),
        ),
    ],
    ids=str,
)
def test_persistent_workers_resume_another_layout_between_passes(
    ds_path: str, before: Layout, after: Layout, mode: Mode
) -> None:
    """Persistent workers of the resuming run are already started (a first pass broken off
    after one step, as a look at a batch does) when the state is loaded: their next pass is
    the rest of epoch 2 for the new layout, and after ``set_epoch(3)`` the pass after it
    is the whole of epoch 3: the workers saw both."""
    head, state = _save_mid_epoch(ds_path, before, mode, steps=5)
    run = Run(ds_path, after, mode)
    run.consume(1)  # the persistent workers start, on epoch 0
    run.load(state)
    rest = run.consume()
    _check_resumed(head, rest, 2, after.world, mode)
    _whole(run, 3)
    _whole(run, 4)


# -- StatefulDataLoader: its states resume another layout, and its own exactly -------------


@pytest.mark.parametrize(
    ("before", "after", "mode", "steps"),
    [
        # (the property test_any_layout_resumes_any_other draws more of these at random)
        (Layout(2, 2, persistent=True, stateful=True), Layout(3, 1), Mode(), 1),
        (Layout(2, 2, stateful=True), Layout(1, 2, persistent=True), Mode(even=False), 6),
        (Layout(2, 2, stateful=True, snapshot=3), Layout(1, 1), Mode(even="pad"), 8),
        (Layout(1, 2, stateful=True, snapshot=4), Layout(3, 0), Mode(per_sample=True), 6),
    ],
    ids=str,
)
def test_stateful_loader_states_resume_another_layout(
    ds_path: str, before: Layout, after: Layout, mode: Mode, steps: int
) -> None:
    """Every rank's ``StatefulDataLoader.state_dict()`` saved mid-epoch 2 (after one step
    too, where a persistent worker that has not yielded in this pass yet holds the state of
    its previous one), loaded by each feed of a run of another layout."""
    head, states = _save_mid_epoch(ds_path, before, mode, steps)
    assert len(find_states(states)) == before.world * before.workers
    run = Run(ds_path, after, mode)
    run.load(states)
    _check_resumed(head, run.consume(), 2, after.world, mode)
    _whole(run, 3)


@pytest.mark.parametrize(
    ("layout", "mode", "steps"),
    [
        (Layout(2, 2, persistent=True, stateful=True), Mode(), 1),
        (Layout(1, 2, persistent=True, stateful=True), Mode(even="pad", per_sample=True), 3),
        (Layout(2, 2, stateful=True, snapshot=3), Mode(), 5),
    ],
    ids=str,
)
def test_stateful_loader_resumes_its_own_layout_after_epochs(
    ds_path: str, layout: Layout, mode: Mode, steps: int
) -> None:
    """The same layout: each rank's loader gets its own state back (each worker its own,
    exact) after two whole epochs and a few steps of the third; the third is then that
    epoch's order, the fourth whole."""
    head, states = _save_mid_epoch(ds_path, layout, mode, steps)
    run = Run(ds_path, layout, mode)
    run.restore(states)
    _check_resumed(head, run.consume(), 2, layout.world, mode)
    _whole(run, 3)


@pytest.mark.parametrize("same_layout", [True, False])
def test_stateful_persistent_passes_without_set_epoch(ds_path: str, same_layout: bool) -> None:
    """A loop that never calls ``set_epoch``: every pass is epoch 0 from its start. Saved
    one step into the second pass, the states resume exactly (regression: a persistent
    worker asked for its state before its first batch of a pass gave the end of its previous
    pass, so the worker that had not yielded yet replayed nothing of its share in the same
    layout, and its 'whole epoch consumed' won the global resume, which then yielded
    nothing)."""
    layout, mode = Layout(2, 2, persistent=True, stateful=True), Mode()
    run = Run(ds_path, layout, mode)
    whole = _expected(_order(0, mode.shuffle), 0, layout.world, mode.even)
    assert run.consume() == whole
    head = run.consume(1)
    states = run.saved(1)
    after = Run(ds_path, layout if same_layout else Layout(3, 1), mode)
    if same_layout:
        after.restore(states, epoch=0)
    else:
        after.load(states, epoch=0)
    _check_resumed(head, after.consume(), 0, after.layout.world, mode)
    assert after.consume() == _expected(_order(0, mode.shuffle), 0, after.layout.world, mode.even)


# -- any layout to any other: a property --------------------------------------------------


@st.composite
def _layouts(draw: st.DrawFn) -> Layout:
    workers = draw(st.integers(0, 2))
    stateful = draw(st.booleans())
    return Layout(
        world=draw(st.integers(1, 3)),
        workers=workers,
        persistent=workers > 0 and draw(st.booleans()),
        stateful=stateful,
        snapshot=draw(st.integers(1, 4)) if stateful else 1,
    )


@st.composite
def _modes(draw: st.DrawFn) -> Mode:
    even = draw(st.sampled_from([True, "pad", False]))
    return Mode(
        shuffle=draw(st.booleans()),
        even=even,
        per_sample=draw(st.booleans()),
        drop_last=even is not False and draw(st.booleans()),
    )


@settings(max_examples=6, deadline=None)
@given(before=_layouts(), after=_layouts(), mode=_modes(), cut=st.floats(0, 1))
def test_any_layout_resumes_any_other(
    ds_path: str, before: Layout, after: Layout, mode: Mode, cut: float
) -> None:
    """Epochs 0 and 1 whole, a part of epoch 2 (``cut`` of its whole steps), saved (the
    loaders' states or the trainer's count), resumed by another run of any layout: epoch 2
    is exactly its order, epoch 3 whole. (With ``drop_last`` the cut is before the saving
    layout's last batch: after it that layout's epoch is over, the next test.)"""
    steps = round(cut * (N // (before.world * B)))
    if mode.drop_last:
        per_rank = math.ceil(N / before.world) if mode.even == "pad" else N // before.world
        steps = min(steps, per_rank // B - 1)
    head, state = _save_mid_epoch(ds_path, before, mode, steps)
    run = Run(ds_path, after, mode)
    run.load(state)
    _check_resumed(head, run.consume(), 2, after.world, mode)
    _whole(run, 3)


@pytest.mark.parametrize("workers", [2, 0])
def test_a_layouts_last_batch_ends_its_epoch(ds_path: str, workers: int) -> None:
    """The rule at the end of a pass (``drop_last``, 3 ranks: 10 steps of 4 samples each,
    the 11 positions left dropped): a checkpoint after the last batch (before the loop
    learns that the pass ended), by the ``StatefulDataLoader``'s states or by the feed's own
    count (no workers), says the epoch is over, short tail and all, so a run of another
    layout resumes nothing of it: epoch 2 is exactly what the saving layout takes of it.
    The trainer's own count says what it says: 11 positions left, one rank takes 8."""
    mode = Mode(drop_last=True)
    run = Run(ds_path, Layout(3, workers, stateful=True), mode)
    run.set_epoch(2)
    head = run.consume(10)
    assert head == _expected(_order(2, True), 0, 3, True, drop_last=True)
    own = run.saved(10) if workers else run.feeds[1].state_dict()
    counted = run.feeds[0].state_dict(samples=len(head))
    assert max(s["samples"] for s in find_states(own)) == N  # (the largest counts)
    for state, rest in ((own, []), (counted, _order(2, True)[120:128])):
        after = Run(ds_path, Layout(1, 2), mode)
        after.load(state)
        assert after.consume() == rest
        _whole(after, 3)


@pytest.mark.parametrize(
    ("layouts", "mode"),
    [
        ((Layout(2, 2, stateful=True), Layout(3, 1, stateful=True), Layout(1, 2)), Mode()),
        ((Layout(1, 2), Layout(2, 2, persistent=True), Layout(3, 0)), Mode(even=False)),
        (
            (Layout(3, 1, persistent=True, stateful=True), Layout(1, 1, stateful=True, snapshot=2),
             Layout(2, 2, persistent=True)),
            Mode(shuffle=False, even="pad", per_sample=True),
        ),
    ],
    ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else str(v),
)  # fmt: skip
def test_a_resumed_epoch_resumed_again(
    ds_path: str, layouts: tuple[Layout, ...], mode: Mode
) -> None:
    """Epoch 2 broken off and resumed twice, by three layouts (the second saving from a
    resume point of its own, not the epoch's start): the three parts are the epoch's
    order, each from where the one before stopped."""
    first, second, third = layouts
    head, state = _save_mid_epoch(ds_path, first, mode, steps=3)
    run = Run(ds_path, second, mode)
    run.load(state)
    head += run.consume(4)
    assert head == _order(2, mode.shuffle)[: len(head)]
    state = run.saved(4, before=3 * first.world * B)
    last = Run(ds_path, third, mode)
    last.load(state)
    _check_resumed(head, last.consume(), 2, third.world, mode)
    _whole(last, 3)


def test_spawned_persistent_workers_both_ways(ds_path: str) -> None:
    """A spawned persistent worker (the feed pickled into it, the shared block a torch
    tensor; one: each costs seconds to start) of a ``StatefulDataLoader``: started on epoch
    0 by a look at a batch, then given the states of a forked run of another layout (between
    passes), then ``set_epoch(3)``, then ``set_epoch(4)`` and a checkpoint one step into it,
    which a forked run of a third layout resumes: every count exact."""
    mode = Mode(even="pad")
    head, states = _save_mid_epoch(ds_path, Layout(2, 2, stateful=True), mode, steps=4)
    spawned = Layout(1, 1, persistent=True, stateful=True, context="spawn")
    run = Run(ds_path, spawned, mode)
    run.consume(1)
    run.load(states)
    _check_resumed(head, run.consume(), 2, spawned.world, mode)
    _whole(run, 3)
    run.set_epoch(4)
    head = run.consume(1)
    states = run.saved(1)
    after = Run(ds_path, Layout(3, 1), mode)
    after.load(states, epoch=4)
    _check_resumed(head, after.consume(), 4, after.layout.world, mode)


def test_a_loader_of_another_layout_refuses_the_loaders_states(ds_path: str) -> None:
    """``StatefulDataLoader.load_state_dict`` hands each worker the state of the worker of
    its id: in a loader of another layout (other workers, other ranks) each feed refuses the
    state that is not its own, naming the way that resumes (all the states to
    ``it.load_state_dict``), instead of resuming a wrong position."""
    mode = Mode()
    _, states = _save_mid_epoch(ds_path, Layout(2, 2, stateful=True), mode, steps=3)
    for layout in (Layout(2, 1, stateful=True), Layout(1, 2, stateful=True)):
        run = Run(ds_path, layout, mode)
        run.restore(states[: layout.world])
        with pytest.raises(
            InvalidArgumentError, match=r"pass all the states to it\.load_state_dict"
        ):
            run.consume()
