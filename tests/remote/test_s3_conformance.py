"""tensorfile's own S3 client (:class:`~tensorfile.sources.s3.s3_source.S3Source`, directly
and through ``open_path("s3://...")``) passes :class:`tensorfile.testing.SourceConformance`
against a real S3 server on 127.0.0.1 (SeaweedFS: the ``seaweed`` fixture of
tests/remote/conftest.py); so does the S3 store of ``store_for("s3://...")``
(:class:`tensorfile.testing.StoreConformance`)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tensorfile.sources import Source, Store, open_path, store_for
from tensorfile.sources.s3.s3_source import S3Source
from tensorfile.sources.s3.s3_store import S3Store
from tensorfile.testing import SourceConformance, StoreConformance


class SeaweedObjects(SourceConformance):
    """Each source reads an object of its own, in a place of the test's own."""

    source_cls = S3Source

    @pytest.fixture(autouse=True)
    def _server(self, seaweed: Any) -> None:
        self.server = seaweed
        self.place = seaweed.place()

    def upload(self, data: bytes) -> str:
        """The ``s3://`` URL of a new object holding ``data``."""
        key = f"{uuid.uuid4().hex}.bin"
        self.server.put(self.place, key, data)
        return f"s3://{self.place}/{key}"


class TestS3Source(SeaweedObjects):
    def make(self, data: bytes) -> Source:
        return S3Source(self.upload(data), **self.server.options)


class TestOpenPathS3(SeaweedObjects):
    def make(self, data: bytes) -> Source:
        return open_path(self.upload(data), **self.server.options)


class TestS3Store(StoreConformance):
    """``store_for("s3://...")`` on SeaweedFS: reads by tensorfile's own client, the rest
    (listing, writes, conditional writes, deletes) through s3fs."""

    @pytest.fixture
    def store(self, seaweed: Any) -> Store:
        store = store_for(f"s3://{seaweed.place()}", seaweed.options)
        assert isinstance(store, S3Store) and store.native is not None
        return store
