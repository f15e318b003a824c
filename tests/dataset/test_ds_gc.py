"""``tensorfile.dataset.gc`` / ``tensorfile dataset gc`` (issue 35): what a writer killed
between moving its shards into place and publishing its manifest left is listed and removed,
the dataset reads the same afterwards, and nothing of a running writer, nothing outside the
folder and nothing a manifest lists is ever removed. Writers are real subprocesses, killed
with SIGKILL at the commit point; stores are a local folder, S3 (moto in server mode),
fsspec's ``memory://`` and a MemoryStore."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorfile import dataset
from tensorfile.dataset.layout.manifest import read_manifest
from tensorfile.dataset.writing import writer as writer_module
from tensorfile.dataset.writing.columns import columns_and_keys
from tensorfile.dataset.writing.options import parse_options
from tensorfile.errors import ConcurrentWriteError, FormatError, InvalidArgumentError, SourceError
from tensorfile.sources import FsspecStore, LocalStore, MemoryStore, Store, store_for
from tests.helpers.cli import run
from tests.helpers.datasets import cols_a, cols_b

SHARD = "part-00042-0000-123e4567-e89b-12d3-a456-426614174000.safetensors"

_WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from tensorfile import dataset
    from tensorfile.sources import store_for

    store = store_for(sys.argv[1], json.loads(sys.argv[2]) or None)
    real = type(store).write_if

    def paused(self, name, data, expected):
        if name == "dataset_manifest.json":  # shards moved into place; the commit point is next
            print("moved", flush=True)
            sys.stdin.readline()  # until the test says go, or kills this process
        return real(self, name, data, expected)

    type(store).write_if = paused
    rows = {"id": np.arange(100, 104), "x": -np.arange(8, dtype=np.float32).reshape(4, 2)}
    dataset.write(rows, store, batch_size=2, mode="append")
    print("published", flush=True)
    """
)


def _writer_at_commit_point(path: str, options: dict[str, Any]) -> subprocess.Popen[str]:
    """A real writer appending 4 rows (2 shards) to ``path``, stopped after it moved its
    shards into place and before it publishes its manifest."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, path, json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "moved\n":
        proc.kill()
        raise AssertionError(proc.communicate(timeout=30))
    return proc


@contextlib.contextmanager
def _killed_at_commit_point(path: str, options: dict[str, Any]) -> Iterator[None]:
    proc = _writer_at_commit_point(path, options)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        yield
    finally:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A dataset location a subprocess can write too, and its storage options."""
    if request.param == "local":
        return str(tmp_path / "ds"), {}
    s3 = request.getfixturevalue("s3")
    return s3.url(s3.bucket(), "ds"), dict(s3.options)


def _rows(store: Store) -> list[tuple[int, list[float]]]:
    with dataset.open(store) as ds:
        return [(int(s["id"]), s["x"].tolist()) for s in ds]


def _unlisted(store: Store) -> set[str]:
    m = read_manifest(store)
    assert m is not None
    listed = {s.shard_path for s in m.shards}
    return {n for n in store.list_files() if n.endswith(".safetensors")} - listed


def _names(items: list[dataset.Leftover]) -> set[str]:
    return {g.name for g in items}


# -- a writer killed at the commit point --------------------------------------------------


def test_a_writer_killed_before_publishing_leaves_leftovers_gc_removes(
    where: tuple[str, dict[str, Any]],
) -> None:
    path, options = where
    store = store_for(path, options or None)
    dataset.write(cols_a(6), store, batch_size=2)
    before = _rows(store)
    with _killed_at_commit_point(path, options):
        orphans = _unlisted(store)
        assert len(orphans) == 2  # the killed writer's shards, moved into place
        jobs = store.list_folders("_staging")
        assert len(jobs) == 1
        assert _rows(store) == before  # readers trust the manifest alone

        # new leftovers may be a running writer's: the default grace keeps them
        kept = dataset.gc(path, storage_options=options)
        assert kept.removed == []
        assert _names(kept.kept) == orphans | {f"_staging/{jobs[0]}/"}
        assert _unlisted(store) == orphans

        dry = dataset.gc(path, older_than=0, dry_run=True, storage_options=options)
        assert _names(dry.removed) == orphans | {f"_staging/{jobs[0]}/"}
        assert _unlisted(store) == orphans  # a dry run removes nothing

        done = dataset.gc(path, older_than="0s", storage_options=options)
        assert _names(done.removed) == orphans | {f"_staging/{jobs[0]}/"}
        assert done.kept == []
        assert _unlisted(store) == set()
        assert store.list_folders("_staging") == [] and store.list_files("_staging") == []
        assert _rows(store) == before
        assert dataset.gc(path, older_than=0, storage_options=options).removed == []
    # and the dataset takes writes again
    dataset.write(cols_b(2), store, batch_size=2, mode="append")
    assert sorted(r[0] for r in _rows(store)) == [0, 1, 2, 3, 4, 5, 100, 101]


