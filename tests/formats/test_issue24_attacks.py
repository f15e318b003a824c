"""Hostile cases of issue 24's changes (found by a hostile review): nested GGUF float32
arrays in inspect --json, a missing file's error naming it as ``path``, a short file name
that is a word of the message, a huge zTensor v2 align."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import gguf
import numpy as np
import pytest

import tensorfile
from tensorfile.errors import SourceNotFoundError


def _gguf(path: Path) -> None:
    vt = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_key_value("nested", [[1.1, float("nan")], ["x"]], vt.ARRAY)
    w.add_tensor("t", np.arange(6, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_inspect_json_nested_float32_array_is_valid_json(tmp_path: Path) -> None:
    """MEDIUM: `tensorfile inspect --json` on a GGUF with an array of float32 arrays holding
    NaN prints a bare NaN (not JSON) and the float32 unshortened (1.100000023841858)."""
    from tensorfile.cli.app import main

    path = tmp_path / "g.gguf"
    _gguf(path)
    out = io.StringIO()
    with redirect_stdout(out):
        try:
            main(["inspect", "--json", str(path)])
        except SystemExit:
            pass

    def refuse(c: str) -> None:
        raise ValueError(f"not JSON: {c}")

    doc = json.loads(out.getvalue(), parse_constant=refuse)
    assert doc["metadata"]["nested"] == [[1.1, "NaN"], ["x"]]


def test_json_metadata_nested_nan() -> None:
    """Same defect at the API level: ops.inspect.json_metadata leaves NaN in nested arrays."""
    from tensorfile.core.values import TypedValue
    from tensorfile.ops.inspect import json_metadata

    inner = (TypedValue("array", [float("nan")], "float32"),)
    got = json_metadata({"n": TypedValue("array", [[float("nan")]], "array", items=inner)})
    json.dumps(got, allow_nan=False)


@pytest.mark.parametrize("kind", ["local", "shard"])
def test_not_found_error_sets_path(tmp_path: Path, kind: str) -> None:
    """LOW: a missing file's SourceNotFoundError has .path None (errors.py promises that
    every error raised while opening a file names it, as .path too); also .filename None."""
    missing = tmp_path / "nope.safetensors"
    if kind == "local":
        with pytest.raises(SourceNotFoundError) as info:
            tensorfile.open(str(missing))
        assert info.value.path == str(missing)
    else:
        from tensorfile.safetensors.numpy import save_file

        save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "s1.safetensors"))
        index = tmp_path / "model.safetensors.index.json"
        index.write_text(
            json.dumps({"weight_map": {"a": "s1.safetensors", "b": "nope.safetensors"}})
        )
        r = tensorfile.open(str(index))
        with pytest.raises(SourceNotFoundError) as info:
            r.get_tensor("b")
        assert info.value.path == str(missing)  # the shard, per _in_checkpoint's docstring


def test_error_names_file_even_when_name_is_a_word_of_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOW: name_file skips the prefix when the file name occurs anywhere in the message as
    a substring: a file called 'header' gives 'header length 144 ... runs past the end'."""
    Path(tmp_path / "x").write_bytes(b"\x90" + bytes(7) + b'{"a":1}')
    monkeypatch.chdir(tmp_path)
    os.rename("x", "header")
    with pytest.raises(tensorfile.TensorFileError) as info:
        tensorfile.open("header")
    assert str(info.value).startswith("header: "), str(info.value)


def test_huge_align_is_an_error_not_memoryerror() -> None:
    """LOW: align=1<<40 passes align_of, then to_bytes dies with a bare MemoryError."""
    from tensorfile.formats.ztensor.v2._writer import to_bytes

    try:
        to_bytes({"a": np.ones(5)}, align=1 << 40)
    except tensorfile.TensorFileError:
        pass
