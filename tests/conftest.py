"""Fixtures shared by every test folder (helper code lives in :mod:`tests.helpers`)."""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import pytest


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests contact 127.0.0.1 only: proxy settings of the machine are cleared (a test that
    wants a proxy sets its own)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture
def tmp_file(tmp_path: Any) -> str:
    return str(tmp_path / "model.safetensors")


_ = ml_dtypes  # imported for every test, so that the ml_dtypes numpy types are registered


@pytest.fixture(scope="session")
def s3() -> Any:
    """A real S3 API server on 127.0.0.1 (moto in server mode), one per test session; each
    test takes a bucket of its own (``s3.bucket()``)."""
    from tests.helpers import s3 as s3_helpers

    server = s3_helpers.start()
    yield server
    server.stop()