def test_the_cli_lists_then_removes_a_killed_writers_leftovers(tmp_path: Path, capsys: Any) -> None:
    path = str(tmp_path / "ds")
    dataset.write(cols_a(4), path, batch_size=2)
    with _killed_at_commit_point(path, {}):
        orphans = _unlisted(LocalStore(path))
        dry = run(capsys, "dataset", "gc", path, "--dry-run", "--older-than", "0")
        assert dry.code == 0, dry.err
        for name in orphans:
            assert f"would remove  {name}  (a shard no manifest lists)" in dry.out
        assert "_staging/" in dry.out
        assert dry.out.splitlines()[-1].startswith("3 leftovers would be removed, 0 kept")
        assert _unlisted(LocalStore(path)) == orphans

        done = run(capsys, "dataset", "gc", path, "--older-than", "0", "--json")
        assert done.code == 0, done.err
        doc = json.loads(done.out)
        assert doc["schema"] == "tensorfile.dataset-gc/1" and doc["dry_run"] is False
        assert {g["name"] for g in doc["removed"]} >= orphans
        assert _unlisted(LocalStore(path)) == set()
        assert not os.path.exists(os.path.join(path, "_staging"))
    assert sorted(r[0] for r in _rows(LocalStore(path))) == [0, 1, 2, 3]


def test_the_cli_says_the_apis_default(capsys: Any) -> None:
    from tensorfile.dataset.writing.gc import DEFAULT_OLDER_THAN

    res = run(capsys, "dataset", "gc", "--help")
    assert res.code == 0
    assert DEFAULT_OLDER_THAN == 3600 and "default: 1h" in " ".join(res.out.split())


def test_the_cli_refuses_a_bad_duration(tmp_path: Path, capsys: Any) -> None:
    path = str(tmp_path / "ds")
    dataset.write(cols_a(2), path, batch_size=2)
    res = run(capsys, "dataset", "gc", path, "--older-than", "soon")
    assert res.code == 2 and res.out == ""
    assert "a duration is a number of seconds" in res.err


# -- a running writer ---------------------------------------------------------------------


def test_a_running_writer_keeps_its_fresh_shards(where: tuple[str, dict[str, Any]]) -> None:
    path, options = where
    store = store_for(path, options or None)
    dataset.write(cols_a(4), store, batch_size=2)
    proc = _writer_at_commit_point(path, options)
    try:
        moved = _unlisted(store)
        assert len(moved) == 2
        done = dataset.gc(path, storage_options=options)  # the default grace: an hour
        assert done.removed == []
        assert _unlisted(store) == moved
        assert store.list_folders("_staging")  # its staging stays too
        out, err = proc.communicate("go\n", timeout=60)
        assert proc.returncode == 0, err
        assert out == "published\n"
    finally:
        proc.kill()
    assert sorted(r[0] for r in _rows(store)) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert _unlisted(store) == set()


class _PublishFirst(LocalStore):
    """A local store whose first :meth:`locked` lets a paused writer publish first: the
    publish falls between gc's listing and its removal."""

    before_lock: Any = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        go, self.before_lock = self.before_lock, None
        if go is not None:
            go()
        with super().locked():
            yield


