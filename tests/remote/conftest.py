"""The HTTP servers of tests/remote (see :mod:`tests.helpers.servers`), one per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.servers import Server, start_nginx, start_plain_server


@pytest.fixture(scope="session")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """nginx (or its Range-honouring stand-in) serving ``nginx.root``, with an access log."""
    server, proc = start_nginx(tmp_path_factory.mktemp("nginx"))
    yield server
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Python's ``http.server``, which ignores Range, serving ``plain.root``."""
    server, stopper = start_plain_server(tmp_path_factory.mktemp("plain"))
    yield server
    stopper.terminate()
