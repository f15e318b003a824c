"""Dropping a file's pages from the page cache, for cold-read tests and benchmarks."""

from __future__ import annotations

import os
from pathlib import Path


def evict(path: str | os.PathLike[str]) -> None:
    """Write back, then drop ``path``'s cached pages (``posix_fadvise(DONTNEED)``): the next
    read of the file comes from the disk."""
    fd = os.open(Path(path), os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
