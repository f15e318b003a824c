"""Training feeds that resume: the same global order with 2 and 3 gloo ranks, a run SIGKILLed
mid-epoch and resumed with another world size seeing every remaining sample exactly once,
exact same-layout resume through torchdata's StatefulDataLoader, hostile states refused,
batches with every dtype's values and in shared memory inside workers.

The distributed tests run real ranks: processes joined by ``torch.distributed`` (gloo on
127.0.0.1), each with a DataLoader of two worker processes forked from a fork server (a
fresh process, not the rank that runs gloo's threads; it imports torch once for both).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tensorfile import dataset
from tensorfile.core.dtypes import from_safetensors
from tensorfile.dataset.feed.torch_state import find_states
from tensorfile.dataset.order import epoch_order
from tensorfile.errors import InvalidArgumentError

N, SHARD, B, SEED = 300, 16, 5, 11


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("resume") / "ds")
    ids = np.arange(N, dtype=np.int64)
    h = np.stack([ids % 100, -(ids % 100)], axis=1).astype(np.float32)
    dataset.write({"id": ids, "h": h}, out, batch_size=SHARD, dtype="BF16", columns=None)
    return out


def _order(epoch: int = 0) -> list[int]:
    counts = [SHARD] * (N // SHARD) + [N % SHARD]
    return epoch_order(counts, seed=SEED, epoch=epoch, shuffle=True, unit=B).tolist()


_RANK_SCRIPT = r"""
import datetime, json, os, sys, time
import torch, torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader
from tensorfile import dataset


def epoch(rank, world, path, out, mode):
    it = dataset.open(path).to_torch(shuffle=True, seed=11, batch_size=5)
    if mode == "resume":
        with open(os.path.join(out, "state.json")) as f:
            it.load_state_dict(json.load(f)["state"])  # saved by 2 ranks; here 3
    loader = StatefulDataLoader(it, batch_size=None, num_workers=2,
                                multiprocessing_context="forkserver")
    log = open(os.path.join(out, f"{mode}{world}-{rank}.jsonl"), "w")
    for step, batch in enumerate(loader):
        ids = batch["id"].tolist()
        assert batch["h"].dtype == torch.bfloat16
        assert batch["h"][:, 0].tolist() == [i % 100 for i in ids]
        log.write(json.dumps({"step": step, "ids": ids}) + "\n")
        log.flush()
        t = torch.tensor([1])
        dist.all_reduce(t)  # a training step's collective: the ranks go in lockstep
        if mode == "kill" and rank == 0:  # checkpoint after the step, atomically
            tmp = os.path.join(out, "state.json.tmp")
            with open(tmp, "w") as f:
                json.dump({"steps": step + 1, "state": loader.state_dict()}, f)
            os.replace(tmp, os.path.join(out, "state.json"))
        if mode == "kill" and step + 1 >= 11:
            time.sleep(120)  # mid-epoch: wait to be killed
            sys.exit(3)
    log.close()
    dist.barrier()


def main():
    rank, world, store, path, out, modes = sys.argv[1:7]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    for mode in modes.split(","):  # one epoch each, a fresh dataset and loader each
        epoch(rank, world, path, out, mode)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _run(
    ds_path: str, out: Path, world: int, modes: str, tmp: Path
) -> list[subprocess.Popen[bytes]]:
    """``world`` ranks, each running one epoch per mode of ``modes`` (``order``: the
    whole epoch; ``kill``: a checkpoint after each step, then waiting to be killed after
    the 11th; ``resume``: from that checkpoint to the end). Ranks cost seconds each to
    start (torch, twice: the rank and its fork server), so a group runs several epochs.
    Their temporary files (multiprocessing's ``pymp-*`` folders of sockets, which a killed
    rank leaves behind) go in ``tmp``."""
    script = out / "rank.py"
    script.write_text(_RANK_SCRIPT)
    store = out / f"rendezvous-{world}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "TMPDIR": str(tmp)}
    return [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), str(store), ds_path, str(out), modes],
            env=env,
            stdout=open(out / f"{world}-{r}.log", "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL reaches the workers
        )
        for r in range(world)
    ]