def test_a_publish_between_listing_and_removal_loses_nothing(tmp_path: Path) -> None:
    """Even with no grace at all: the manifest is checked again, under the folder's lock,
    right before each removal."""
    path = str(tmp_path / "ds")
    dataset.write(cols_a(4), path, batch_size=2)
    proc = _writer_at_commit_point(path, {})
    try:
        moved = _unlisted(LocalStore(path))
        store = _PublishFirst(path)

        def publish() -> None:
            _, err = proc.communicate("go\n", timeout=60)
            assert proc.returncode == 0, err

        store.before_lock = publish
        done = dataset.gc(store, older_than=0)
    finally:
        proc.kill()
    assert done.removed == []  # the first found listed under the lock, the other after it
    assert _names(done.kept) < moved
    assert {g.what for g in done.kept} == {"listed by a commit meanwhile"}
    assert sorted(r[0] for r in _rows(LocalStore(path))) == [0, 1, 2, 3, 100, 101, 102, 103]


@pytest.mark.parametrize("fsspec", [False, True])
def test_a_shard_written_long_ago_and_moved_in_just_now_is_kept(
    tmp_path: Path, fsspec: bool
) -> None:
    """A shard's age counts from its move into place (a rename sets the change time), not
    from when it was written: a long job's commit moves shards written hours before. In a
    local folder and through fsspec's local filesystem."""
    path = tmp_path / "ds"
    where: str | Store = (
        FsspecStore(f"file://{path}", {"auto_mkdir": True}) if fsspec else str(path)
    )
    dataset.write(cols_a(2), where, batch_size=2)
    staged = tmp_path / SHARD
    staged.write_bytes(b"staged long ago")
    day_ago = time.time() - 86400
    os.utime(staged, (day_ago, day_ago))
    os.rename(staged, path / SHARD)
    assert os.stat(path / SHARD).st_mtime == pytest.approx(day_ago)
    done = dataset.gc(where)
    assert done.removed == [] and _names(done.kept) == {SHARD}
    assert (path / SHARD).exists()


# -- stores a subprocess cannot share -----------------------------------------------------


@pytest.mark.parametrize("kind", ["memory-url", "memory-store"])
def test_leftovers_in_memory_stores(kind: str) -> None:
    store: Store = (
        store_for(f"memory://gc-{uuid.uuid4().hex}/ds")
        if kind == "memory-url"
        else MemoryStore(name=f"gc-{uuid.uuid4().hex[:6]}")
    )
    dataset.write(cols_a(4), store, batch_size=2)
    before = _rows(store)
    # what a commit killed after its moves leaves: the commit's own steps, up to the moves
    opts = parse_options({"batch_size": 2})
    job = uuid.uuid4().hex
    writer_module.start_job(store, job)
    cols, rows, keys = columns_and_keys(cols_b(4), opts)
    folder = writer_module.staging_folder(store, job, 0)
    result = writer_module.write_task(cols, rows, keys, opts, folder, 0, store)
    for entry in result.shards:
        store.move(f"{folder}/{entry.shard_path}", entry.shard_path)
    orphans = {e.shard_path for e in result.shards}
    assert _unlisted(store) == orphans

    assert dataset.gc(store).removed == []  # new (a MemoryStore: of unknown age)
    done = dataset.gc(store, older_than=0)
    assert _names(done.removed) == orphans | {f"_staging/{job}/"}
    assert _unlisted(store) == set() and store.list_files(f"_staging/{job}") == []
    assert _rows(store) == before


# -- hostile folders ----------------------------------------------------------------------


def test_nothing_outside_the_folder_and_no_symlink_is_touched(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / SHARD).write_bytes(b"not the dataset's")  # named like a shard, outside
    (outside / "job").mkdir()
    (outside / "job" / "_JOB").write_bytes(b"{}")
    other = SHARD.replace("00042", "00043")
    os.symlink(outside / SHARD, path / other)  # a link named like a shard, in the folder
    os.symlink(outside, path / "_staging")  # a staging folder that leads outside
    os.mkfifo(path / SHARD.replace("00042", "00044"))  # a FIFO named like a shard
    (path / "notes.safetensors").write_bytes(b"the user's")  # not a writer's name
    (path / "part-1.safetensors").write_bytes(b"the user's")

    done = dataset.gc(str(path), older_than=0)
    assert done.removed == []
    assert {g.name for g in done.kept} == {other, SHARD.replace("00042", "00044"), "_staging/"}
    assert (outside / SHARD).read_bytes() == b"not the dataset's"
    assert (outside / "job" / "_JOB").exists()
    assert os.path.islink(path / other) and os.path.islink(path / "_staging")
    assert (path / "notes.safetensors").exists() and (path / "part-1.safetensors").exists()
    assert len(_rows(LocalStore(str(path)))) == 2


