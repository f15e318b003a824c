"""The public API: names, sorted __all__, the error tree, the dtype table."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tensorfile
import tensorfile.errors
import tensorfile.safetensors
from tensorfile import dtypes


@pytest.mark.parametrize("module", [tensorfile, tensorfile.errors, tensorfile.safetensors])
def test_all_is_sorted_and_complete(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name


def test_error_hierarchy() -> None:
    e = tensorfile.errors
    assert issubclass(e.SafetensorError, e.FormatError)
    assert issubclass(e.ZTensorError, e.FormatError)
    for cls in (e.FormatError, e.ChecksumError, e.UnsupportedError, e.SourceError):
        assert issubclass(cls, e.TensorFileError)
    assert issubclass(e.TensorNotFoundError, KeyError)
    for name in e.__all__:
        cls = getattr(e, name)
        if issubclass(cls, Warning):
            continue
        assert issubclass(cls, e.TensorFileError), name
        if name.endswith("Error") and name not in ("TensorFileError",):
            assert cls.__doc__, name
    err = e.InvalidOffsetsError("x", offset=12, tensor="w")
    assert (err.format, err.offset, err.tensor) == ("safetensors", 12, "w")


def test_dtype_table_is_complete_and_consistent() -> None:
    names = [d.name for d in dtypes.ALL]
    assert names == ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                     "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
                     "I32", "U32", "F32", "C64", "F64", "I64", "U64"]  # fmt: skip
    for d in dtypes.ALL:
        assert dtypes.from_safetensors(d.name) is d
        assert dtypes.numpy_dtype(d).itemsize * 8 == max(d.bits, 8) or d.is_subbyte
        assert dtypes.from_numpy(d.numpy) is d
        if d.ztensor_name:
            assert dtypes.from_ztensor(d.ztensor_name) is d
    assert dtypes.from_numpy(np.dtype(">f4")).name == "F32"


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
