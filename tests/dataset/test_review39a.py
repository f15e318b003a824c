"""A hostile tester's findings on the feed's threaded loader (issue 39, :mod:`.torch_loader`,
:mod:`.torch_ring`): each test failed before its fix.

* a kept ``x.untyped_storage()`` (or ``x.storage()``) did not keep its buffer: torch keeps
  one Python object per storage, which adds nothing to the storage's use count once made;
* a column kept alone (``labels.append(b["label"])``, the metrics pattern) kept the whole
  batch's buffer (every column) out of the ring: a fresh buffer for every batch, an epoch
  of data held where ``DataLoader`` holds only the labels;
* a batch sent to another process (``torch.multiprocessing``: its storage moved into shared
  memory in place) was overwritten by a later batch while the other process read it;
* ``break`` or an exception in the loop left the gathering threads running (the loader kept
  the pass alive), until the next pass or ``close()``;
* ``set_epoch`` (the loader's or the feed's) or the feed's ``load_state_dict`` mid-pass let
  the pass under way write its position into the new epoch's state;
* inside a DataLoader worker every worker gave the whole rank (duplicates) through the
  worker's queue (overwritten batches); in a forked child the parent's pass hung;
* a mid-pass loader could not be pickled or copied (``TypeError`` about a generator);
* a pass whose last batch was handed out but not followed by one more ``next`` (``zip``,
  ``islice``) kept its resume point: the next pass repeated the resumed part;
* the ring kept polling every buffer the caller held (quadratic in a pass kept whole);
* after a ``DataLoader`` pass over the same feed the loader's ``state_dict`` gave its own old
  position (the feed's refuses: the workers' loop is not known);
* ``device="meta"`` handed out tensors without data, other non-CUDA devices failed at the
  first batch with torch's errors;
* a refused ``set_epoch``/``load_state_dict`` had already ended the pass under way.

Plus coverage that passed before: the loader against ``DataLoader`` as oracle and resume at
any moment for random splits (hypothesis), derived views and tensors, KeyboardInterrupt,
S3 with and without the shard cache (a shard deleted from the bucket), the last batches
kept (the ring's watch).
"""

from __future__ import annotations

import copy
import gc
import os
import pickle
import signal
import threading
import time
from collections import deque
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset

from tensorfile import dataset
from tensorfile.dataset.feed.torch_batches import Column
from tensorfile.dataset.feed.torch_ring import Ring
from tensorfile.dataset.order import epoch_order
from tensorfile.errors import InvalidArgumentError, InvalidTypeError, TensorFileError

N, SHARD, B, SEED, WIDTH = 150, 16, 8, 3, 64
COUNTS = [SHARD] * (N // SHARD) + [N % SHARD]


@pytest.fixture(scope="module")
def ds_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("review39a") / "ds")
    ids = np.arange(N, dtype=np.int64)
    dataset.write(
        {"id": ids, "x": np.repeat(ids[:, None], WIDTH, 1).astype(np.float32)},
        out,
        batch_size=SHARD,
    )
    return out


def _feed(path: str, **kw: Any) -> Any:
    opts = {"batch_size": B, "shuffle": True, "seed": SEED, "partitions": 4, "shuffle_block": 16}
    return dataset.open(path).to_torch(**{**opts, **kw})


def _order(epoch: int = 0) -> list[int]:
    return epoch_order(
        COUNTS, seed=SEED, epoch=epoch, shuffle=True, partitions=4, shuffle_block=16, unit=B
    ).tolist()


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tensorfile-feed")]


def _check(batch: dict[str, Any]) -> None:
    """The batch's x rows hold its ids (nothing overwritten)."""
    x, ids = batch["x"], batch["id"]
    assert torch.equal(x, ids[:, None].float().expand(-1, WIDTH))


# -- reuse -------------------------------------------------------------------------------


