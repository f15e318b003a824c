"""A folder on a file system that clones files (``FICLONE``: xfs with reflink, btrfs), for the
tests of the reflink path: ``$TENSORFILE_TEST_REFLINK_DIR`` when set, else the test's own
``tmp_path`` when its file system can clone; tests that need one skip otherwise."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

FICLONE = 0x40049409
ENV = "TENSORFILE_TEST_REFLINK_DIR"


def can_clone(folder: Path) -> bool:
    """Whether a file in ``folder`` can be cloned (tried on two small real files)."""
    a, b = folder / ".reflink-probe-a", folder / ".reflink-probe-b"
    try:
        a.write_bytes(b"x" * 4096)
        with open(a, "rb") as src, open(b, "wb") as dst:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        return True
    except OSError:
        return False
    finally:
        for p in (a, b):
            p.unlink(missing_ok=True)


@pytest.fixture
def reflink_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty folder whose file system clones; removed afterwards."""
    if can_clone(tmp_path):
        yield tmp_path
        return
    root = os.environ.get(ENV)
    if not root or not can_clone(Path(root)):
        pytest.skip(f"no file system that clones files here (set {ENV} to a folder on one)")
    folder = Path(tempfile.mkdtemp(dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)
