"""The child side of the resource-limited fuzz run (:mod:`tests.formats.test_fuzz_limited`).

:func:`main` reads every mutant in a folder every way tensorfile offers (``tensorfile.open``
with ``get_tensors``, ``get_tensor``, ``view`` and ``read_slice``; the safetensors drop-in,
numpy and torch; ``tensorfile.ztensor``) and prints one line per problem: ``FOREIGN`` for an
exception that is not a :class:`~tensorfile.errors.TensorFileError`, ``SLOW`` for a file
that took longer than its budget (an alarm interrupts it). It runs under the address-space
and CPU limits the parent set, so a runaway allocation is a ``MemoryError`` here, reported as
``FOREIGN``.
"""

from __future__ import annotations

import signal
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorfile
from tensorfile import ztensor
from tensorfile.errors import TensorFileError
from tensorfile.safetensors import deserialize, safe_open
from tensorfile.safetensors import numpy as st_numpy


class _Slow(BaseException):
    """Raised by the alarm: not an Exception, so that no ``except Exception`` swallows it."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Slow


_OPENED: list[str] = []


def _generic(path: str) -> None:
    with tensorfile.open(path) as r:
        _OPENED.append(path)
        _ = dict(r.metadata)
        _attempt(r.get_tensors)
        for name in r.keys():
            _attempt(lambda n=name: r.get_tensor(n))
            _attempt(lambda n=name: r.view(n))
            for key in (..., 0, -1, (slice(None, None, 3),), (0, slice(1, None))):
                _attempt(lambda n=name, k=key: r.read_slice(n, k))


def _dropin(path: str, framework: str = "np") -> None:
    with safe_open(path, framework=framework) as f:
        f.metadata()
        _attempt(f.get_tensors)
        for name in f.keys():
            sl = f.get_slice(name)
            _attempt(lambda s=sl: s[...])
            _attempt(lambda s=sl: s[0])


def _torch() -> Any:
    try:
        from tensorfile.safetensors import torch as st_torch
    except ImportError:  # no torch here: the numpy entry points only
        return None
    return st_torch


def _zt(path: str) -> None:
    with ztensor.open(path) as r:
        for name in r.keys():
            _attempt(lambda n=name: r.get_tensor(n))
            for role in r.info(name).components:
                _attempt(lambda n=name, c=role: r.read_component(n, c))


def _attempt(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except TensorFileError:
        pass


def _readers(fmt: str, path: str, data: bytes) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {"tensorfile.open": lambda: _generic(path)}
    st_torch = _torch()
    if fmt == "safetensors":
        out["safe_open"] = lambda: _dropin(path)
        out["numpy.load_file"] = lambda: st_numpy.load_file(path)
        out["numpy.load"] = lambda: st_numpy.load(data)
        out["deserialize"] = lambda: deserialize(data)
        if st_torch is not None:
            out["safe_open pt"] = lambda: _dropin(path, "pt")
            out["torch.load"] = lambda: st_torch.load(data)
            out["torch.load_file"] = lambda: st_torch.load_file(path)
    elif fmt == "ztensor":
        out["ztensor.open"] = lambda: _zt(path)
        out["ztensor.load_file"] = lambda: ztensor.load_file(path)
        if st_torch is not None:
            out["ztensor.load_file pt"] = lambda: ztensor.load_file(path, framework="pt")
    return out


def main(folder: str, budget: float = 10.0) -> None:
    """Read every ``<format>-<n>.bin`` in ``folder``; print ``FOREIGN``/``SLOW`` lines and a
    final ``DONE <files> <files tensorfile.open accepted> <slowest seconds>``."""
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")
    files = sorted(Path(folder).glob("*.bin"))
    slowest = 0.0
    for file in files:
        fmt = file.name.split("-", 1)[0]
        data = file.read_bytes()
        for entry, read in _readers(fmt, str(file), data).items():
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                read()
            except TensorFileError:
                pass
            except _Slow:
                print("SLOW", file.name, entry, flush=True)
            except Exception as exc:  # the finding
                print("FOREIGN", file.name, entry, type(exc).__name__, str(exc)[:200], flush=True)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, time.perf_counter() - start)
    print("DONE", len(files), len(_OPENED), f"{slowest:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