def test_odd_names_in_the_staging_folder(tmp_path: Path) -> None:
    """Names no writer makes (a backslash, a newline) are no reason to fail, nor a way out:
    such folders are kept, a writer's job beside them goes."""
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    odd = path / "_staging" / "..\\x"
    odd.mkdir(parents=True)
    (odd / "f").write_bytes(b"x")
    job = path / "_staging" / JOB_B
    (job / "task\nx").mkdir(parents=True)
    (job / "task\nx" / "a\\b").write_bytes(b"x")
    (job / "_JOB").write_bytes(b"{}")
    dead = _plant_job(path / "_staging")
    done = dataset.gc(str(path), older_than=0)
    assert _names(done.removed) == {f"_staging/{JOB}/"}
    assert _names(done.kept) == {"_staging/..\\x/", f"_staging/{JOB_B}/"}
    assert (odd / "f").exists() and (job / "task\nx" / "a\\b").exists() and not dead.exists()
    assert len(_rows(LocalStore(str(path)))) == 2


JOB, JOB_B = "0123456789abcdef" * 2, "fedcba9876543210" * 2  # (as writer.new_job names jobs)
TASK = "task-00000-0123456789ab"


def _plant_job(folder: Path, job: str = JOB) -> Path:
    """A dead job's staging folder as a writer leaves it (its marker, one task's staged
    shard), written long ago; returns the shard's path."""
    (folder / job / TASK).mkdir(parents=True, exist_ok=True)
    (folder / job / "_JOB").write_bytes(b'{"base": null}')
    data = folder / job / TASK / SHARD
    data.write_bytes(b"x")
    for f in (data, folder / job / "_JOB"):
        os.utime(f, (time.time() - 7200,) * 2)
    return data


class _SwappingStore(LocalStore):
    """A real local store whose ``_staging`` is swapped for a symlink to ``outside`` at one
    moment of gc: right after it lists ``_staging``, or right before it removes a job."""

    def __init__(self, root: str, outside: Path, when: str) -> None:
        super().__init__(root)
        self.outside, self.when, self.swapped = outside, when, False

    def _swap(self) -> None:
        if not self.swapped:
            self.swapped = True
            staging = os.path.join(self.root, "_staging")
            os.rename(staging, staging + ".real")
            os.symlink(self.outside, staging)

    def list_folders(self, folder: str = "") -> list[str]:
        found = super().list_folders(folder)
        if self.when == "listed" and folder == "_staging":
            self._swap()
        return found

    def remove_tree(self, name: str) -> None:
        if self.when == "removing":
            self._swap()
        super().remove_tree(name)


@pytest.mark.parametrize("when", ["listed", "removing"])
def test_staging_swapped_for_a_symlink_mid_gc_removes_nothing_outside(
    tmp_path: Path, when: str
) -> None:
    """``_staging`` checked as a real folder, then swapped for a symlink to a folder outside
    before gc enters it: nothing is followed, the job is kept with why."""
    path, outside = tmp_path / "ds", tmp_path / "outside"
    dataset.write(cols_a(2), str(path), batch_size=2)
    _plant_job(path / "_staging")
    _plant_job(outside)
    store = _SwappingStore(str(path), outside, when)
    done = dataset.gc(store, older_than=0)
    assert store.swapped
    assert done.removed == []
    [kept] = done.kept
    assert kept.name == f"_staging/{JOB}/" and "is a symlink: not followed" in kept.what
    assert (outside / JOB / TASK / SHARD).read_bytes() == b"x"
    assert (path / "_staging.real" / JOB / TASK / SHARD).exists()
    with pytest.raises(SourceError, match="is a symlink: not followed"):
        store.remove_tree(f"_staging/{JOB}")  # (the store itself refuses)
    assert (outside / JOB / TASK / SHARD).exists()


