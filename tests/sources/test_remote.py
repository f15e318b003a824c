"""``HTTPSource`` against the Source conformance suite, served by the Range-honouring Python
server of :mod:`tests.helpers.servers` on 127.0.0.1 (nginx-specific request accounting is
tested in tests/remote)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfile.sources import HTTPSource, Source, open_path
from tests.helpers.servers import Server
from tests.sources.conformance import SourceConformance


class ServedFiles(SourceConformance):
    """Each source reads its own file from the session's range server."""

    @pytest.fixture(autouse=True)
    def _server(self, range_server: Server) -> Iterator[None]:
        self.server = range_server
        self.served: list[Path] = []
        yield
        for path in self.served:
            path.unlink()

    def serve(self, data: bytes) -> str:
        """The URL of a new file holding ``data``."""
        path = self.server.root / f"{uuid.uuid4().hex}.bin"
        path.write_bytes(data)
        self.served.append(path)
        return f"{self.server.url}/{path.name}"


class TestHTTPSource(ServedFiles):
    source_cls = HTTPSource

    def make(self, data: bytes) -> Source:
        return HTTPSource(self.serve(data))


class TestOpenPathHTTP(ServedFiles):
    source_cls = HTTPSource

    def make(self, data: bytes) -> Source:
        return open_path(self.serve(data))
