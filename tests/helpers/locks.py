"""A second process that holds a ``flock`` (what any user who can read a cache folder can do:
``flock`` works on a read-only descriptor), and a call run with a bound (a hang fails the
test instead of hanging it)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


@contextmanager
def held_lock(path: Path) -> Iterator[None]:
    """Another process opens ``path`` read-only and holds an exclusive ``flock`` on it
    while the block runs (it is killed after)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a daemon thread; its result, or AssertionError when it has not
    returned after ``seconds`` (a hang: the thread is left behind). Its exception is raised
    here."""
    out: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # raised in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"still running after {seconds:g} s: it hangs")
    if failed:
        raise failed[0]
    return out[0]
