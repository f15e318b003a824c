"""Run the doctests of ``src/tensorfile`` in a fresh temporary folder, so examples that
write ``model.safetensors`` never touch the checkout (and the folders their
``tempfile.mkdtemp()`` makes are in it, not left in /tmp), and skip those of a module whose
``__doctest_requires__`` names a framework that is not installed (the optional frameworks:
jax, tensorflow, mlx, paddle)."""

import tempfile
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem


@pytest.fixture(autouse=True)
def _doctests_in_tmp(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        needs = request.node.dtest.globs.get("__doctest_requires__", ())
        if needs:
            from tests.helpers.frameworks import require

            for module in needs:
                require(module)