def test_symlinks_in_the_staging_folder_are_never_followed(tmp_path: Path) -> None:
    """A job's folder that is a symlink, or one holding a symlink (a writer makes none), is
    kept; the link's target is left alone."""
    path, outside = tmp_path / "ds", tmp_path / "outside"
    dataset.write(cols_a(2), str(path), batch_size=2)
    _plant_job(outside)
    (path / "_staging").mkdir()
    os.symlink(outside / JOB, path / "_staging" / JOB)  # a job folder that leads out
    _plant_job(path / "_staging", JOB_B)
    link = path / "_staging" / JOB_B / TASK / SHARD.replace("00042", "00043")
    os.symlink(outside / JOB / TASK / SHARD, link)  # a link named like a shard, in a job's
    dead = _plant_job(path / "_staging", "ab" * 16)
    done = dataset.gc(str(path), older_than=0)
    assert _names(done.removed) == {f"_staging/{'ab' * 16}/"}
    assert _names(done.kept) == {f"_staging/{JOB_B}/"}  # (the link is no folder: not a job)
    assert "not a regular file" in {g.name: g.what for g in done.kept}[f"_staging/{JOB_B}/"]
    assert not dead.exists() and os.path.islink(link)
    assert os.path.islink(path / "_staging" / JOB)
    assert (outside / JOB / TASK / SHARD).read_bytes() == b"x"


_EXCHANGE = textwrap.dedent(
    """
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = sys.argv[1].encode(), sys.argv[2].encode()
    if libc.renameat2(-100, a, -100, b, 2) != 0:  # RENAME_EXCHANGE: atomic
        sys.exit(f"renameat2: errno {ctypes.get_errno()}")
    print("ready", flush=True)
    while True:
        libc.renameat2(-100, a, -100, b, 2)
    """
)


