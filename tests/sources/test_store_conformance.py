"""Every store of tensorfile passes :class:`tensorfile.testing.StoreConformance`: the local
store (writable and read-only), the memory store, fsspec's memory filesystem, fsspec's local
filesystem, and S3 (a real S3 API server on 127.0.0.1, moto in server mode: reads by
tensorfile's own client and the rest through s3fs, or everything through s3fs)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from tensorfile.sources import FsspecStore, LocalStore, MemoryStore, Store, store_for
from tensorfile.sources.s3.s3_store import S3Store
from tensorfile.testing import StoreConformance

_fresh = itertools.count()


class TestLocalStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        (tmp_path / "root").mkdir()
        return LocalStore(str(tmp_path / "root"))


class TestReadOnlyLocalStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        root = tmp_path / "root"
        root.mkdir()
        return LocalStore(str(root), read_only=True)

    def put(self, store: Store, name: str, data: bytes) -> None:
        path = Path(store.root, *name.split("/"))  # behind the store's back
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class TestMemoryStore(StoreConformance):
    def make_store(self) -> Store:
        return MemoryStore()


class TestFsspecMemoryStore(StoreConformance):
    def make_store(self) -> Store:
        return FsspecStore(f"memory://conformance-{os.getpid()}-{next(_fresh)}/root")


class TestFsspecLocalStore(StoreConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        root = tmp_path / "root"
        root.mkdir()
        return FsspecStore(f"file://{root}", {"auto_mkdir": True})


class TestS3Store(StoreConformance):
    """``store_for("s3://...")``: reads by tensorfile's own S3 client, the rest by s3fs."""

    @pytest.fixture
    def store(self, s3: Any) -> Store:
        store = store_for(s3.url(s3.bucket(), "root"), s3.options)
        assert isinstance(store, S3Store) and store.native is not None
        return store


class TestS3StoreThroughS3fs(StoreConformance):
    """The same store where tensorfile's client declines the folder (``$TENSORFILE_S3``):
    s3fs does everything."""

    @pytest.fixture
    def store(self, s3: Any, monkeypatch: pytest.MonkeyPatch) -> Store:
        monkeypatch.setenv("TENSORFILE_S3", "fsspec")
        store = store_for(s3.url(s3.bucket(), "root"), s3.options)
        assert isinstance(store, S3Store) and store.native is None
        return store


def test_flags_say_what_each_store_is(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path))
    assert local.is_local and local.atomic_publish and local.supports_writes
    assert not LocalStore(str(tmp_path), read_only=True).supports_deletes
    assert FsspecStore("s3://b/x").atomic_publish  # a single put
    assert not FsspecStore(f"file://{tmp_path}").atomic_publish  # written in place
    http = FsspecStore("https://example.invalid/x")
    assert not (http.supports_writes or http.supports_listing or http.supports_deletes)
