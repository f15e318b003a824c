"""``HTTPSource`` against the Source conformance suite, served by the Range-honouring Python
server of :mod:`tests.helpers.servers` on 127.0.0.1, and by Python's ``http.server``, which
ignores Range (files under the 64 MiB limit are read as far as needed and kept);
nginx-specific request accounting is tested in tests/remote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfile.sources import HTTPSource, Source, open_path
from tests.helpers.servers import Server
from tests.sources.conformance import FAR, SourceConformance, content


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


class TestHTTPSourceRangeIgnored(ServedFiles):
    """Every reply is the whole file from its start: reads are served from what was kept."""

    source_cls = HTTPSource

    @pytest.fixture(autouse=True)
    def _server(self, plain_server: Server) -> Iterator[None]:
        self.server = plain_server
        self.served: list[Path] = []
        yield
        for path in self.served:
            path.unlink()

    def make(self, data: bytes) -> Source:
        return HTTPSource(self.serve(data))

    def test_stats_grow_by_what_was_read(self) -> None:
        data = content(FAR + 300_000)
        src = self.source(data)
        before = src.stats.requests
        assert src.read(FAR, 1000) == data[FAR : FAR + 1000]
        assert src.stats.requests == before + 1
        assert src.stats.bytes_read >= FAR + 1000  # the body from its start
        read = src.stats.bytes_read
        assert src.read(FAR - 5000, 5000) == data[FAR - 5000 : FAR]
        assert (src.stats.requests, src.stats.bytes_read) == (before + 1, read)  # kept
