"""The HTTP servers of tests/remote (see :mod:`tests.helpers.servers`), one per session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Any]:
    """SeaweedFS's S3 gateway on 127.0.0.1 (tests.helpers.seaweed), one per session; it
    accepts only the key pair ``seaweed.key``/``seaweed.secret``. Each test takes a place of
    its own (``seaweed.place()``: ``bucket/prefix``)."""
    from tests.helpers import seaweed as helpers

    server = helpers.start(identities={helpers.KEY: helpers.SECRET})
    yield server
    server.stop()


@pytest.fixture
def s3_env(seaweed: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The AWS environment variables that reach ``seaweed`` (and no other AWS setting)."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name.startswith("TENSORFILE_"):
            monkeypatch.delenv(name)
    for name, value in seaweed.env.items():
        monkeypatch.setenv(name, value)
    return seaweed


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[dict[str, str]], None]:
    """Set exactly these AWS variables (no profile or credentials file of the machine)."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "TENSORFILE_S3")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def set_env(values: dict[str, str]) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)

    return set_env
