"""The public API: names and sorted ``__all__``, a light import, the demo. (The error tree and
the dtype table are tested in tests/core.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tensorfile
import tensorfile.errors
import tensorfile.safetensors


@pytest.mark.parametrize("module", [tensorfile, tensorfile.errors, tensorfile.safetensors])
def test_all_is_sorted_and_complete(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name


def test_import_is_light() -> None:
    code = (
        "import sys, tensorfile, tensorfile.safetensors; "
        "print(sorted(m for m in ('torch', 'ml_dtypes', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_demo_runs(tmp_path: object) -> None:
    import pathlib

    demo = pathlib.Path(__file__).parent.parent / "examples" / "demo.py"
    out = subprocess.run(
        [sys.executable, str(demo), str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert "all equal to what was written: True" in out.stdout
    assert "a truncated file is refused: IncompleteBufferError" in out.stdout
