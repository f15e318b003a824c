"""The read planner (tensorfile.core.plan): merges, gaps, over-read bound, chunk grid,
threads, failures, and the sharded checkpoint read as one plan."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfile.core import plan
from tensorfile.core.catalog import ByteRange
from tensorfile.errors import InvalidArgumentError, SourceError
from tensorfile.sources import MemorySource

DATA = bytes(np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8))


class Recording(MemorySource):
    """DATA with tuning attributes, recording every read and the threads reading at once."""

    def __init__(
        self, gap: int = 0, chunk: int = 1 << 20, threads: int = 1, pause: float = 0.0
    ) -> None:
        super().__init__(DATA)
        self.pause = pause
        self.coalesce_gap, self.io_chunk, self.io_threads = gap, chunk, threads
        self.reads: list[tuple[int, int]] = []
        self.hints: list[list[tuple[int, int]]] = []
        self.busy = self.most = 0
        self._lock = threading.Lock()

    def will_read(self, ranges: list[tuple[int, int]]) -> None:
        self.hints.append(ranges)

    def readinto(self, offset: int, buffers: list[memoryview]) -> None:
        with self._lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
            self.reads.append((offset, sum(b.nbytes for b in buffers)))
        try:
            time.sleep(self.pause)
            super().readinto(offset, buffers)
        finally:
            with self._lock:
                self.busy -= 1


def _jobs(spans: list[tuple[int, int]]) -> list[plan.Job]:
    return [
        (f"t{i}", ByteRange(a, b), memoryview(bytearray(b - a))) for i, (a, b) in enumerate(spans)
    ]


spans_strategy = st.lists(
    st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 3000)), max_size=20
).map(lambda pairs: sorted({(a, min(len(DATA), a + n)) for a, n in pairs}, key=lambda s: s[0]))


def _disjoint(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if not out or a >= out[-1][1]:
            out.append((a, b))
    return out


@settings(max_examples=75, deadline=None)
@given(
    spans=spans_strategy,
    gap=st.sampled_from([0, 1, 64, 4096]),
    chunk=st.sampled_from([7, 512, 1 << 20]),
    threads=st.sampled_from([1, 3]),
)
def test_every_buffer_gets_its_bytes(
    spans: list[tuple[int, int]], gap: int, chunk: int, threads: int
) -> None:
    spans = _disjoint(spans)
    src = Recording(gap, chunk, threads)
    jobs = _jobs(spans)
    pieces = plan.plan(src, src.readinto, list(reversed(jobs)))
    plan.execute(pieces)
    for _name, rng, buf in jobs:
        assert bytes(buf) == DATA[rng.start : rng.stop]
    wanted = sum(b - a for a, b in spans)
    read = sum(n for _, n in src.reads)
    assert wanted <= read <= 2 * wanted  # never more than twice what is wanted
    for offset, n in src.reads:  # pieces never cross the chunk grid
        assert n <= chunk and offset // chunk == (offset + n - 1) // chunk
    if gap == 0:
        assert read == wanted
    assert len(src.hints) == (1 if wanted else 0)
    assert src.most <= threads


def test_adjacent_tensors_share_one_read() -> None:
    src = Recording()
    jobs = _jobs([(0, 10), (10, 30), (30, 31)])
    plan.execute(plan.plan(src, src.readinto, jobs))
    assert src.reads == [(0, 31)]


def test_a_gap_is_read_over_only_when_small_and_not_wasteful() -> None:
    src = Recording(gap=100)
    plan.execute(plan.plan(src, src.readinto, _jobs([(0, 50), (150, 200)])))
    assert src.reads == [(0, 200)]  # 100 skipped for 100 wanted: allowed
    src = Recording(gap=100)
    plan.execute(plan.plan(src, src.readinto, _jobs([(0, 10), (110, 120)])))
    assert src.reads == [(0, 10), (110, 10)]  # 100 skipped for 20 wanted: two reads
    src = Recording(gap=100)
    plan.execute(plan.plan(src, src.readinto, _jobs([(0, 500), (601, 700)])))
    assert src.reads == [(0, 500), (601, 99)]  # a gap over the limit


def test_pieces_run_on_the_threads_the_source_asks_for() -> None:
    src = Recording(chunk=1024, threads=4, pause=0.005)
    buf = memoryview(bytearray(32 * 1024))
    pieces = plan.plan(src, src.readinto, [("big", ByteRange(0, buf.nbytes), buf)])
    assert len(pieces) == 32 and plan.threads_for(pieces) == 4
    plan.execute(pieces)
    assert bytes(buf) == DATA[: buf.nbytes]
    assert 2 <= src.most <= 4


def test_a_wrong_buffer_size_is_refused() -> None:
    src = Recording()
    with pytest.raises(InvalidArgumentError, match="buffer for 'x' is 3 bytes, expected 4"):
        plan.plan(src, src.readinto, [("x", ByteRange(0, 4), memoryview(bytearray(3)))])


def test_the_first_failure_is_raised_after_every_thread_stopped() -> None:
    src = Recording(chunk=1024, threads=4)
    started: list[int] = []

    def read(offset: int, buffers: list[memoryview]) -> None:
        started.append(offset)
        if offset == 4096:
            raise SourceError("boom at 4096")
        time.sleep(0.01)
        src.readinto(offset, buffers)

    buf = memoryview(bytearray(64 * 1024))
    before = threading.active_count()
    with pytest.raises(SourceError, match="boom at 4096"):
        plan.execute(plan.plan(src, read, [("big", ByteRange(0, buf.nbytes), buf)]))
    assert threading.active_count() == before  # no thread outlives the call
    assert len(started) < 64  # the pieces not started were dropped


def test_empty_plans_and_empty_tensors() -> None:
    src = Recording()
    assert plan.plan(src, src.readinto, []) == []
    assert plan.plan(src, src.readinto, _jobs([(5, 5)])) == []
    plan.execute([])
    assert src.reads == [] and src.hints == []


def test_a_sharded_checkpoint_is_one_plan(tmp_path: Path) -> None:
    """The pieces of every shard run in one pool: a load of 4 shards sees reads of several
    shards in flight at once (shard by shard it would never overlap two files)."""
    from tensorfile.formats.open import open as open_checkpoint
    from tensorfile.safetensors.numpy import load_sharded, save_sharded

    tensors = {f"w{i}": np.full((64, 1024), i, np.float32) for i in range(8)}  # 256 KiB each
    save_sharded(tensors, tmp_path, max_shard_size=600_000)  # 4 shards of 2 tensors
    with open_checkpoint(str(tmp_path)) as reader:
        names = reader.keys()
        pending = reader.start_read(names, lambda info: _alloc(info))
        files = {p.source.name for p in pending.pieces}
        assert len(files) == 4
        got = pending.run()
    for name, arr in zip(names, got, strict=True):
        assert np.array_equal(arr, tensors[name])
    loaded = load_sharded(tmp_path)
    assert list(loaded) == sorted(tensors) and all(
        np.array_equal(loaded[k], v) for k, v in tensors.items()
    )


def _alloc(info: object) -> tuple[memoryview, object]:
    from tensorfile.core.reader import numpy_allocator

    return numpy_allocator(info)  # type: ignore[arg-type]


def test_a_large_plan_reports_progress(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A plan of PROGRESS_MIN_BYTES or more draws the progress line (forced on, no delay)
    and ends with the summary; a small one draws nothing."""
    from tensorfile.core import progress

    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    data = bytes(plan.PROGRESS_MIN_BYTES)

    class Slow(MemorySource):  # slow enough for the drawing thread to draw
        def readinto(self, offset: int, buffers: list[memoryview]) -> None:
            time.sleep(0.05)
            super().readinto(offset, buffers)

    src = Slow(data, name="big.bin")
    buf = memoryview(bytearray(len(data)))
    plan.execute(plan.plan(src, src.readinto, [("x", ByteRange(0, len(data)), buf)]))
    err = capfd.readouterr().err
    assert "loading big.bin: 0.07 GB" in err and " in " in err
    small = memoryview(bytearray(10))
    plan.execute(plan.plan(src, src.readinto, [("y", ByteRange(0, 10), small)]))
    assert capfd.readouterr().err == ""
