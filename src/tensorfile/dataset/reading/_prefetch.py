"""Background downloads of the shards a reader will need next (:meth:`Dataset.prefetch`).

A :class:`Prefetcher` is a small pool of threads per process (:data:`THREADS` shards at a
time, each shard itself fetched with parallel ranged GETs). :meth:`Prefetcher.submit` takes
shards in the order they will be read; a shard already queued or downloading is not queued
again, and the shards of the latest window are protected from this process' evictions. The
pool is made on first use and made again in a child after ``fork`` (a DataLoader worker): a
forked child never uses its parent's threads. A download that fails in the background is
forgotten: the read that needs the shard fetches it and raises the error itself.

Example:
    >>> seen = []
    >>> p = Prefetcher(lambda key, window: seen.append(key))
    >>> p.submit([("a", None), ("b", None)]), sorted(p.window)
    (2, ['a', 'b'])
    >>> p.wait(); sorted(seen)
    ['a', 'b']
    >>> p.shutdown()
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["THREADS", "Prefetcher"]

THREADS = 2
"""Shards a process downloads in the background at once."""

Job = Callable[[str, frozenset[str]], Any]


class Prefetcher:
    """Runs ``job(key, protect)`` in the background once per queued key (see the module
    docstring); ``protect`` is the window the key was queued in."""

    def __init__(self, job: Job, threads: int = THREADS) -> None:
        self._job = job
        self._threads = threads
        self._mutex = threading.Lock()
        self._mutex_pid = os.getpid()
        self._pid = -1
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[Any]] = {}
        self.window: set[str] = set()
        """The keys of the latest :meth:`submit` (this process reads them soon)."""

    @property
    def _lock(self) -> threading.Lock:
        """This process' lock: a child forked while a thread held the parent's makes its
        own (the holder is not in the child; it would never release it)."""
        if self._mutex_pid != os.getpid():
            self._mutex = threading.Lock()
            self._mutex_pid = os.getpid()
        return self._mutex

    def _pool_here(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pid != os.getpid():
            # a forked child: the parent's threads are not here; start afresh
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="tensorfile-prefetch")
            self._pid = os.getpid()
            self._pending = {}
        return self._pool

    def submit(self, keys: Sequence[tuple[str, Any]]) -> int:
        """Queue ``(key, argument)`` pairs in order (``job`` gets the key); returns how many
        were queued now (the others are queued or downloading already)."""
        with self._lock:
            pool = self._pool_here()
            window = frozenset(k for k, _ in keys)
            self.window = set(window)
            queued = 0
            for key, _ in keys:
                if key in self._pending:
                    continue
                future = pool.submit(self._run, key, window)
                self._pending[key] = future
                queued += 1
            return queued

    def _run(self, key: str, window: frozenset[str]) -> None:
        try:
            self._job(key, window)
        except Exception:  # the read that needs the shard raises it itself
            pass
        finally:
            with self._lock:
                if self._pid == os.getpid():
                    self._pending.pop(key, None)

    def pending(self) -> int:
        """Downloads queued or running in this process."""
        with self._lock:
            return len(self._pending) if self._pid == os.getpid() else 0

    def wait(self) -> None:
        """Wait for the queued downloads (tests, benchmarks)."""
        with self._lock:
            futures = list(self._pending.values()) if self._pid == os.getpid() else []
        for f in futures:
            f.exception()

    def shutdown(self) -> None:
        """Stop the pool after the running downloads (queued ones are dropped)."""
        with self._lock:
            pool, self._pool = self._pool, None
            mine = self._pid == os.getpid()
            self._pending = {}
        if pool is not None and mine:
            pool.shutdown(wait=False, cancel_futures=True)
