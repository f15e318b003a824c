"""Concurrent writers of one dataset (issue 23): of two jobs that overlap, the first to
commit wins and the other fails with ConcurrentWriteError, publishing nothing; no manifest
ever lists the shards of a writer that lost. On a local disk (a lock of the folder around
the compare and the rename), on S3 (moto in server mode: conditional puts), on fsspec's
``memory://`` and in a MemoryStore."""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorfile.dataset.writing.writer as writer_module
from tensorfile import dataset
from tensorfile.dataset.layout.manifest import read_manifest
from tensorfile.dataset.writing.columns import columns_and_keys
from tensorfile.dataset.writing.options import parse_options
from tensorfile.errors import ConcurrentWriteError, SourceError
from tensorfile.sources import LocalStore, MemoryStore, Store
from tests.helpers.datasets import cols_a, cols_b
from tests.helpers.manifests import assert_consistent

WHERE = ["local", "s3", "memory-url", "memory-store"]
MANIFEST = "dataset_manifest.json"


@pytest.fixture
def make_store(s3: Any, tmp_path: Path) -> Callable[[str], Store]:
    def make(where: str) -> Store:
        if where == "local":
            return writer_module.make_folder(str(tmp_path / f"ds-{uuid.uuid4().hex[:6]}"))
        if where == "s3":
            return writer_module.make_folder(s3.url(s3.bucket(), "ds"), s3.options)
        if where == "memory-url":
            return writer_module.make_folder(f"memory://concurrent-{uuid.uuid4().hex}/ds")
        return MemoryStore(name=f"concurrent-{uuid.uuid4().hex[:6]}")

    return make


class Job:
    """One write job, started now (its base is the manifest as it is now), committed later."""

    def __init__(self, store: Store, data: dict[str, Any], mode: str) -> None:
        self.store, self.mode = store, mode
        self.opts = parse_options({"batch_size": 2})
        self.job = uuid.uuid4().hex
        writer_module.start_job(store, self.job)
        cols, rows, keys = columns_and_keys(data, self.opts)
        folder = writer_module.staging_folder(store, self.job, 0)
        self.result = writer_module.write_task(cols, rows, keys, self.opts, folder, 0, store)

    @property
    def shards(self) -> set[str]:
        return {s.shard_path for s in self.result.shards}

    def commit(self) -> None:
        try:
            writer_module.commit(
                self.store, [self.result], mode=self.mode, opts=self.opts, job=self.job
            )
        except BaseException:
            writer_module.abort(self.store, self.job)  # as write() and Spark do
            raise


def _ids(store: Store) -> list[int]:
    with dataset.open(store) as ds:
        return sorted(int(s["id"]) for s in ds)


def _root_shards(store: Store) -> set[str]:
    return {n for n in store.list_files() if n.endswith(".safetensors")}


def _listed(store: Store) -> set[str]:
    m = read_manifest(store)
    assert m is not None
    return {s.shard_path for s in m.shards}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("first", ["overwrite", "append"])
def test_append_racing_overwrite_fails_the_later_commit(
    make_store: Callable[[str], Store], where: str, first: str
) -> None:
    store = make_store(where)
    dataset.write(cols_a(4), store, batch_size=2)
    before = _listed(store)
    second = "append" if first == "overwrite" else "overwrite"
    winner = Job(store, cols_b(3), first)
    loser = Job(store, {"id": np.arange(50, 53), "x": np.ones((3, 2), np.float32)}, second)
    winner.commit()
    with pytest.raises(ConcurrentWriteError, match="another writer committed"):
        loser.commit()
    # the dataset is the winner's: nothing of the loser is listed or left in the folder
    want = [100, 101, 102] if first == "overwrite" else [0, 1, 2, 3, 100, 101, 102]
    assert _ids(store) == want
    listed = _listed(store)
    assert not listed & loser.shards
    assert _root_shards(store) == listed
    assert listed == (winner.shards if first == "overwrite" else before | winner.shards)
    assert store.list_files(f"_staging/{loser.job}") == []


@pytest.mark.parametrize("where", WHERE)
def test_two_first_writes_of_a_new_dataset(make_store: Callable[[str], Store], where: str) -> None:
    store = make_store(where)
    a, b = Job(store, cols_a(3), "overwrite"), Job(store, cols_b(2), "append")
    b.commit()
    with pytest.raises(ConcurrentWriteError, match="which was none"):
        a.commit()
    assert _ids(store) == [100, 101]
    assert _root_shards(store) == b.shards


