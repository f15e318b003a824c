"""``tensorfile diff``: text, markdown and JSON renderings of header differences, ``--data``
comparisons of the tensor values, and the exit status with and without ``--fail-on-diff``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.checkpoints import (
    MODEL,
    MODEL_META,
    write_gguf,
    write_safetensors,
    write_sharded,
    write_zt,
)
from tests.helpers.cli import assert_one_error, run, run_json


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two files differing in every way diff reports."""
    a = write_safetensors(tmp_path / "a.safetensors", metadata={**MODEL_META, "v": "1"})
    other = dict(MODEL)
    del other["model.norm.scale"]
    other["model.extra.bias"] = np.zeros(2, np.float32)
    other["lm_head.weight"] = np.zeros((6, 6), np.float32)
    other["model.layers.1.mlp.up.bias"] = np.zeros(3, np.int16)
    b = write_safetensors(
        tmp_path / "b.safetensors", other, {"format": "pt", "license": "MIT", "v": "2"}
    )
    return a, b


def test_diff_text(tmp_path: Path, capsys: Any) -> None:
    a, b = _pair(tmp_path)
    r = run(capsys, "diff", a, b)
    assert r.code == 0
    assert r.err == ""
    assert r.out.splitlines() == [
        f"a: {a}",
        f"b: {b}",
        "tensors: 1 added, 1 removed, 2 changed",
        "  + model.extra.bias",
        "  - model.norm.scale",
        "  ~ lm_head.weight: shape [4, 6] -> [6, 6]",
        "  ~ lm_head.weight: byte_length 96 -> 144",
        "  ~ model.layers.1.mlp.up.bias: dtype 'I8' -> 'I16'",
        "  ~ model.layers.1.mlp.up.bias: byte_length 3 -> 6",
        "metadata: 1 added, 1 removed, 1 changed",
        "  + license: 'MIT'",
        "  - note: 'hello world'",
        "  ~ v: '1' -> '2'",
        "the files differ",
    ]


def test_diff_markdown(tmp_path: Path, capsys: Any) -> None:
    a, b = _pair(tmp_path)
    r = run(capsys, "diff", a, b, "--format", "md")
    assert r.code == 0
    assert r.err == ""
    assert [line.rstrip() for line in r.out.splitlines()] == [
        f"## diff `{a}` → `{b}`",
        "",
        "| tensor | change | a | b |",
        "|---|---|---|---|",
        "| `model.extra.bias` | added | | |",
        "| `model.norm.scale` | removed | | |",
        "| `lm_head.weight` | shape | [4, 6] | [6, 6] |",
        "| `lm_head.weight` | byte_length | 96 | 144 |",
        "| `model.layers.1.mlp.up.bias` | dtype | 'I8' | 'I16' |",
        "| `model.layers.1.mlp.up.bias` | byte_length | 3 | 6 |",
        "",
        "| metadata key | change | a | b |",
        "|---|---|---|---|",
        "| `license` | added | | 'MIT' |",
        "| `note` | removed | 'hello world' | |",
        "| `v` | changed | '1' | '2' |",
        "",
    ]


def test_diff_json(tmp_path: Path, capsys: Any) -> None:
    a, b = _pair(tmp_path)
    assert run_json(capsys, "diff", a, b) == {
        "schema": 1,
        "identical": False,
        "a": str(a),
        "b": str(b),
        "tensors": {
            "added": ["model.extra.bias"],
            "removed": ["model.norm.scale"],
            "changed": [
                {"name": "lm_head.weight", "field": "shape", "a": [4, 6], "b": [6, 6]},
                {"name": "lm_head.weight", "field": "byte_length", "a": 96, "b": 144},
                {"name": "model.layers.1.mlp.up.bias", "field": "dtype", "a": "I8", "b": "I16"},
                {"name": "model.layers.1.mlp.up.bias", "field": "byte_length", "a": 3, "b": 6},
            ],
        },
        "metadata": {
            "added": {"license": "MIT"},
            "removed": {"note": "hello world"},
            "changed": {"v": ["1", "2"]},
        },
        # stored alike (raw, each tensor's stored bytes its decoded size): nothing listed
        "stored": {"shared_tensors": 6, "a_bytes": 531, "b_bytes": 582, "differing": []},
    }


