"""Every source of tensorfile passes :class:`tensorfile.testing.SourceConformance`: bytes in
memory, local files (the default policy, ``pread`` only, ``O_DIRECT`` always, and through
``open_path``), HTTP (the Range-honouring Python server of :mod:`tests.helpers.servers` on
127.0.0.1, directly and through ``open_path``, and Python's ``http.server``, which ignores
Range: files under the 64 MiB limit are read as far as needed and kept), fsspec URLs, and
remote files behind the chunk cache (:class:`~tensorfile.sources.CachedSource`). The native
S3 client's subclass is in tests/remote/test_s3_conformance.py (it needs SeaweedFS);
nginx-specific request accounting is tested in tests/remote."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tensorfile.sources import (
    CachedSource,
    HTTPSource,
    LocalSource,
    MemorySource,
    Source,
    open_path,
)
from tensorfile.sources.stores.fsspec_source import FsspecSource
from tensorfile.testing import SourceConformance
from tensorfile.testing.source import FAR, content
from tests.helpers.servers import Server

# -- memory ---------------------------------------------------------------------------------


class TestMemorySource(SourceConformance):
    source_cls = MemorySource

    def make(self, data: bytes) -> Source:
        return MemorySource(data)


class TestMemorySourceOverBytearray(SourceConformance):
    """A writable buffer is served as well (without a copy)."""

    source_cls = MemorySource

    def make(self, data: bytes) -> Source:
        return MemorySource(bytearray(data))


# -- local files ----------------------------------------------------------------------------


class LocalFiles(SourceConformance):
    """Each source reads its own file in the test's ``tmp_path``."""

    source_cls = LocalSource

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path
        self.serial = itertools.count()

    def write(self, data: bytes) -> Path:
        path = self.folder / f"file-{next(self.serial)}.bin"
        path.write_bytes(data)
        return path


class TestLocalSource(LocalFiles):
    """The default policy: ``O_DIRECT`` for cold ranges where the filesystem takes it."""

    def make(self, data: bytes) -> Source:
        return LocalSource(self.write(data))


class TestLocalSourcePread(LocalFiles):
    """``pread``/``preadv`` only (``direct=False``)."""

    def make(self, data: bytes) -> Source:
        return LocalSource(self.write(data), direct=False)


class TestLocalSourceDirect(LocalFiles):
    """``O_DIRECT`` for every large read, where the filesystem takes it (``direct=True``)."""

    def make(self, data: bytes) -> Source:
        return LocalSource(self.write(data), direct=True)


class TestOpenPathLocal(LocalFiles):
    def make(self, data: bytes) -> Source:
        return open_path(str(self.write(data)))


# -- HTTP -----------------------------------------------------------------------------------


class ServedFiles(SourceConformance):
    """Each source reads its own file from the session's range server."""

    source_cls = HTTPSource

    @pytest.fixture(autouse=True)
    def _server(self, range_server: Server) -> Iterator[None]:
        yield from self._serving(range_server)

    def _serving(self, server: Server) -> Iterator[None]:
        self.server = server
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
    def make(self, data: bytes) -> Source:
        return HTTPSource(self.serve(data))


class TestOpenPathHTTP(ServedFiles):
    def make(self, data: bytes) -> Source:
        return open_path(self.serve(data))


class TestHTTPSourceRangeIgnored(ServedFiles):
    """Every reply is the whole file from its start: reads are served from what was kept."""

    @pytest.fixture(autouse=True)
    def _server(self, plain_server: Server) -> Iterator[None]:
        yield from self._serving(plain_server)

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


@pytest.mark.filterwarnings("ignore:.*not cached:tensorfile.sources.CacheWarning")
class TestCachedSource(ServedFiles):
    """HTTP files behind the chunk cache, in a folder of the test's own (the server gives an
    ``ETag``, without which nothing is cached; an empty file, whose reply has none, is read
    without the cache, with a warning)."""

    source_cls = CachedSource

    @pytest.fixture(autouse=True)
    def _server(self, etag_server: Server, tmp_path: Path) -> Iterator[None]:
        self.cache = tmp_path / "cache"
        yield from self._serving(etag_server)

    def make(self, data: bytes) -> Source:
        return open_path(self.serve(data), cache_dir=str(self.cache))


# -- fsspec ---------------------------------------------------------------------------------


class TestFsspecMemory(SourceConformance):
    source_cls = FsspecSource

    @pytest.fixture(autouse=True)
    def _filesystem(self) -> Iterator[None]:
        fsspec = pytest.importorskip("fsspec")
        self.fs = fsspec.filesystem("memory")
        self.folder = f"/tf-sources-{uuid.uuid4().hex}"
        yield
        if self.fs.exists(self.folder):
            self.fs.rm(self.folder, recursive=True)

    def make(self, data: bytes) -> Source:
        name = f"{self.folder}/{uuid.uuid4().hex}.bin"
        self.fs.pipe(name, data)
        return open_path(f"memory:/{name}")
