"""The HTTP servers of tests/sources, one per session, on 127.0.0.1: the Range-honouring
Python server of :mod:`tests.helpers.servers` (without and with ``ETag``), and Python's
``http.server``, which ignores Range."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.servers import Server, start_plain_server, start_range_server


@pytest.fixture(scope="session")
def range_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("range-server")
    root = tmp / "www"
    root.mkdir()
    server, stopper = start_range_server(root, tmp / "access.log")
    yield server
    stopper.terminate()


@pytest.fixture(scope="session")
def etag_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The Range-honouring server, with an ``ETag`` on each reply (what the chunk cache keys
    on)."""
    tmp = tmp_path_factory.mktemp("etag-server")
    root = tmp / "www"
    root.mkdir()
    server, stopper = start_range_server(root, tmp / "access.log", etag=True)
    yield server
    stopper.terminate()


@pytest.fixture(scope="session")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server, stopper = start_plain_server(tmp_path_factory.mktemp("plain-server"))
    yield server
    stopper.terminate()