def test_diff_identical_renderings(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", metadata=MODEL_META)
    b = write_safetensors(tmp_path / "b.safetensors", metadata=MODEL_META)
    r = run(capsys, "diff", a, b)
    assert r.code == 0
    assert r.out.splitlines() == [
        f"a: {a}",
        f"b: {b}",
        "tensors: 0 added, 0 removed, 0 changed",
        "metadata: 0 added, 0 removed, 0 changed",
        "identical",
    ]
    r = run(capsys, "diff", a, b, "--format", "md")
    assert r.code == 0
    assert r.out.splitlines() == [f"## diff `{a}` → `{b}`", "", "Identical."]
    doc = run_json(capsys, "diff", a, b)
    assert doc["identical"] is True
    assert doc["tensors"] == {"added": [], "removed": [], "changed": []}
    assert doc["metadata"] == {"added": {}, "removed": {}, "changed": {}}


@pytest.mark.parametrize("fmt", [(), ("--format", "md"), ("--json",)])
def test_diff_exit_status(tmp_path: Path, capsys: Any, fmt: tuple[str, ...]) -> None:
    a, b = _pair(tmp_path)
    same = write_safetensors(tmp_path / "same.safetensors", metadata={**MODEL_META, "v": "1"})
    assert run(capsys, "diff", a, b, *fmt).code == 0
    r = run(capsys, "diff", a, b, *fmt, "--fail-on-diff")
    assert r.code == 1
    assert r.err == ""
    assert r.out  # the differences are still printed
    r = run(capsys, "diff", a, same, *fmt, "--fail-on-diff")
    assert r.code == 0
    assert r.err == ""


def test_diff_across_formats_and_shards(tmp_path: Path, capsys: Any) -> None:
    st = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    raw = write_zt(tmp_path / "raw.zt", attributes=MODEL_META)
    packed = write_zt(tmp_path / "packed.zt", attributes=MODEL_META, compression="zstd")
    names = sorted(MODEL)
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in names[:3]}, {n: MODEL[n] for n in names[3:]}],
        [MODEL_META, MODEL_META],
    )
    for other in (raw, packed, index, index.parent, index.parent / "*.safetensors"):
        doc = run_json(capsys, "diff", st, other, "--data")
        assert doc["identical"] is True, (other, doc)
        assert doc["data"] == {"compared": 7, "differing": []}
        assert run(capsys, "diff", other, st, "--data", "--fail-on-diff").code == 0


# -- --data --------------------------------------------------------------------------------------


def _data_pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_safetensors(
        tmp_path / "a.safetensors",
        {
            "w": np.array([1, 2, 3, 4], np.float32),
            "i": np.array([1, 2, 3], np.int32),
            "same": np.array([7, 8], np.float16),
            "reshaped": np.zeros(4, np.float32),
        },
    )
    b = write_zt(
        tmp_path / "b.zt",
        {
            "w": np.array([1, 2.5, 3, 0], np.float32),
            "i": np.array([1, 2, -7], np.int32),
            "same": np.array([7, 8], np.float16),
            "reshaped": np.ones((2, 2), np.float32),
        },
        compression="zstd",
    )
    return a, b


def test_diff_data_text(tmp_path: Path, capsys: Any) -> None:
    a, b = _data_pair(tmp_path)
    r = run(capsys, "diff", a, b, "--data")
    assert r.code == 0
    assert r.err == ""
    lines = r.out.splitlines()
    assert "  ~ reshaped: shape [4] -> [2, 2]" in lines
    i = lines.index("data: 2 of 3 compared tensors differ")
    assert lines[i + 1 : i + 3] == [
        "  ~ i: 1 element differs, max |a - b| = 10",
        "  ~ w: 2 elements differ, max |a - b| = 4.0",
    ]
    assert lines[-1] == "the files differ"


def test_diff_data_json_and_markdown(tmp_path: Path, capsys: Any) -> None:
    a, b = _data_pair(tmp_path)
    doc = run_json(capsys, "diff", a, b, "--data")
    assert doc["identical"] is False
    assert doc["tensors"]["changed"] == [
        {"name": "reshaped", "field": "shape", "a": [4], "b": [2, 2]}
    ]
    assert doc["data"] == {
        "compared": 3,
        "differing": [
            {"name": "i", "differing_elements": 1, "max_abs_diff": 10.0},
            {"name": "w", "differing_elements": 2, "max_abs_diff": 4.0},
        ],
    }
    r = run(capsys, "diff", a, b, "--data", "--format", "md")
    assert r.code == 0
    lines = r.out.splitlines()
    i = lines.index("| tensor | differing elements | max abs diff |")
    assert lines[i + 1 : i + 4] == ["|---|---:|---:|", "| `i` | 1 | 10 |", "| `w` | 2 | 4.0 |"]


