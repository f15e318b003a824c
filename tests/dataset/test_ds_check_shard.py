"""What a listed shard must be is the dataset's rule (:func:`check_shard`, built on the
Store interface), the same on every store: a file of the folder of the listed size; a
missing, resized or escaping shard is a :class:`FormatError` naming it, and nothing of it is
read. (It was ``Store.check_shard`` in the store conformance suite.)"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from tensorfile.dataset.layout.storage import check_shard, open_shard
from tensorfile.errors import FormatError, SourceError
from tensorfile.sources import FsspecStore, LocalStore, MemoryStore, Store, store_for

_fresh = itertools.count()
KINDS = ["local", "memory", "fsspec-memory", "s3"]


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    kind = request.param
    if kind == "local":
        return LocalStore(str(tmp_path))
    if kind == "memory":
        return MemoryStore()
    if kind == "fsspec-memory":
        return FsspecStore(f"memory://check-shard-{os.getpid()}-{next(_fresh)}/ds")
    s3: Any = request.getfixturevalue("s3")
    return store_for(s3.url(s3.bucket(), "ds"), s3.options)


def test_a_listed_shard_is_checked_on_every_store(store: Store) -> None:
    store.write_atomic("s.bin", b"12345")
    found = check_shard(store, "s.bin", 5)
    assert found == store.local_path("s.bin")  # the local path where files are local
    where = open_shard(store, "s.bin", 5)
    if isinstance(where, str):
        assert where == found
    else:
        try:
            assert where.read(0, 5) == b"12345"
        finally:
            where.close()
    for name, size, said in [
        ("s.bin", 6, "says shard s.bin has 6 bytes, the file has 5"),
        ("gone.bin", 5, "lists gone.bin, which is missing"),
        ("../s.bin", 5, "s.bin"),
        ("/s.bin", 5, "s.bin"),
    ]:
        with pytest.raises(FormatError, match=said):
            check_shard(store, name, size)
        with pytest.raises(FormatError):
            open_shard(store, name, size)


def test_a_folder_listed_as_a_shard_is_not_a_file(store: Store) -> None:
    store.write_atomic("sub/x.bin", b"x")
    with pytest.raises((FormatError, SourceError)):
        check_shard(store, "sub", 1)
