"""The test session split over worker processes (``make test`` runs the suite with
pytest-xdist, see the Makefile): a folder every worker of one run shares, and something
expensive made in it once per run, whichever worker asks first.

Without xdist (a plain ``pytest``) the session is its own run and these are just the
session's temporary folder and a thing made there.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary folder shared by every worker of this run (the run's base folder, which
    holds one folder per worker), or the session's own without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_run(root: Path, name: str, make: Callable[[Path], object]) -> Path:
    """The folder ``root/name`` (``root``: :func:`run_folder`), filled by ``make(folder)``
    once: the first worker to ask makes it while the others wait on a lock, then all share
    it. A ``make`` that raises leaves nothing behind (the next worker to ask tries again)."""
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


def join_group(item: pytest.Item, name: str) -> None:
    """Put ``item`` in the xdist group ``name`` (``--dist loadgroup`` runs a group's tests on
    one worker). pytest-xdist marks the group by appending ``@name`` to the item's node id in
    the worker, which the controller reads; pytest 9 keeps the id in ``_id`` and ignores the
    ``_nodeid`` that xdist 3.8 sets, so without this every group would run everywhere. The id
    is extended here where xdist's own rewrite did not take."""
    item.add_marker(pytest.mark.xdist_group(name))
    if not getattr(item.config.option, "loadgroup", False) or item.nodeid.endswith(f"@{name}"):
        return
    from _pytest.nodeid import NodeId  # (pytest 9: the structured node id)

    item._id = NodeId.parse(f"{item.nodeid}@{name}")  # type: ignore[attr-defined]