def test_diff_data_only_difference_sets_exit_status(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", metadata=MODEL_META)
    changed = dict(MODEL)
    w = MODEL["model.embed.weight"].copy()
    w[9, 5] = -3.5  # was 1.0
    changed["model.embed.weight"] = w
    b = write_zt(tmp_path / "b.zt", changed, attributes=MODEL_META)
    # the headers agree...
    assert run(capsys, "diff", a, b, "--fail-on-diff").code == 0
    assert run_json(capsys, "diff", a, b)["identical"] is True
    # ...the data does not
    r = run(capsys, "diff", a, b, "--data", "--fail-on-diff")
    assert r.code == 1
    assert "  ~ model.embed.weight: 1 element differs, max |a - b| = 4.5" in r.out.splitlines()
    doc = run_json(capsys, "diff", a, b, "--data")
    assert doc["identical"] is False
    assert doc["data"]["differing"] == [
        {"name": "model.embed.weight", "differing_elements": 1, "max_abs_diff": 4.5}
    ]


def test_diff_data_infinite_difference(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", {"w": np.array([np.inf, 1], np.float32)})
    b = write_safetensors(tmp_path / "b.safetensors", {"w": np.array([0, 1], np.float32)})
    r = run(capsys, "diff", a, b, "--data")
    assert r.code == 0
    # the one differing element differs by infinity, not by 0
    assert "  ~ w: 1 element differs, max |a - b| = inf" in r.out.splitlines(), r.out


# -- GGUF ----------------------------------------------------------------------------------------


def _gguf_pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_gguf(
        tmp_path / "a.gguf",
        {"tok.weight": np.ones((4, 8), np.float32), "out.weight": np.ones(8, np.float16)},
        [("add_uint32", "llama.block_count", 2), ("add_string", "general.name", "tiny")],
    )
    b = write_gguf(
        tmp_path / "b.gguf",
        {"tok.weight": np.ones((4, 16), np.float32)},
        [("add_uint32", "llama.block_count", 4), ("add_float32", "x.scale", 0.5)],
    )
    return a, b


def test_diff_gguf(tmp_path: Path, capsys: Any) -> None:
    a, b = _gguf_pair(tmp_path)
    doc = run_json(capsys, "diff", a, b)
    assert doc["identical"] is False
    assert doc["tensors"] == {
        "added": [],
        "removed": ["out.weight"],
        "changed": [
            # row-major, as numpy wrote them (not ggml's innermost-first order)
            {"name": "tok.weight", "field": "shape", "a": [4, 8], "b": [4, 16]},
            {"name": "tok.weight", "field": "byte_length", "a": 128, "b": 256},
        ],
    }
    assert doc["metadata"] == {
        "added": {"x.scale": 0.5},
        "removed": {"general.name": "tiny"},
        "changed": {"llama.block_count": [2, 4]},
    }
    r = run(capsys, "diff", a, b, "--fail-on-diff")
    assert r.code == 1
    assert "  ~ llama.block_count: 2 -> 4" in r.out.splitlines()
    assert "  + x.scale: 0.5" in r.out.splitlines()
    assert run(capsys, "diff", a, a, "--fail-on-diff").code == 0


def test_diff_gguf_data_is_unsupported(tmp_path: Path, capsys: Any) -> None:
    a, b = _gguf_pair(tmp_path)
    assert_one_error(run(capsys, "diff", a, b, "--data"), contains="unsupported")
    assert_one_error(run(capsys, "diff", a, b, "--data", "--json"), contains="GGUF")


def test_diff_json_with_non_finite_gguf_metadata_is_valid_json(tmp_path: Path, capsys: Any) -> None:
    a = write_gguf(tmp_path / "a.gguf", {"t": np.ones(4, np.float32)}, [("add_float32", "x", 1.0)])
    b = write_gguf(
        tmp_path / "b.gguf", {"t": np.ones(4, np.float32)}, [("add_float32", "x", float("nan"))]
    )
    doc = run_json(capsys, "diff", a, b)  # strict: NaN is not JSON
    assert doc["identical"] is False


def test_diff_gguf_with_nan_metadata_against_itself_is_identical(
    tmp_path: Path, capsys: Any
) -> None:
    a = write_gguf(
        tmp_path / "a.gguf", {"t": np.ones(4, np.float32)}, [("add_float32", "x", float("nan"))]
    )
    r = run(capsys, "diff", a, a, "--fail-on-diff")
    assert r.out.splitlines()[-1] == "identical", r.out
    assert r.code == 0
