"""Hostile dataset folders: lying manifests and indexes, FIFOs, and a guard that turns a hang
on a FIFO into a test failure instead of a blocked suite.

* :func:`fifo_guard`: a context manager watching FIFOs; once ``seconds`` have passed, any
  process or thread blocked opening one of them for reading is released (a writer opens and
  closes the FIFO, so the reader sees end-of-file) and the test fails, naming the FIFO. It
  works across processes (Spark's Python workers, DataLoader workers), where a signal would
  not reach.
* :func:`write_manifest` / :func:`edit_manifest`: replace a dataset's manifest with a lying
  document or text.
* :func:`shard_name`: a file name of the §3.2 shard pattern, for files the tests plant.

Written from the spec and POSIX FIFO semantics, not from tensorfile's code.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

MANIFEST = "dataset_manifest.json"
INDEX = "_tensor_index.parquet"


def shard_name(task: int = 0, index: int = 0) -> str:
    """``part-{task:05d}-{index:04d}-{uuid}.safetensors`` with a fresh uuid."""
    return f"part-{task:05d}-{index:04d}-{uuid.uuid4()}.safetensors"


def write_manifest(folder: str | os.PathLike[str], doc: Any) -> None:
    """Replace the manifest of ``folder`` with ``doc`` (a JSON value, or ``str``/``bytes``
    written as they are)."""
    path = Path(folder) / MANIFEST
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    elif isinstance(doc, str):
        path.write_text(doc)
    else:
        path.write_text(json.dumps(doc))


def edit_manifest(folder: str | os.PathLike[str], change: Callable[[dict[str, Any]], Any]) -> None:
    """Apply ``change`` to the parsed manifest of ``folder`` and write it back."""
    path = Path(folder) / MANIFEST
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _release(fifo: str) -> bool:
    """Open ``fifo`` for writing without blocking: this succeeds only when a reader has it open
    (and releases a reader blocked in open()); True when one did."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return False
        raise
    os.close(fd)
    return True


@contextlib.contextmanager
def fifo_guard(*fifos: str | os.PathLike[str], seconds: float = 20.0) -> Iterator[None]:
    """Fail the test if, ``seconds`` after entering, anything still holds one of ``fifos``
    open for reading (it would be blocked waiting for a writer); the blocked reader is
    released first, so the test fails rather than hangs."""
    paths = [os.fspath(f) for f in fifos]
    stop = threading.Event()
    blocked: list[str] = []

    def watch() -> None:
        if stop.wait(seconds):
            return
        while not stop.is_set():
            for p in paths:
                if _release(p) and p not in blocked:
                    blocked.append(p)
            stop.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if blocked:
        pytest.fail(f"blocked opening FIFO(s) {blocked} for {seconds}s")