@pytest.mark.parametrize("where", WHERE)
def test_a_job_that_no_one_raced_commits(make_store: Callable[[str], Store], where: str) -> None:
    store = make_store(where)
    dataset.write(cols_a(2), store, batch_size=2)
    Job(store, cols_b(2), "append").commit()
    Job(store, cols_b(3), "append").commit()  # starts after the first committed: builds on it
    assert _ids(store) == [0, 1, 100, 100, 101, 101, 102]


@pytest.mark.parametrize("where", ["local", "s3", "memory-url"])
def test_the_commit_point_itself_is_conditional(
    make_store: Callable[[str], Store], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that slips in between the early check and the manifest write (the race the
    check alone cannot see) is still caught: by the folder's lock and the version compared
    under it, by S3's If-Match put, by the process lock of memory://."""
    store = make_store(where)
    dataset.write(cols_a(2), store, batch_size=2)
    loser = Job(store, cols_b(2), "append")
    cls = type(store)
    real_check = cls.check_version

    def skip(self: Store, name: str, expected: str | None) -> None:
        pass

    def check_then_race(self: Store, name: str, expected: str | None) -> None:
        real_check(self, name, expected)  # the commit's early check passes
        # from here on S3 has only the server's condition; the others their lock
        monkeypatch.setattr(cls, "check_version", skip if where == "s3" else real_check)
        dataset.write(cols_a(3), store, batch_size=2, mode="overwrite")  # another writer

    monkeypatch.setattr(cls, "check_version", check_then_race)
    with pytest.raises(ConcurrentWriteError):
        loser.commit()
    monkeypatch.undo()
    assert _ids(store) == [0, 1, 2]
    assert not _listed(store) & loser.shards
    assert _root_shards(store) == _listed(store)


def test_s3_refuses_a_stale_put_itself(s3: Any) -> None:
    """The conditional put is the server's: with the client's own check skipped, a put over
    a version that is no longer there is refused (412), and one where a file must not exist
    yet (If-None-Match) too."""
    store = writer_module.make_folder(s3.url(s3.bucket(), "cas"), s3.options)
    store.write_if("m.json", b"one", None)
    v1 = store.version("m.json")
    assert v1 is not None and v1.startswith("etag:")
    store.write_if("m.json", b"two", v1)
    v2 = store.version("m.json")
    assert v2 != v1
    skip = type(store).check_version
    try:
        type(store).check_version = lambda self, name, expected: None  # type: ignore[method-assign]
        with pytest.raises(ConcurrentWriteError, match="changed by another writer"):
            store.write_if("m.json", b"three", v1)
        with pytest.raises(ConcurrentWriteError):
            store.write_if("m.json", b"three", None)
    finally:
        type(store).check_version = skip  # type: ignore[method-assign]
    assert store.read_bounded("m.json", "f", 10) == b"two"


@pytest.mark.parametrize("where", WHERE)
def test_write_if_rules(make_store: Callable[[str], Store], where: str) -> None:
    store = make_store(where)
    assert store.conditional_writes
    assert store.version("x.json") is None
    store.write_if("x.json", b"1", None)
    v = store.version("x.json")
    with pytest.raises(ConcurrentWriteError):
        store.write_if("x.json", b"2", None)  # it must not exist yet
    store.write_atomic("x.json", b"3")  # another writer
    assert store.version("x.json") != v
    with pytest.raises(ConcurrentWriteError):
        store.write_if("x.json", b"4", v)
    assert store.read_bounded("x.json", "f", 10) == b"3"


def test_a_job_whose_marker_is_gone_publishes_nothing(tmp_path: Path) -> None:
    store = writer_module.make_folder(str(tmp_path / "ds"))
    job = Job(store, cols_a(2), "overwrite")
    writer_module.abort(store, job.job)  # another process aborted the job
    with pytest.raises(ConcurrentWriteError, match="not running"):
        job.commit()
    assert read_manifest(store) is None
    assert _root_shards(store) == set()


def test_a_forged_job_marker_is_refused(tmp_path: Path) -> None:
    store = writer_module.make_folder(str(tmp_path / "ds"))
    job = Job(store, cols_a(2), "overwrite")
    (tmp_path / "ds" / "_staging" / job.job / "_JOB").write_text('{"base": 7}')
    with pytest.raises(SourceError, match="not a job marker"):
        job.commit()
    assert read_manifest(store) is None


# -- real processes and threads -------------------------------------------------------------


def _append_many(path: str, worker: int, rounds: int, barrier: Any, out: Any) -> None:
    won = lost = 0
    for r in range(rounds):
        barrier.wait()
        try:
            rows = {"id": np.full(2, worker * 1000 + r), "x": np.ones((2, 2), np.float32)}
            dataset.write(rows, path, batch_size=2, mode="append")
            won += 1
        except ConcurrentWriteError:
            lost += 1
    out.put((worker, won, lost))


def test_processes_appending_at_once_lose_cleanly_and_lose_nothing(tmp_path: Path) -> None:
    """Four processes append to one local dataset in lockstep, ten rounds: each append wins
    or fails with ConcurrentWriteError; the dataset holds exactly the winners' rows, and its
    folder exactly the listed shards."""
    path = str(tmp_path / "ds")
    dataset.write({"id": np.arange(2), "x": np.zeros((2, 2), np.float32)}, path, batch_size=2)
    ctx = multiprocessing.get_context("spawn")
    n, rounds = 4, 10
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_append_many, args=(path, w, rounds, barrier, out)) for w in range(n)
    ]
    for p in procs:
        p.daemon = True
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    won = sum(r[1] for r in results)
    assert won + sum(r[2] for r in results) == n * rounds
    assert won >= rounds  # every round has a winner
    doc = assert_consistent(path)
    assert doc["total_samples"] == 2 + 2 * won


