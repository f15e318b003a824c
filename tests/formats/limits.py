"""Run code where a hang or a runaway allocation fails a test instead of stalling the suite.

* :func:`finishes`: call a function in a daemon thread and wait a bounded time; a call that is
  blocked (in ``open`` on a FIFO, say) is released by ``unblock`` and reported.
* :func:`run_limited`: run a snippet in a fresh interpreter under ``RLIMIT_AS`` (address
  space), ``RLIMIT_CPU`` and a wall-clock timeout; returns what it printed and its peak
  resident memory (the kernel's ``VmHWM``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GIB = 1 << 30
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Finished:
    """What a bounded call did: its value, or the exception it raised."""

    value: Any = None
    error: BaseException | None = None


def finishes(
    fn: Callable[[], Any], *, timeout: float = 10.0, unblock: Callable[[], None] | None = None
) -> Finished:
    """``fn()`` run in a daemon thread; an AssertionError when it has not returned within
    ``timeout`` seconds (``unblock`` is called first, to let the stuck thread go)."""
    out = Finished()

    def target() -> None:
        try:
            out.value = fn()
        except BaseException as exc:  # reported to the caller
            out.error = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if unblock is not None:
            unblock()
            thread.join(timeout)
        raise AssertionError(f"the call did not return within {timeout} s: it blocked")
    return out


_PRELUDE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))
"""

OPEN_SAYS = """
import tensorfile
try:
    tensorfile.open({path!r})
    print("read")
except tensorfile.TensorFileError as exc:
    print(type(exc).__name__, str(exc).split(": ", 1)[1])
"""
"""A snippet for :func:`run_limited` (``.format(path=...)``): open the file and print
``read``, or the error's class and its message without the file's name."""

_PROBE = """
with open('/proc/self/status') as _f:
    print('VMHWM', [l.split()[1] for l in _f if l.startswith('VmHWM')][0])
"""


def run_limited(
    code: str,
    *,
    address_space: int = 2 * GIB,
    cpu_seconds: int = 120,
    timeout: float = 180.0,
) -> tuple[str, int]:
    """Run ``code`` in a fresh interpreter under the limits; returns ``(printed, peak
    resident bytes)``. A non-zero exit (an uncaught exception, a limit hit) fails the test
    with the child's stderr."""
    script = _PRELUDE.format(address_space=address_space, cpu=cpu_seconds) + code + _PROBE
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        # one BLAS thread: a thread pool's stacks alone would eat into the address space
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=_ROOT,  # so that the child can import tests.*
    )
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = proc.stdout.splitlines()
    peak = int(lines[-1].split()[1]) * 1024
    return "\n".join(lines[:-1]), peak