def test_a_column_kept_alone_does_not_keep_the_batch(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2, depth=2)
    labels, x_buffers = [], set()
    for b in loader:
        labels.append(b["id"])  # the metrics pattern: every batch's labels kept
        x_buffers.add(b["x"].data_ptr())
        _check(b)
    assert [i for t in labels for i in t.tolist()] == _order()
    # the x columns are reused as when nothing is kept (depth, the one held, slack)
    assert len(x_buffers) <= 2 + 4
    # and a kept x column alone: the ids come back, the kept x stay right
    xs, id_buffers = [], set()
    for b in loader:
        xs.append(b["x"][:, 0])
        id_buffers.add(b["id"].data_ptr())
    assert [int(v) for t in xs for v in t.tolist()] == _order()
    assert len(id_buffers) <= 2 + 4


def test_views_and_derived_tensors_are_never_overwritten(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=3, depth=2)
    kept: list[tuple[int, Any]] = []
    for i, b in enumerate(loader):
        x = b["x"]
        derived: list[Any] = [
            x.T,
            x.view(torch.int32),
            x.reshape(-1),
            x[:, :1].expand(-1, 3),
            np.asarray(x),
            memoryview(x.numpy()),
            torch.as_tensor(x),
            torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x)),
            x.untyped_storage(),
            x.requires_grad_() * 1.0,  # autograd keeps x for the backward pass
            {"nested": [x[1:]]},
        ]
        kept.append((i, derived[i % len(derived)]))
        del x, b, derived
    order = _order()
    for i, obj in kept:
        want = order[i * B : (i + 1) * B]
        kind = i % 11
        if kind == 0:
            got = obj[0].tolist()
        elif kind == 1:
            got = obj.view(torch.float32)[:, 0].tolist()
        elif kind == 2:
            got = obj[::WIDTH].tolist()
        elif kind == 3:
            got = obj[:, 2].tolist()
        elif kind == 4:
            got = obj[:, 0].tolist()
        elif kind == 5:
            got = np.asarray(obj)[:, 0].tolist()
        elif kind in (6, 7):
            got = obj[:, 0].tolist()
        elif kind == 8:
            got = torch.empty(0).set_(obj)[: len(want) * WIDTH : WIDTH].tolist()
        elif kind == 9:
            got = obj[:, 0].detach().tolist()
        else:
            got = obj["nested"][0][:, 0].tolist()
            want = want[1:]
        assert [int(v) for v in got] == want, (i, kind)


def _receive(queue: Any, answers: Any) -> None:
    bad = 0
    while (item := queue.get()) is not None:
        ids, x = item
        time.sleep(0.02)  # the sender goes on meanwhile
        bad += not torch.equal(x[:, 0], ids.float())
        del x
    answers.send(bad)


def test_batches_sent_to_another_process_are_not_overwritten(ds_path: str) -> None:
    ctx = tmp.get_context("fork")
    queue, (answer, answers) = ctx.SimpleQueue(), ctx.Pipe(duplex=False)
    child = ctx.Process(target=_receive, args=(queue, answers))
    child.start()
    try:
        for b in _feed(ds_path).loader(threads=2, depth=2):
            queue.put((b["id"].clone(), b["x"]))  # moves x's storage into shared memory
            del b
        queue.put(None)
        assert answer.poll(60)
        assert answer.recv() == 0
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
        queue.close()
        answer.close()
        answers.close()


def test_a_caller_keeping_its_last_batches_gets_their_buffers_back(ds_path: str) -> None:
    last: deque[dict[str, Any]] = deque(maxlen=10)  # (gradient accumulation, a replay)
    ptrs = set()
    for b in _feed(ds_path).loader(threads=2, depth=1):
        _check(b)
        last.append(b)
        ptrs.add(b["x"].data_ptr())
    assert len(ptrs) <= 10 + 1 + 2  # the kept ones, the one in flight, slack
    for b in last:
        _check(b)


