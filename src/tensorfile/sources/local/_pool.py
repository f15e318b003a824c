"""Running jobs on a few threads, taken in turn.

Example:
    >>> done = []
    >>> in_turn(range(5), done.append, 3)
    >>> sorted(done)
    [0, 1, 2, 3, 4]
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["cpu_threads", "in_turn"]

T = TypeVar("T")


def in_turn(items: Iterable[T], job: Callable[[T], object], threads: int) -> None:
    """``job(item)`` for every item, taken in turn by up to ``threads`` threads (a thread the
    host deschedules holds up one item, not a fixed share); the first failure stops the
    items not yet started and is raised once every thread is done."""
    queue = iter(items)
    if threads <= 1:
        for item in queue:
            job(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    failed = threading.Event()

    def worker() -> None:
        while not failed.is_set():
            with lock:
                item = next(queue, _END)
            if item is _END:
                return
            try:
                job(item)  # type: ignore[arg-type]
            except BaseException:
                failed.set()
                raise

    with ThreadPoolExecutor(threads, thread_name_prefix="tensorfile-io") as pool:
        futures = [pool.submit(worker) for _ in range(threads)]
    for future in futures:
        future.result()


_END = object()


def cpu_threads() -> int:
    """Threads for copying cached pages: one per CPU this process may run on, at most 8."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cpus or 1))
