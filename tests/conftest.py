"""Fixtures shared by every test folder (helper code lives in :mod:`tests.helpers`)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import pytest


@pytest.fixture
def tmp_file(tmp_path: Any) -> str:
    return str(tmp_path / "model.safetensors")


_ = ml_dtypes  # imported for every test, so that the ml_dtypes numpy types are registered
