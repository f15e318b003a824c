"""The HTTP servers of tests/remote (see :mod:`tests.helpers.servers`), one per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.helpers.servers import Server, start_nginx, start_plain_server


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests contact 127.0.0.1 only: proxy settings of the machine are cleared (a test that
    wants a proxy sets its own)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


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
