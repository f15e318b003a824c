"""``LocalSource`` and ``open_path`` of a local path, against the Source conformance suite."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tensorfile.sources import LocalSource, Source, open_path
from tests.sources.conformance import SourceConformance


class LocalFiles(SourceConformance):
    """Each source reads its own file in the test's ``tmp_path``."""

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path
        self.serial = itertools.count()

    def write(self, data: bytes) -> Path:
        path = self.folder / f"file-{next(self.serial)}.bin"
        path.write_bytes(data)
        return path


class TestLocalSource(LocalFiles):
    source_cls = LocalSource

    def make(self, data: bytes) -> Source:
        return LocalSource(self.write(data))


class TestOpenPathLocal(LocalFiles):
    source_cls = LocalSource

    def make(self, data: bytes) -> Source:
        return open_path(str(self.write(data)))