def _hold_lock_forever(root: str, ready: Any) -> None:
    store = LocalStore(root)
    with store.locked():
        ready.set()
        signal.pause()


def test_a_writer_killed_holding_the_lock_does_not_block_the_next(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    dataset.write(cols_a(2), path, batch_size=2)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock_forever, args=(path, ready), daemon=True)
    holder.start()
    try:
        assert ready.wait(60)
        store = LocalStore(path)
        store.lock_timeout = 0.3
        with pytest.raises(ConcurrentWriteError, match="held the folder's lock"):
            dataset.write(cols_b(2), store, batch_size=2, mode="append")
        assert _ids(store) == [0, 1]
    finally:
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)  # killed mid-commit: the kernel drops its lock
        holder.join(30)
    dataset.write(cols_b(2), path, batch_size=2, mode="append")
    assert _ids(LocalStore(path)) == [0, 1, 100, 101]
    assert_consistent(path)


# -- the index follows its own manifest ----------------------------------------------------


def _kv(names: list[str]) -> dict[str, Any]:
    return {"name": names, "v": np.arange(len(names) * 2, dtype=np.int8).reshape(-1, 2)}


def _after_first_manifest(
    monkeypatch: pytest.MonkeyPatch, store: Store, race: Callable[[], None]
) -> None:
    """Run ``race`` (another writer's whole commit) right after the next manifest write."""
    cls = type(store)
    real = cls.write_if

    def write_if(self: Store, name: str, data: bytes, expected: str | None) -> str | None:
        out = real(self, name, data, expected)
        monkeypatch.setattr(cls, "write_if", real)
        race()
        return out

    monkeypatch.setattr(cls, "write_if", write_if)


@pytest.mark.parametrize("where", WHERE)
def test_a_late_index_does_not_replace_a_later_commits(
    make_store: Callable[[str], Store], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose manifest another commit replaced before its index was written leaves
    the index to that later commit (found by a hostile review: the late index landed last
    and was stale until the next write)."""
    from tensorfile.dataset.layout.index import read_index

    store = make_store(where)
    dataset.write(_kv(["a", "b"]), store, name_col="name", generate_index=True)
    _after_first_manifest(
        monkeypatch,
        store,
        lambda: dataset.write(
            _kv(["z"]), store, name_col="name", generate_index=True, mode="append"
        ),
    )
    dataset.write(_kv(["c", "d"]), store, name_col="name", generate_index=True, mode="append")
    manifest = read_manifest(store)
    assert manifest is not None
    index = read_index(store, manifest)
    assert index is not None  # current: it names every key of the final dataset
    assert sorted(index) == [f"{k}__v" for k in "abcdz"]


@pytest.mark.parametrize("where", WHERE)
def test_an_overwrite_does_not_remove_the_index_of_a_later_commit(
    make_store: Callable[[str], Store], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An overwrite without an index removes the old one only while its own manifest is
    current: an append that asked for an index and committed in between keeps it."""
    from tensorfile.dataset.layout.index import read_index

    store = make_store(where)
    dataset.write(_kv(["a"]), store, name_col="name", generate_index=True)
    _after_first_manifest(
        monkeypatch,
        store,
        lambda: dataset.write(
            _kv(["y"]), store, name_col="name", generate_index=True, mode="append"
        ),
    )
    dataset.write(_kv(["p", "q"]), store, name_col="name")  # overwrite, no index
    manifest = read_manifest(store)
    assert manifest is not None
    index = read_index(store, manifest)
    assert index is not None
    assert sorted(index) == ["p__v", "q__v", "y__v"]
