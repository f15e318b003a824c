"""fsspec URLs (``open_path("memory://...")``) against the Source conformance suite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tensorfile.sources import Source, open_path
from tensorfile.sources.stores.fsspec_source import FsspecSource
from tests.sources.conformance import SourceConformance

fsspec = pytest.importorskip("fsspec")


class TestFsspecMemory(SourceConformance):
    source_cls = FsspecSource

    @pytest.fixture(autouse=True)
    def _filesystem(self) -> Iterator[None]:
        self.fs = fsspec.filesystem("memory")
        self.folder = f"/tf-sources-{uuid.uuid4().hex}"
        yield
        if self.fs.exists(self.folder):
            self.fs.rm(self.folder, recursive=True)

    def make(self, data: bytes) -> Source:
        name = f"{self.folder}/{uuid.uuid4().hex}.bin"
        self.fs.pipe(name, data)
        return open_path(f"memory:/{name}")