def test_gc_racing_a_staging_symlink_swap_never_leaves_the_folder(tmp_path: Path) -> None:
    """Another process swaps ``_staging`` with a symlink to a folder outside, over and over
    (an atomic rename-exchange), while gc runs again and again: no file outside is ever
    removed and gc raises nothing but tensorfile's errors."""
    from tensorfile.errors import TensorFileError

    path, outside, link = tmp_path / "ds", tmp_path / "outside", tmp_path / "link"
    dataset.write(cols_a(2), str(path), batch_size=2)
    _plant_job(path / "_staging")
    _plant_job(outside)
    os.symlink(outside, link)
    swapper = subprocess.Popen(
        [sys.executable, "-c", _EXCHANGE, str(path / "_staging"), str(link)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        deadline, runs = time.monotonic() + 3.0, 0
        while time.monotonic() < deadline:
            for where in (path / "_staging", link):  # the real folder is at one of the two
                with contextlib.suppress(OSError):
                    _plant_job(where)
            with contextlib.suppress(TensorFileError):
                dataset.gc(str(path), older_than=0)
            runs += 1
            assert (outside / JOB / TASK / SHARD).exists(), f"removed by gc run {runs}"
    finally:
        swapper.kill()
        swapper.wait(timeout=30)
    assert runs > 10


def test_a_manifest_listing_paths_outside_the_folder_removes_nothing(tmp_path: Path) -> None:
    """gc takes names from listing the folder, never from the manifest; a manifest that
    lists a path outside the folder is not a manifest a reader accepts, and gc refuses to
    judge by it."""
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    (tmp_path / SHARD).write_bytes(b"outside")
    (path / SHARD.replace("00042", "00043")).write_bytes(b"an orphan")
    doc = json.loads((path / "dataset_manifest.json").read_text())
    doc["shards"].append({"shard_path": f"../{SHARD}", "samples_count": 0, "bytes": 7})
    (path / "dataset_manifest.json").write_text(json.dumps(doc))
    before = sorted(os.listdir(path))
    with pytest.raises(FormatError, match="nothing was collected"):
        dataset.gc(str(path), older_than=0)
    assert sorted(os.listdir(path)) == before
    assert (tmp_path / SHARD).read_bytes() == b"outside"


def test_a_folder_without_a_manifest_keeps_its_shards(tmp_path: Path) -> None:
    """Without a manifest the folder's shards are the dataset (read by scanning)."""
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    os.unlink(path / "dataset_manifest.json")
    before = sorted(os.listdir(path))
    assert dataset.gc(str(path), older_than=0).removed == []
    assert sorted(os.listdir(path)) == before


def test_dead_writers_temporary_files_go_a_live_ones_stays(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    dead = [path / f".dataset_manifest.json.tensorfile-00000000000{c}.tmp" for c in "ab"]
    dead.append(path / f".{SHARD}.tensorfile-00000000000c.tmp")
    for f in dead:
        f.write_bytes(b"half written")
    live = path / "._tensor_index.parquet.tensorfile-00000000000d.tmp"
    live.write_bytes(b"being written")
    other = path / ".dataset_manifest.json.other.tmp"  # not named like tensorfile's
    other.write_bytes(b"someone else's")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # its writer lives
        assert {g.name for g in dataset.gc(str(path)).kept} == {f.name for f in [*dead, live]}
        done = dataset.gc(str(path), older_than=0)
    finally:
        os.close(fd)
    assert _names(done.removed) == {f.name for f in dead}
    assert _names(done.kept) == {live.name}
    assert live.exists() and other.exists() and not any(f.exists() for f in dead)


def test_not_a_dataset_folder(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not a dataset folder"):
        dataset.gc(str(tmp_path / "missing"))
    with pytest.raises(InvalidArgumentError, match="duration"):
        dataset.gc(str(tmp_path), older_than=-1)


def test_a_huge_duration_is_refused_as_the_text_is() -> None:
    from tensorfile.dataset.writing.gc import parse_duration

    for value in (10**400, 10**5000, "9" * 400, float("inf")):
        with pytest.raises(InvalidArgumentError, match="a duration must be 0 or more"):
            parse_duration(value)


def _aged(*paths: Path) -> None:
    for p in paths:
        os.utime(p, (time.time() - 7200,) * 2)


def test_a_folder_that_is_no_dataset_is_refused(tmp_path: Path, capsys: Any) -> None:
    """A project folder with its own ``_staging`` (no manifest, no shard, no write job's
    staging), given by mistake: gc removes nothing, it says the folder is no dataset."""
    proj = tmp_path / "thesis"
    work = proj / "_staging" / "uploads" / "2026" / "thesis.tex"
    work.parent.mkdir(parents=True)
    work.write_text("months of work")
    (proj / "README.md").write_text("a project, not a dataset")
    (proj / "_staging" / "2026").mkdir()
    _aged(work, work.parent)
    for dry_run in (True, False):
        with pytest.raises(InvalidArgumentError, match=r"is not a dataset folder.*no manifest"):
            dataset.gc(str(proj), older_than=0, dry_run=dry_run)
    res = run(capsys, "dataset", "gc", str(proj), "--older-than", "0")
    assert res.code == 2 and "is not a dataset folder" in res.err
    assert work.read_text() == "months of work"
    assert sorted(os.listdir(proj / "_staging")) == ["2026", "uploads"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgumentError, match="is not a dataset folder"):
        dataset.gc(str(tmp_path / "empty"), older_than=0)


def test_only_a_writers_job_folders_are_collected(tmp_path: Path) -> None:
    """In a dataset, a folder under ``_staging`` goes only if it is what a writer leaves:
    a job's name, its marker, task folders holding shards; anything else is kept, with why."""
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)
    staging = path / "_staging"
    dead = _plant_job(staging)
    (staging / "uploads").mkdir()  # a name no writer gives a job
    (staging / "uploads" / "thesis.tex").write_text("mine")
    _plant_job(staging, JOB_B)
    (staging / JOB_B / "notes.txt").write_text("mine")  # beside a writer's marker
    other = "ab" * 16
    _plant_job(staging, other)
    (staging / other / TASK / "sub").mkdir()  # deeper than a writer goes
    (staging / other / TASK / "sub" / SHARD).write_bytes(b"mine")
    fourth = "cd" * 16
    _plant_job(staging, fourth)
    (staging / fourth / TASK / "model.bin").write_bytes(b"mine")  # not a shard's name
    fifth = "ef" * 16
    (staging / fifth / "task-1-0123456789ab").mkdir(parents=True)  # not a task's name
    sixth = "12" * 16
    _plant_job(staging, sixth)
    (staging / sixth / SHARD).write_bytes(b"mine")  # a shard's name, outside a task's folder
    aged = [p for p in staging.rglob("*") if p.is_file()]
    _aged(*aged)

    for dry_run in (True, False):
        done = dataset.gc(str(path), older_than=0, dry_run=dry_run)
        assert _names(done.removed) == {f"_staging/{JOB}/"}
        why = {g.name: g.what for g in done.kept}
        kept = ("uploads", JOB_B, other, fourth, fifth, sixth)
        assert set(why) == {f"_staging/{n}/" for n in kept}
        assert all(w.startswith("not a write job's: ") for w in why.values()), why
        assert "no writer names a job 'uploads'" in why["_staging/uploads/"]
        assert "'notes.txt'" in why[f"_staging/{JOB_B}/"]
        assert f"{TASK}/ holds a folder 'sub'" in why[f"_staging/{other}/"]
        assert f"'{TASK}/model.bin'" in why[f"_staging/{fourth}/"]
        assert "'task-1-0123456789ab'" in why[f"_staging/{fifth}/"]
        assert f"'{SHARD}'" in why[f"_staging/{sixth}/"]
    assert not dead.parent.parent.exists()
    assert all(p.exists() for p in aged if JOB not in str(p))
    assert len(_rows(LocalStore(str(path)))) == 2


def test_a_first_write_killed_while_staging_is_collected(tmp_path: Path) -> None:
    """A writer killed while its tasks stage, before anything was committed, leaves a folder
    with its staging alone: no manifest, no shard, yet it is a dataset's, and gc takes it."""
    path = str(tmp_path / "ds")
    store = writer_module.make_folder(path)
    job = writer_module.new_job()
    writer_module.start_job(store, job)
    opts = parse_options({"batch_size": 2})
    cols, rows, keys = columns_and_keys(cols_b(4), opts)
    folder = writer_module.staging_folder(store, job, 0)
    writer_module.write_task(cols, rows, keys, opts, folder, 0, store)
    assert os.listdir(path) == ["_staging"]
    assert dataset.gc(path).kept[0].name == f"_staging/{job}/"  # new: maybe a live job's
    done = dataset.gc(path, older_than=0)
    assert _names(done.removed) == {f"_staging/{job}/"} and done.kept == []
    assert os.listdir(path) == []


def test_a_job_collected_during_its_commit_fails_with_concurrent_write_error(
    tmp_path: Path,
) -> None:
    """Regression (review35m m09): gc taking a job's staging for dead while its commit runs
    (after the commit read the job marker, before it moved the shards) failed the commit
    with a plain SourceError "cannot move ..."; it is the documented ConcurrentWriteError
    (nothing published, run it again), and the dataset reads as before."""
    path = tmp_path / "ds"
    dataset.write(cols_a(2), str(path), batch_size=2)

    collected: list[str] = []

    class GcAtMove(LocalStore):
        def move(self, src: str, dst: str) -> None:
            if not collected:  # another process's gc, at this instant
                collected.extend(g.name for g in dataset.gc(str(path), older_than=0).removed)
            super().move(src, dst)

    store = GcAtMove(str(path))
    job = writer_module.new_job()
    writer_module.start_job(store, job)
    opts = parse_options({"batch_size": 2})
    cols, rows, keys = columns_and_keys(cols_b(2), opts)
    folder = writer_module.staging_folder(store, job, 0)
    result = writer_module.write_task(cols, rows, keys, opts, folder, 0, store)
    with pytest.raises(ConcurrentWriteError, match="run it again"):
        writer_module.commit(store, [result], mode="append", opts=opts, job=job)
    assert any(job in name for name in collected)
    assert sorted(r[0] for r in _rows(LocalStore(str(path)))) == [0, 1]