def _logs(out: Path, world: int) -> str:
    return "\n".join((out / f"{world}-{r}.log").read_text()[-3000:] for r in range(world))


def _wait(procs: list[subprocess.Popen[bytes]], out: Path) -> None:
    deadline = time.monotonic() + 240
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert [p.returncode for p in procs] == [0] * len(procs), _logs(out, len(procs))


def _steps(out: Path, mode: str, world: int) -> list[list[list[int]]]:
    """Per step, each rank's piece."""
    per_rank = []
    for r in range(world):
        lines = (out / f"{mode}{world}-{r}.jsonl").read_text().splitlines()
        per_rank.append([json.loads(line)["ids"] for line in lines if line.endswith("}")])
    steps = max(len(p) for p in per_rank)
    return [[p[t] for p in per_rank if t < len(p)] for t in range(steps)]


@pytest.fixture(scope="module")
def ranks(ds_path: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 ranks x 2 workers: a whole epoch, then an epoch that checkpoints a
    StatefulDataLoader after every step and is SIGKILLed mid-epoch (after 11 steps); then 3
    ranks x 2 workers: that state loaded and its epoch finished, then a whole epoch. The
    folder holding what each rank saw (``{mode}{world}-{rank}.jsonl``) and the state."""
    out = tmp_path_factory.mktemp("ranks")
    state = out / "state.json"

    def saved_enough() -> bool:
        try:
            return bool(json.loads(state.read_text())["steps"] >= 11)
        except (OSError, ValueError):
            return False

    # (a short path: the sockets in it must fit a unix socket's 108 bytes)
    tmp = Path(tempfile.mkdtemp(prefix="tf-ranks-"))
    try:
        procs = _run(ds_path, out, 2, "order,kill", tmp)
        deadline = time.monotonic() + 240
        try:
            while not saved_enough() and time.monotonic() < deadline:
                assert all(p.poll() is None for p in procs), _logs(out, 2)
                time.sleep(0.1)
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):  # (a rank that died already)
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        _wait(_run(ds_path, out, 3, "resume,order", tmp), out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def test_two_then_three_ranks_visit_the_same_global_order(ranks: Path) -> None:
    want = _order()
    for world in (2, 3):
        steps = _steps(ranks, "order", world)
        flat = [i for step in steps for piece in step for i in piece]
        keep = N - N % world  # even=True: the last N % world positions dropped
        assert flat == want[:keep]
        assert all(len({len(p) for p in step}) == 1 for step in steps)  # equal pieces


def test_killed_mid_epoch_resumed_with_three_ranks(ranks: Path) -> None:
    """2 ranks x 2 workers checkpoint a StatefulDataLoader after every step and are
    SIGKILLed mid-epoch; 3 ranks x 2 workers load that state and finish the epoch: what was
    seen before the checkpoint and what is seen after are every sample exactly once."""
    saved = json.loads((ranks / "state.json").read_text())
    c = saved["steps"]
    assert c == 11
    before = [i for step in _steps(ranks, "kill", 2)[:c] for piece in step for i in piece]
    assert len(before) == c * 2 * B
    after = [i for step in _steps(ranks, "resume", 3) for piece in step for i in piece]
    left = N - c * 2 * B
    keep = N - left % 3  # even=True with 3 ranks: the last (left % 3) positions dropped
    assert not set(before) & set(after)
    assert len(after) == len(set(after))
    assert sorted(before + after) == sorted(_order()[:keep])
    assert before + after == _order()[:keep]  # and in the epoch's order


def _collect(loader: Any, steps: int | None = None) -> list[list[int]]:
    got = []
    for batch in loader:
        got.append(batch["id"].tolist())
        if steps is not None and len(got) == steps:
            break
    return got


def test_same_layout_exact_resume_through_stateful_dataloader(ds_path: str) -> None:
    """Each worker gets its own state back and continues where it was: the batches after
    the resume are the ones the uninterrupted run would have delivered."""
    for rank in range(2):
        want = _order()
        world = 2
        expect = [want[t * world * B + rank * B :][:B] for t in range(N // world // B)]

        def make(rank: int = rank, world: int = world) -> StatefulDataLoader:
            it = dataset.open(ds_path).to_torch(
                shuffle=True, seed=SEED, batch_size=B, rank=rank, world_size=world
            )
            return StatefulDataLoader(it, batch_size=None, num_workers=2)

        first = make()
        head = _collect(first, 7)  # odd: the next batch comes from worker 1
        saved = json.loads(json.dumps(first.state_dict()))  # JSON-able
        del first
        second = make()
        second.load_state_dict(saved)
        rest = _collect(second)
        assert head + rest == expect
        # the same state read by a dataset (not a loader): a global resume, same batches
        it = dataset.open(ds_path).to_torch(
            shuffle=True, seed=SEED, batch_size=B, rank=rank, world_size=world
        )
        it.load_state_dict(saved)
        assert _collect(DataLoader(it, batch_size=None, num_workers=2)) == expect[7:]


def test_hostile_states_are_refused(ds_path: str, tmp_path: Path) -> None:
    ds = dataset.open(ds_path)
    it = ds.to_torch(shuffle=True, seed=SEED, batch_size=B)
    good = it.state_dict(samples=10)
    other = str(tmp_path / "other")
    dataset.write({"id": np.arange(N + 1, dtype=np.int64)}, other, batch_size=SHARD)
    foreign = dataset.open(other).to_torch(shuffle=True, seed=SEED, batch_size=B)
    past_end = {"rank": 0, "world_size": 1, "id": 0, "workers": 1, "base": N + 5, "next_step": 0}
    cases: list[tuple[Any, str]] = [
        (foreign.state_dict(samples=3), "dataset"),
        (ds.to_torch(shuffle=True, seed=12, batch_size=B).state_dict(), "seed"),
        (ds.to_torch(seed=SEED, batch_size=B).state_dict(), "shuffle"),
        (ds.to_torch(shuffle=True, seed=SEED, batch_size=4).state_dict(), "batch_size"),
        (ds.to_torch(shuffle=True, seed=SEED, batch_size=B, partitions=8).state_dict(), "parti"),
        ({**good, "samples": N + 1}, "only"),
        ({**good, "samples": -1}, "negative"),
        ({**good, "samples": "10"}, "integer"),
        ({**good, "samples": True}, "integer"),
        ({**good, "epoch": None}, "integer"),
        ({**good, "shuffle": "yes"}, "bool"),
        ({**good, "format": "mosaicml"}, "format"),
        ({**good, "worker": [1, 2]}, "worker"),
        ({**good, "worker": {"rank": 0}}, "worker"),
        ({**good, "worker": past_end}, "past"),
        ({**good, "worker": {**past_end, "base": 0, "workers": 2}}, "saved by worker 0 of 2"),
        ({**good, "digest": "0" * 16}, "digest"),
        ({**good, "exact_global": "no"}, "exact_global"),
        ([], "no tensorfile"),
        ({"_snapshot": {"x": 1}}, "no tensorfile"),
        ("garbage", "no tensorfile"),
        (None, "no tensorfile"),
        ([good, {**good, "seed": 1}], "seed"),
    ]
    for state, says in cases:
        with pytest.raises(InvalidArgumentError, match=says):
            it.load_state_dict(state)
    with pytest.raises(InvalidArgumentError):
        it.state_dict(samples=N + 1)
    with pytest.raises(InvalidArgumentError):
        it.state_dict(samples=-1)
    it.load_state_dict(good)  # still usable after the refusals
    assert sum(len(b["id"]) for b in it) == N - 10
    it.load_state_dict({**good, "samples": N})  # the epoch's end: nothing left
    assert len(it) == 0 and list(it) == []
    assert len(it) == N // B  # that pass used the resume point up: the next is whole
    # not refused: an unrelated nested "format" key, numpy integers
    it.load_state_dict({"meta": {"format": "mine/2"}, "data": [{**good, "samples": np.int64(7)}]})
    assert it.state_dict()["samples"] == 7


def test_a_state_of_other_shards_with_the_same_total_is_refused(tmp_path: Path) -> None:
    """Regression: only the total and the number of shards were compared; shards of 4, 4, 2
    and 2, 4, 4 samples were taken for the same dataset."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    dataset.write({"x": np.arange(10)}, a, batch_size=4)
    dataset.write({"x": np.arange(2)}, b, batch_size=2)
    dataset.write({"x": np.arange(2, 10)}, b, batch_size=4, mode="append")
    state = dataset.open(a).to_torch(batch_size=2, shuffle=True, seed=1).state_dict(samples=4)
    with pytest.raises(InvalidArgumentError, match="shards digest"):
        dataset.open(b).to_torch(batch_size=2, shuffle=True, seed=1).load_state_dict(state)


def _xs(it: Any) -> list[int]:
    return [v for b in it for v in (b["x"].tolist() if b["x"].ndim else [b["x"].item()])]


def test_epochs_and_passes_start_where_they_should(tmp_path: Path) -> None:
    """Regressions: a state taken after set_epoch(e + 1) before its first batch said the
    whole epoch was consumed; a pass after a resumed pass ran to its end resumed again."""
    out = str(tmp_path / "ds")
    dataset.write({"x": np.arange(10)}, out, batch_size=4)
    it = dataset.open(out).to_torch(batch_size=2, shuffle=True, seed=1)
    assert len(_xs(it)) == 10 and it.state_dict()["samples"] == 10  # epoch 0 done
    it.set_epoch(1)
    state = it.state_dict()
    assert (state["epoch"], state["samples"]) == (1, 0)
    again = dataset.open(out).to_torch(batch_size=2, shuffle=True, seed=1)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert sorted(_xs(again)) == list(range(10))
    plain = dataset.open(out).to_torch(batch_size=2)
    plain.load_state_dict(plain.state_dict(samples=6))
    assert _xs(plain) == [6, 7, 8, 9] and plain.state_dict()["samples"] == 10
    assert len(plain) == 5 and _xs(plain) == list(range(10))  # the resume point is used up


def test_an_empty_dataset_yields_nothing(tmp_path: Path) -> None:
    out = str(tmp_path / "empty")
    dataset.write({"x": np.arange(0)}, out, batch_size=4)
    for kw in ({"batch_size": 4}, {"shuffle": True}):
        it = dataset.open(out).to_torch(**kw)
        assert len(it) == 0 and list(it) == [] and it.state_dict()["samples"] == 0


def test_worker_states_resume_only_where_they_are_exact(tmp_path: Path) -> None:
    """Regressions: one worker's state loaded outside its own layout fell back to a global
    resume from that worker's bound; single samples without the batch_size hint under
    DataLoader(batch_size=4, num_workers=2) gave worker states whose ``samples`` is no
    global bound. Both are refused now; the exact same-layout resume still works."""
    out = str(tmp_path / "ds")
    dataset.write({"x": np.arange(24)}, out, batch_size=8)
    for hint in (None, 4):
        kw: dict[str, Any] = {"batch_size": hint, "per_sample": True} if hint else {}
        first = StatefulDataLoader(dataset.open(out).to_torch(**kw), batch_size=4, num_workers=2)
        head = _xs(b for _, b in zip(range(2), first, strict=False))
        saved = json.loads(json.dumps(first.state_dict()))
        del first
        states = find_states(saved)
        assert len(states) == 2 and all("worker" in s for s in states)
        it = dataset.open(out).to_torch(**kw)
        with pytest.raises(InvalidArgumentError, match="saved by worker 0 of 2 on rank 0 of 1"):
            it.load_state_dict(states[0])  # one worker's state, not in that worker
        loader = StatefulDataLoader(dataset.open(out).to_torch(**kw), batch_size=4, num_workers=2)
        loader.load_state_dict(saved)  # the same layout: exact
        assert sorted(head + _xs(loader)) == list(range(24))
        if hint is None:
            with pytest.raises(InvalidArgumentError, match="per_sample=True"):
                it.load_state_dict(saved)
        else:  # a global resume from all the states: exact with the hint
            it.load_state_dict(saved)
            assert sorted(head + _xs(it)) == list(range(24))


def _batches(epoch: int = 0, start: int = 0) -> list[list[int]]:
    """The batches of ``B`` one rank with any number of workers delivers from ``start``."""
    order = _order(epoch)[start:]
    return [order[i : i + B] for i in range(0, len(order), B)]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_plain_dataloader_workers_state_refused_not_replayed(ds_path: str, context: str) -> None:
    """Regression (issue 36): after ``DataLoader(it, num_workers=2)`` and a break after 10
    batches, ``it.state_dict()`` in the main process said ``samples: 0`` without a word and a
    resume from it replayed the epoch. The main process cannot know what the loop took (the
    workers run ahead), so it refuses and names the ways that are exact; those resume
    exactly: no sample twice, none lost."""
    it = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    assert it.state_dict()["samples"] == 0  # before any iteration: the start, as documented
    loader = DataLoader(it, batch_size=None, num_workers=2, multiprocessing_context=context)
    head = _collect(loader, 10)
    assert head == _batches()[:10]
    with pytest.raises(InvalidArgumentError, match=r"DataLoader worker") as refused:
        it.state_dict()
    assert "state_dict(samples=N)" in str(refused.value)
    assert "StatefulDataLoader" in str(refused.value)
    if context == "spawn":
        return  # one spawned case is enough for the worker-to-main signal; the rest is fork
    state = json.loads(json.dumps(it.state_dict(samples=len(head) * B)))  # the trainer's count
    resumed = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["samples"] == 10 * B  # known again: the point just loaded
    rest = _collect(DataLoader(resumed, batch_size=None, num_workers=2))
    assert head + rest == _batches()
    with pytest.raises(InvalidArgumentError, match="DataLoader worker"):
        resumed.state_dict()  # a pass run to its end in the workers: still unknown here
    resumed.set_epoch(1)  # another epoch: nothing of it consumed, known again
    assert (resumed.state_dict()["epoch"], resumed.state_dict()["samples"]) == (1, 0)


def test_a_peek_in_the_main_process_keeps_the_refusal(ds_path: str) -> None:
    """Regression (hostile review of issue 36, L7): after workers took batches, one
    ``next(iter(it))`` in the main process (a look at a batch's keys) cleared the 'workers
    ran' flag, and ``state_dict()`` then returned the peek's count (one batch) silently, a
    resume from it replaying the epoch. It stays refused until ``load_state_dict`` or
    ``set_epoch`` (another epoch) makes the position known again."""
    it = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    head = _collect(DataLoader(it, batch_size=None, num_workers=2), 3)
    assert next(iter(it))["id"].tolist() == _batches()[0]  # the peek
    with pytest.raises(InvalidArgumentError, match="DataLoader worker"):
        it.state_dict()
    for batch in it:  # a whole pass of its own in the main process: still unknown
        assert batch["id"].numel() == B
    with pytest.raises(InvalidArgumentError, match="DataLoader worker"):
        it.state_dict()
    it.load_state_dict(it.state_dict(samples=len(head) * B))  # known again
    batches = iter(it)
    assert next(batches)["id"].tolist() == _batches()[3]
    assert it.state_dict()["samples"] == 4 * B


def test_persistent_workers_follow_set_epoch_and_load_state_dict(ds_path: str) -> None:
    """Regression (issue 35/36): with ``persistent_workers=True`` the workers kept the copy
    they started with, so ``set_epoch`` and ``load_state_dict`` in the main process never
    reached them (the second pass was epoch 0 again, the resume the whole epoch)."""
    it = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    loader = DataLoader(it, batch_size=None, num_workers=2, persistent_workers=True)
    assert _collect(loader) == _batches(0)
    it.set_epoch(1)
    assert _collect(loader) == _batches(1)
    it.load_state_dict(it.state_dict(samples=7 * B))
    assert _collect(loader) == _batches(1, 7 * B)
    assert _collect(loader) == _batches(1)  # that pass used the resume point up


@pytest.mark.parametrize(
    ("context", "workers", "persistent"),
    [("fork", 0, False), ("fork", 2, False), ("fork", 2, True), ("spawn", 1, False)],
)
def test_a_loaded_resume_point_is_used_up_by_a_pass_whatever_the_workers(
    ds_path: str, context: str, workers: int, persistent: bool
) -> None:
    """Regression (review35j j06): after ``load_state_dict``, DataLoader workers made afresh
    for each pass (not persistent) are copies of the main process's object, whose resume
    point no pass of theirs moves, so every later pass of the epoch (without ``set_epoch``,
    or with ``set_epoch`` of the same epoch) started at that point again (14, 14, 14 of 20),
    where no workers and persistent ones give 14, 20, 20. Now all agree: a pass broken off
    (here long before its end) keeps the resume point, one run to its end uses it up."""
    it = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    kw: dict[str, Any] = {"batch_size": None, "num_workers": workers}
    if workers:
        kw.update(multiprocessing_context=context, persistent_workers=persistent)
    loader = DataLoader(it, **kw)
    it.load_state_dict(it.state_dict(samples=7 * B))
    if context == "fork":  # (spawned workers cost seconds a pass: the main case only)
        assert _collect(loader, 2) == _batches(0, 7 * B)[:2]  # broken off: the point stays
    assert _collect(loader) == _batches(0, 7 * B)  # run to its end: the point is used up
    assert _collect(loader) == _batches(0)
    assert len(it) == len(_batches(0))
    if context == "fork":
        it.set_epoch(0)  # the same epoch, as a loop calling set_epoch(epoch) each pass does
        assert _collect(loader) == _batches(0)


@pytest.mark.parametrize("persistent", [False, True])
def test_with_workers_a_pass_produced_to_its_end_uses_the_point_up(
    ds_path: str, persistent: bool
) -> None:
    """The documented limit (review35m m01): with DataLoader workers a pass counts as run to
    its end once its workers produced their shares (nothing tells them which batches the
    loop took), so a pass broken off within its last ``prefetch_factor x num_workers``
    batches uses the resume point up once they did (here: waited for), and the next pass is
    the whole epoch; loading the state again restores the point."""
    total = len(_order())
    it = dataset.open(ds_path).to_torch(shuffle=True, seed=SEED, batch_size=B)
    loader = DataLoader(
        it,
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
        persistent_workers=persistent,
    )
    it.load_state_dict(it.state_dict(samples=total - 2 * B))  # 2 batches left
    assert len(it) == 2
    for batch in loader:  # broken off after its first batch, once the workers produced all
        assert batch["id"].tolist() == _batches(0, total - 2 * B)[0]
        deadline = time.monotonic() + 60
        while len(it) == 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        break
    assert len(it) == len(_batches(0))
    assert _collect(loader) == _batches(0)  # the whole epoch
    it.load_state_dict(it.state_dict(samples=total - 2 * B))  # the point again
    assert _collect(loader) == _batches(0, total - 2 * B)


class _InWorker(IterableDataset):  # type: ignore[type-arg]
    """Reports, from inside a DataLoader worker, whether the batches are in shared memory."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Any:
        for batch in self.inner:
            yield {"shared": all(v.is_shared() for k, v in batch.items() if k != "key"),
                   "batch": batch}  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "want"),
    [
        ("F32", torch.float32),
        ("BF16", torch.bfloat16),
        ("F16", torch.float16),
        ("F8_E4M3", torch.float8_e4m3fn),
        ("F8_E5M2", torch.float8_e5m2),
        ("U16", torch.uint16),
        ("I8", torch.int8),
        ("F64", torch.float64),
    ],
)
def test_batches_equal_the_written_values(tmp_path: Path, dtype: str, want: Any) -> None:
    out = str(tmp_path / dtype)
    values = (np.arange(50 * 3, dtype=np.float32) % 13).reshape(50, 3)
    dataset.write({"v": values}, out, batch_size=8, shapes={"v": [3]}, dtype=dtype)
    stored = values.astype(from_safetensors(dtype).numpy).astype(np.float32)
    ds = dataset.open(out)
    for shuffle in (False, True):
        it = ds.to_torch(batch_size=7, shuffle=shuffle, seed=2, partitions=3, shuffle_block=9)
        order = epoch_order([8] * 6 + [2], seed=2, shuffle=shuffle, unit=7, partitions=3,
                            shuffle_block=9)  # fmt: skip
        loader = DataLoader(_InWorker(it), batch_size=None, num_workers=2)
        got = list(loader)
        assert all(g["shared"] for g in got)
        batches = [g["batch"]["v"] for g in got]
        assert [b.shape[0] for b in batches] == [7] * 7 + [1]
        assert batches[0].dtype == want
        rows = torch.cat(batches).to(torch.float32).numpy()
        assert rows.tolist() == stored[order].tolist()


def test_kv_batches_and_drop_last(tmp_path: Path) -> None:
    out = str(tmp_path / "kv")
    keys = [f"k{i:02d}" for i in range(23)]
    dataset.write({"name": keys, "v": np.eye(23, dtype=np.float32)}, out, name_col="name",
                  target_shard_size_mb=0.0005)  # fmt: skip
    ds = dataset.open(out)
    it = ds.to_torch(batch_size=4, shuffle=True, seed=1, drop_last=True)
    got = list(it)
    assert len(got) == len(it) == 5  # 23 // 4, the short last batch dropped
    for b in got:
        assert isinstance(b["key"], list) and len(b["key"]) == 4
        assert [int(k[1:]) for k in b["key"]] == b["v"].argmax(1).tolist()
    assert len({k for b in got for k in b["key"]}) == 20


def test_per_sample_mode_with_the_default_collate(ds_path: str) -> None:
    ds = dataset.open(ds_path)
    # per_sample with the DataLoader's batch size as the hint: the same batches as batch mode
    it = ds.to_torch(shuffle=True, seed=SEED, batch_size=B, per_sample=True)
    assert len(it) == N
    got = _collect(DataLoader(it, batch_size=B, num_workers=2))
    batched = _collect(DataLoader(ds.to_torch(shuffle=True, seed=SEED, batch_size=B),
                                  batch_size=None, num_workers=2))  # fmt: skip
    assert got == batched
    plain = DataLoader(ds.to_torch(shuffle=True, seed=SEED), batch_size=8, num_workers=2)
    batches = list(plain)
    assert sorted(torch.cat([b["id"] for b in batches]).tolist()) == list(range(N))
    assert batches[0]["h"].dtype == torch.bfloat16 and batches[0]["h"].shape[1:] == (2,)
    # resume in per-sample mode at the trainer's own count
    it = ds.to_torch(seed=SEED, batch_size=B, per_sample=True)
    it.load_state_dict(it.state_dict(samples=295))
    assert [int(s["id"]) for s in it] == list(range(295, 300))
    it.set_epoch(1)  # another epoch: from its start
    assert len(list(it)) == N
