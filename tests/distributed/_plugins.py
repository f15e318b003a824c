"""The storage plugins under test, in one place: tensorfile.distributed's StorageWriter and
StorageReader (imported when a rank first asks, so that a missing module fails the checks
that need it, with its ImportError recorded, rather than the collection of the suite)."""

from __future__ import annotations

from typing import Any


def writer(path: Any, **options: Any) -> Any:
    """``tensorfile.distributed.StorageWriter(path, **options)``."""
    from tensorfile.distributed import StorageWriter

    return StorageWriter(str(path), **options)


def reader(path: Any, **options: Any) -> Any:
    """``tensorfile.distributed.StorageReader(path, **options)``."""
    from tensorfile.distributed import StorageReader

    return StorageReader(str(path), **options)