def test_a_ring_tracks_a_bounded_number_of_held_buffers() -> None:
    ring = Ring({"x": Column("F32", [4])}, rows=2, keep=3)
    held = []
    for _ in range(500):
        buf = ring.take()
        views = ring.views(buf, 2)
        views["x"][:] = len(held)
        held.append(ring.hand_out(buf, 2, views))
        del views
    assert len(ring._out) <= ring.track < 500  # (each take polls the buffers out)
    assert [int(b["x"][0, 0]) for b in held] == list(range(500))
    del held
    ring.take()
    assert len(ring._free) <= ring.keep


# -- passes broken off -------------------------------------------------------------------


def test_break_and_exceptions_in_the_loop_stop_the_threads(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=3)
    for _ in loader:
        break
    assert not _threads()
    with pytest.raises(ZeroDivisionError):
        for _ in loader:
            _ = 1 / 0
    assert not _threads()
    first = next(iter(loader))  # an iterator dropped at once
    assert first["id"].tolist() == _order()[:B]
    assert not _threads()
    # the state is the batches handed out, as DataLoader's loop would count them
    assert loader.state_dict()["samples"] == B


def _interrupt(loader: Any) -> None:
    it = iter(loader)
    next(it)
    raise KeyboardInterrupt


def test_keyboard_interrupt_stops_the_threads(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    with pytest.raises(KeyboardInterrupt):
        _interrupt(loader)
    gc.collect()
    assert not _threads()
    assert [i for b in loader for i in b["id"].tolist()] == _order()


@pytest.mark.parametrize("how", ["loader.set_epoch", "feed.set_epoch", "feed.load_state_dict"])
def test_the_epoch_or_state_changed_mid_pass(ds_path: str, how: str) -> None:
    feed = _feed(ds_path)
    loader = feed.loader(threads=2)
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    if how == "loader.set_epoch":
        loader.set_epoch(1)
        want = (1, 0)
    elif how == "feed.set_epoch":
        feed.set_epoch(1)
        want = (1, 0)
    else:
        feed.load_state_dict(feed.state_dict(samples=5 * B))
        want = (0, 5 * B)
    assert len(head) == 3
    rest = list(it)  # the pass under way ends: it cannot go on in another epoch's state
    assert rest == []
    state = loader.state_dict()
    assert (state["epoch"], state["samples"]) == want
    assert [i for b in loader for i in b["id"].tolist()] == _order(want[0])[want[1] :]
    assert not _threads()


# -- processes -----------------------------------------------------------------------------


class _Wrapped(IterableDataset):  # type: ignore[type-arg]
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)


