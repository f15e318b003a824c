"""Run the doctests of ``src/tensorfile`` in a fresh temporary folder, so examples that
write ``model.safetensors`` never touch the checkout."""

from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def _doctests_in_tmp(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(tmp_path)
