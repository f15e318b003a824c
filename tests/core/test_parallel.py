"""``core.parallel.in_threads``, the one thread-pool helper (local reads, the read planner and
the chunk cache all take pieces in turn through it): one thread runs on the caller's, in
order; several take every item once; the first failure stops what has not started."""

from __future__ import annotations

import threading

import pytest

from tensorfile.core.parallel import cpu_threads, in_threads, workers


@pytest.mark.parametrize("threads", [0, 1])
def test_one_thread_runs_on_the_callers_in_order(threads: int) -> None:
    seen: list[tuple[int, threading.Thread]] = []
    in_threads(threads, range(5), lambda i: seen.append((i, threading.current_thread())))
    assert seen == [(i, threading.current_thread()) for i in range(5)]


def test_several_threads_take_every_item_once() -> None:
    seen: list[int] = []
    names: set[str] = set()

    def job(i: int) -> None:
        seen.append(i)
        names.add(threading.current_thread().name)

    in_threads(3, iter(range(200)), job)
    assert sorted(seen) == list(range(200))
    assert all(n.startswith("tensorfile-io") for n in names)


def test_the_first_failure_stops_the_items_not_yet_started() -> None:
    started: list[int] = []

    def job(i: int) -> None:
        started.append(i)
        if i == 3:
            raise ValueError("item 3")

    with pytest.raises(ValueError, match="item 3"):
        in_threads(2, range(10_000), job)
    assert len(started) < 10_000


def test_small_transfers_take_one_thread_large_ones_the_cpus() -> None:
    assert workers(1 << 20) == 1
    assert workers(1 << 30) == cpu_threads()
    assert 1 <= cpu_threads() <= 8