def test_inside_a_dataloader_worker_it_is_refused_clearly(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    batches = iter(DataLoader(_Wrapped(loader), batch_size=None, num_workers=2))
    with pytest.raises(InvalidArgumentError, match="DataLoader worker"):
        next(batches)
    batches._shutdown_workers()  # (now: a garbage collection of it later waits 5 s a worker)
    assert [i for b in loader for i in b["id"].tolist()] == _order()


def test_a_forked_child_cannot_go_on_with_the_parents_pass(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=1, depth=2)
    it = iter(loader)
    next(it)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reports what happens, within 10 s
        signal.alarm(10)
        try:
            for _ in it:
                pass
            answer = b"went on"
        except InvalidArgumentError as exc:
            answer = b"refused" if b"fork" in str(exc).encode() else b"other"
        except BaseException:
            answer = b"other"
        try:  # a pass of its own works
            got = [i for b in loader for i in b["id"].tolist()]
            answer += b" own pass" if got == _order() else b" bad pass"
        except BaseException:
            answer += b" no pass"
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as pipe:
            answer = pipe.read()
    finally:
        os.waitpid(pid, 0)
    assert answer == b"refused own pass"
    assert [i for b in it for i in b["id"].tolist()] == _order()[B:]  # the parent's goes on


def test_a_loader_mid_pass_pickles_and_copies(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    it = iter(loader)
    next(it), next(it)
    for again in (pickle.loads(pickle.dumps(loader)), copy.deepcopy(loader)):
        assert again.state_dict() == loader.state_dict()
        assert (again.threads, again.depth) == (loader.threads, loader.depth)
        again.load_state_dict(again.state_dict())
        assert [i for b in again for i in b["id"].tolist()] == _order()[2 * B :]
    assert [i for b in it for i in b["id"].tolist()] == _order()[2 * B :]


# -- resume ------------------------------------------------------------------------------


def test_the_last_batch_handed_out_ends_the_pass(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    loader.load_state_dict(loader.state_dict(samples=10 * B))
    steps = len(loader)
    got = [b["id"].tolist() for _, b in zip(range(steps), loader, strict=False)]
    assert [i for b in got for i in b] == _order()[10 * B :]
    assert loader.state_dict()["samples"] == N  # the epoch is done
    assert [i for b in loader for i in b["id"].tolist()] == _order()  # the resume point used up


_split = st.tuples(
    st.integers(1, 4),  # world size
    st.sampled_from([True, False, "pad"]),  # even
    st.booleans(),  # drop_last
    st.booleans(),  # shuffle
)


@settings(max_examples=12, deadline=None)
@given(
    first=_split,
    second=_split,
    threads=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    depth=st.integers(1, 5),
    stop=st.integers(0, 12),
    epoch=st.integers(0, 2),
)
def test_the_same_batches_as_dataloader_and_resume_at_any_moment(
    ds_path: str,
    first: tuple[int, Any, bool, bool],
    second: tuple[int, Any, bool, bool],
    threads: tuple[int, int],
    depth: int,
    stop: int,
    epoch: int,
) -> None:
    world, even, drop_last, shuffle = first

    def kw(w: int, r: int, e: Any, d: bool) -> dict[str, Any]:
        return {"rank": r, "world_size": w, "even": e, "drop_last": d, "shuffle": shuffle}

    states = []
    for rank in range(world):
        oracle = _feed(ds_path, **kw(world, rank, even, drop_last))
        oracle.set_epoch(epoch)
        want = [b["id"].tolist() for b in DataLoader(oracle, batch_size=None)]
        loader = _feed(ds_path, **kw(world, rank, even, drop_last)).loader(
            threads=threads[0], depth=depth
        )
        loader.set_epoch(epoch)
        assert len(loader) == len(want)
        it = iter(loader)
        got = []
        for _ in range(min(stop, len(want))):
            b = next(it)
            _check(b)
            got.append(b["id"].tolist())
        assert got == want[: len(got)]
        states.append(loader.state_dict())
        rest = [b["id"].tolist() for b in it]
        assert got + rest == want
        loader.close()
        assert loader.state_dict()["samples"] == oracle.state_dict()["samples"]
    world2, even2, _, _ = second
    resumed: list[int] = []
    for rank in range(world2):
        loader = _feed(ds_path, **kw(world2, rank, even2, False)).loader(threads=threads[1])
        loader.load_state_dict(states)
        resumed += [i for b in loader for i in b["id"].tolist()]
    order = epoch_order(
        COUNTS,
        seed=SEED,
        epoch=epoch,
        shuffle=shuffle,
        partitions=4,
        shuffle_block=16,
        unit=B,
    ).tolist()
    left = order[max(s["samples"] for s in states) :]
    if even2 is False:  # the rest of the epoch, exactly
        assert sorted(resumed) == sorted(left)
    elif even2 == "pad":  # all of it, a few repeated
        assert set(left) <= set(resumed) and len(resumed) - len(left) < world2
    else:  # all of it but a few dropped, none twice
        assert set(resumed) <= set(left) and len(left) - len(resumed) < world2
        assert len(set(resumed)) == len(resumed)
    assert not _threads()


# -- remote --------------------------------------------------------------------------------


def _remote(s3: Any) -> str:
    url = s3.url(s3.bucket(), "feed")
    ids = np.arange(N, dtype=np.int64)
    cols = {"id": ids, "x": np.repeat(ids[:, None], WIDTH, 1).astype(np.float32)}
    dataset.write(cols, url, batch_size=SHARD, storage_options=s3.options)
    return url


@pytest.mark.parametrize("cached", [True, False])
def test_over_s3_with_and_without_the_shard_cache(s3: Any, tmp_path: Any, cached: bool) -> None:
    url = _remote(s3)
    where = {"cache_dir": tmp_path / "cache", "cache_limit": "1MiB"} if cached else {}
    ds = dataset.open(url, storage_options=s3.options, **where)
    opts = {"shuffle": True, "seed": SEED, "partitions": 4, "shuffle_block": 16}
    loader = ds.to_torch(batch_size=B, **opts).loader(threads=3, depth=3)
    it = iter(loader)
    head = []
    for _ in range(4):
        b = next(it)
        _check(b)
        head += b["id"].tolist()
    state = loader.state_dict()
    loader.close()
    # a later shard disappears from the bucket: the pass that reaches it fails clearly
    last = ds.shards[-1].shard_path
    again = dataset.open(url, storage_options=s3.options, **where)
    resumed = again.to_torch(batch_size=B, **opts).loader(threads=2)
    resumed.load_state_dict(state)
    rest: list[int] = []
    for b in resumed:
        _check(b)
        rest += b["id"].tolist()
    assert head + rest == _order()
    fresh = dataset.open(url, storage_options=s3.options, cache_dir=tmp_path / "other")
    s3.fs.rm(f"{url}/{last}")
    with pytest.raises(TensorFileError) as err:
        for b in fresh.to_torch(batch_size=B, **opts).loader(threads=2):
            _check(b)
    assert last in str(err.value)
    assert not _threads()
    for d in (ds, again, fresh):
        d.close()


def test_a_dataloader_pass_after_the_loaders_makes_its_position_unknown(ds_path: str) -> None:
    feed = _feed(ds_path)
    loader = feed.loader(threads=2)
    it = iter(loader)
    next(it), next(it)
    loader.close()
    assert loader.state_dict()["samples"] == 2 * B
    # the same feed in a DataLoader: its workers ran ahead of a loop the loader cannot see
    assert len(list(DataLoader(feed, batch_size=None, num_workers=2))) == len(feed)
    with pytest.raises(InvalidArgumentError, match="samples="):
        loader.state_dict()  # (it said 2 batches: a resume would replay the epoch)
    it = iter(loader)  # a pass of the loader's own makes it known again, for both
    next(it)
    assert loader.state_dict()["samples"] == feed.state_dict()["samples"] == B
    assert [i for b in it for i in b["id"].tolist()] == _order()[B:]


@pytest.mark.parametrize("device", ["meta", "xpu", "mps", "hpu"])
def test_a_device_it_cannot_copy_to_is_refused_when_made(ds_path: str, device: str) -> None:
    # meta handed out tensors without data; the others failed at the first batch with
    # torch's AssertionError, RuntimeError or ModuleNotFoundError
    with pytest.raises(InvalidArgumentError, match=device):
        _feed(ds_path).loader(device=device)


def test_a_refused_epoch_or_state_leaves_the_pass_under_way(ds_path: str) -> None:
    loader = _feed(ds_path).loader(threads=2)
    it = iter(loader)
    head = next(it)["id"].tolist()
    with pytest.raises(InvalidTypeError, match="epoch"):
        loader.set_epoch("1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        loader.load_state_dict({"format": "something else"})
    loader.set_epoch(0)  # the epoch under way: nothing changes
    assert head + [i for b in it for i in b["id"].tolist()] == _order()


def test_the_feed_moved_between_iter_and_the_first_batch(ds_path: str) -> None:
    feed = _feed(ds_path)
    loader = feed.loader(threads=2)
    it = iter(loader)  # the pass begins here (its state is its start)
    feed.set_epoch(1)
    assert list(it) == []  # (it yielded epoch 0's batches into epoch 1's state)
    state = loader.state_dict()
    assert (state["epoch"], state["samples"]) == (1, 0)
    assert [i for b in loader for i in b["id"].tolist()] == _order(1)
