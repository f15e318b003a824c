"""The HTTP server of tests/sources: the Range-honouring Python server of
:mod:`tests.helpers.servers` on 127.0.0.1, one per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.servers import Server, start_range_server


@pytest.fixture(scope="session")
def range_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("range-server")
    root = tmp / "www"
    root.mkdir()
    server, stopper = start_range_server(root, tmp / "access.log")
    yield server
    stopper.terminate()
