"""Run the doctests of ``src/tensorfile`` in a fresh temporary folder, so examples that
write ``model.safetensors`` never touch the checkout (and the folders their
``tempfile.mkdtemp()`` makes are in it, not left in /tmp), and skip those of a module whose
``__doctest_requires__`` names a framework that is not installed (the optional frameworks:
jax, tensorflow, mlx, paddle). A module of ``src`` without an example is not collected:
it has no doctest, and importing it to find none costs every worker of ``make test`` its
imports (``tensorfile.dataset.loaders.ray`` imports ray: seconds)."""

import tempfile
from pathlib import Path

import pytest
from _pytest.doctest import DoctestItem

SRC = Path(__file__).resolve().parent / "src"


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    if (
        collection_path.suffix == ".py"
        and collection_path.name != "__init__.py"
        and collection_path.resolve().is_relative_to(SRC)
        and ">>>" not in collection_path.read_text(encoding="utf-8")
    ):
        return True
    return None


@pytest.fixture(autouse=True)
def _doctests_in_tmp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if isinstance(request.node, DoctestItem):
        tmp_path = request.getfixturevalue("tmp_path")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        needs = request.node.dtest.globs.get("__doctest_requires__", ())
        if needs:
            from tests.helpers.frameworks import require

            for module in needs:
                require(module)
