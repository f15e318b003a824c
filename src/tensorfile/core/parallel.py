"""Split large byte transfers across threads.

Copying between user memory and the page cache is CPU-bound; the kernel releases the GIL
during ``preadv``/``pwrite``, so two cores move a large file ~1.9x faster than one. Small
transfers stay on the calling thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sized
from typing import TypeVar

__all__ = [
    "PARALLEL_MIN_BYTES",
    "PIECE_BYTES",
    "cpu_threads",
    "in_threads",
    "partition",
    "run_parallel",
    "workers",
]

T = TypeVar("T")

PARALLEL_MIN_BYTES = 32 << 20
PIECE_BYTES = 16 << 20
_CHUNK_ALIGN = 1 << 20


def cpu_threads() -> int:
    """Threads for copying in memory (cached pages, buffers): one per CPU this process may
    run on, at most 8."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cpus or 1))


def workers(total: int) -> int:
    """Threads to use for a transfer of ``total`` bytes."""
    return 1 if total < PARALLEL_MIN_BYTES else cpu_threads()


def partition(buffers: list[memoryview], parts: int) -> list[list[memoryview]]:
    """Cut consecutive buffers into ``parts`` runs of about equal size (1 MiB multiples)."""
    total = sum(b.nbytes for b in buffers)
    share = -(-total // parts)
    share = -(-share // _CHUNK_ALIGN) * _CHUNK_ALIGN
    runs: list[list[memoryview]] = [[]]
    room = share
    for buf in buffers:
        pos = 0
        while pos < buf.nbytes:
            if room == 0:
                runs.append([])
                room = share
            take = min(room, buf.nbytes - pos)
            runs[-1].append(buf[pos : pos + take])
            pos += take
            room -= take
    return runs


def run_parallel(
    offset: int, buffers: list[memoryview], job: Callable[[int, list[memoryview]], None]
) -> None:
    """Call ``job(offset_of_run, run)`` over consecutive runs of ``buffers``, in threads when
    the transfer is large. ``job`` must be safe to run concurrently on disjoint ranges.

    The transfer is cut into pieces of about :data:`PIECE_BYTES` that the threads take in
    turn, so a thread the host deschedules holds up one piece, not half the transfer: on a
    busy machine the copy degrades to single-threaded speed instead of waiting for the
    slowest half.
    """
    total = sum(b.nbytes for b in buffers)
    n = workers(total)
    if n == 1:
        job(offset, buffers)
        return

    runs = partition(buffers, max(n, -(-total // PIECE_BYTES)))
    pieces = []
    for run in runs:
        pieces.append((offset, run))
        offset += sum(b.nbytes for b in run)
    in_threads(n, pieces, lambda piece: job(*piece))


def in_threads(threads: int, items: Iterable[T], job: Callable[[T], None]) -> None:
    """Run ``job(item)`` for every item on ``threads`` threads, which take the items in
    order (a thread the host deschedules holds up one item, not a fixed share); the first
    failure stops the items not yet started and is raised once every thread is done (no
    thread outlives the call). Never more threads than a sized ``items`` has items; one
    thread (or fewer): on the calling thread, in order.

    Example:
        >>> seen = []
        >>> in_threads(2, range(5), seen.append)
        >>> sorted(seen)
        [0, 1, 2, 3, 4]
    """
    if isinstance(items, Sized):
        threads = min(threads, len(items))  # (no thread without an item)
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
                item = next(queue, None)
            if item is None:
                return
            try:
                job(item)
            except BaseException:
                failed.set()
                raise

    with ThreadPoolExecutor(threads, thread_name_prefix="tensorfile-io") as pool:
        futures = [pool.submit(worker) for _ in range(threads)]
    first = next((e for e in (f.exception() for f in futures) if e is not None), None)
    if first is not None:
        raise first
