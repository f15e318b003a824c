"""``tensorfile inspect``: the human rendering, ``--tree``, ``--verbose`` and ``--json``, for
safetensors, zTensor, GGUF and sharded checkpoints, checked against what the files hold."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from tests.helpers.checkpoints import (
    MODEL,
    MODEL_BYTES_BY_DTYPE,
    MODEL_META,
    MODEL_PARAMS,
    MODEL_PARAMS_BY_DTYPE,
    MODEL_TOTAL_BYTES,
    safetensors_header,
    write_gguf,
    write_safetensors,
    write_sharded,
    write_zt,
    zt_manifest,
)
from tests.helpers.cli import run, run_json, run_proc, table_rows

HEX64 = re.compile(r"[0-9a-f]{64}")
ZT_DTYPES = {"F32": "float32", "F16": "float16", "I8": "int8", "I32": "int32"}


def _tensor_rows_from_header(path: Path) -> list[list[str]]:
    """The rows the tensor table should show, from the file's own JSON header: the offsets
    absolute in the file (the header's data_offsets count from byte 8 + its length)."""
    n, header = safetensors_header(path)
    rows = []
    for name in sorted(k for k in header if k != "__metadata__"):
        e = header[name]
        start, end = (8 + n + o for o in e["data_offsets"])
        shape = "[" + ", ".join(str(d) for d in e["shape"]) + "]"
        rows.append([name, e["dtype"], shape, f"{end - start:,}", f"[{start}, {end})"])
    return rows


# -- human output ------------------------------------------------------------------------------


def test_inspect_safetensors_human(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "model.safetensors", metadata=MODEL_META)
    header_size, _ = safetensors_header(path)
    r = run(capsys, "inspect", path)
    assert r.code == 0
    assert r.err == ""
    lines = r.out.splitlines()
    assert lines[0] == f"safetensors  {path}"
    assert lines[1] == (
        f"header {header_size:,} bytes · 7 tensors · 149 parameters · 539 B of tensor data"
    )
    ident = run(capsys, "id", path).out.strip()
    assert lines[2] == f"structural hash {ident}"
    assert lines[3:6] == ["metadata (2):", "  format: pt", "  note: hello world"]
    assert table_rows(r.out, 3) == [
        ["F16", "24", "48"],
        ["F32", "120", "480"],
        ["I32", "2", "8"],
        ["I8", "3", "3"],
    ]
    assert table_rows(r.out, 5) == _tensor_rows_from_header(path)


def test_inspect_human_thousands_and_sizes(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(
        tmp_path / "one.safetensors", {"test.weight.0": np.zeros((64, 128), np.float32)}
    )
    header_size, _ = safetensors_header(path)
    r = run(capsys, "inspect", path)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[1] == (
        f"header {header_size} bytes · 1 tensor · 8,192 parameters · 32.8 kB of tensor data"
    )
    assert "no metadata" in lines
    assert table_rows(r.out, 3) == [["F32", "8,192", "32,768"]]
    start = 8 + header_size  # file offsets: absolute
    row = ["test.weight.0", "F32", "[64, 128]", "32,768", f"[{start}, {start + 32768})"]
    assert table_rows(r.out, 5) == [row]


def test_inspect_human_megabytes_not_1000_kb(tmp_path: Path, capsys: Any) -> None:
    # 999,999 bytes is 1.0 MB (powers of 1000), not "1000.0 kB"
    path = write_safetensors(tmp_path / "big.safetensors", {"w": np.zeros(999_999, np.uint8)})
    r = run(capsys, "inspect", path)
    assert r.code == 0
    assert r.out.splitlines()[1].endswith("· 1.0 MB of tensor data"), r.out.splitlines()[1]


def test_inspect_human_metadata_escapes_and_truncates(tmp_path: Path, capsys: Any) -> None:
    meta = {"ctl": "a\nb\tc", "long": "x" * 200, "plain": "v"}
    path = write_safetensors(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)}, meta)
    r = run(capsys, "inspect", path)
    assert r.code == 0
    lines = r.out.splitlines()
    start = lines.index("metadata (3):")
    assert lines[start + 1] == "  ctl: a\\nb\\tc"
    assert lines[start + 2] == "  long: " + "x" * 117 + "... (200 characters)"
    assert lines[start + 3] == "  plain: v"


def test_inspect_ztensor_human(tmp_path: Path, capsys: Any) -> None:
    path = write_zt(tmp_path / "m.zt", attributes=MODEL_META, compression="zstd")
    r = run(capsys, "inspect", path)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == f"ztensor 1.0  {path}"
    assert lines[1].startswith(f"header {zt_manifest(path)[0]:,} bytes · 7 tensors · 149 param")
    assert "  note: hello world" in lines
    rows = {row[0]: row for row in table_rows(r.out, 5)}
    assert sorted(rows) == sorted(MODEL)
    assert rows["model.layers.1.mlp.up.bias"][1:3] == ["int8 (zstd)", "[3]"]
    assert rows["lm_head.weight"][1:3] == ["float32 (zstd)", "[4, 6]"]
    # parameters per dtype do not depend on the compression
    params = {row[0]: row[1] for row in table_rows(r.out, 3)}
    assert params == {ZT_DTYPES[k]: str(v) for k, v in MODEL_PARAMS_BY_DTYPE.items()}


def test_inspect_gguf_human(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {"tok.weight": np.ones((4, 8), np.float32), "out.weight": np.ones(8, np.float16)},
        [("add_uint32", "llama.block_count", 2), ("add_string", "general.name", "tiny")],
    )
    r = run(capsys, "inspect", path)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == f"gguf 3  {path}"
    assert " · 2 tensors · 40 parameters · 144 B of tensor data" in lines[1]
    assert lines[lines.index("metadata (3):") + 1 :][:3] == [
        "  general.architecture: llama",
        "  general.name: tiny",
        "  llama.block_count: 2",
    ]
    assert table_rows(r.out, 3) == [["F16", "8", "16"], ["F32", "32", "128"]]
    reader = gguf.GGUFReader(str(path))
    want = []
    for t in sorted(reader.tensors, key=lambda t: t.name):
        start = int(t.data_offset)  # absolute in the file
        # row-major: the reverse of ggml's order, which the gguf reader keeps
        shape = "[" + ", ".join(str(int(d)) for d in reversed(t.shape)) + "]"
        end = start + int(t.n_bytes)
        dtype = t.tensor_type.name
        want.append([t.name, dtype, shape, f"{int(t.n_bytes):,}", f"[{start}, {end})"])
    assert table_rows(r.out, 5) == want


def test_inspect_gguf_quantized_says_stored_and_dequantized(tmp_path: Path, capsys: Any) -> None:
    """A quantized GGUF's tensor data counted two ways, each labelled: the blocks stored, and
    float32 once dequantized, which is the figure convert reports."""
    f32 = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    q = gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0)
    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("q", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("f", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    stored = q.nbytes + 16  # 8 rows of 2 Q8_0 blocks of 34 bytes, and 4 float32
    dequantized = f32.nbytes + 16
    line = run(capsys, "inspect", path).out.splitlines()[1]
    assert line.endswith(
        f"· 2 tensors · 516 parameters · {stored:,} B of tensor data as stored "
        f"({dequantized / 1000:.1f} kB dequantized, as converted)"
    ), line
    converted = run_json(capsys, "convert", path, tmp_path / "q.safetensors")
    assert converted["bytes_in"] == dequantized


def test_inspect_omits_the_header_of_formats_without_one(tmp_path: Path, capsys: Any) -> None:
    """An npz archive and a PyTorch pickle have no header to count: no "header 0 bytes"."""
    import torch

    np.savez(tmp_path / "a.npz", w=np.ones((3, 4), np.float32))
    torch.save({"w": torch.ones(3, 4)}, tmp_path / "a.pt")
    np.save(tmp_path / "a.npy", np.ones((3, 4), np.float32))
    for name in ("a.npz", "a.pt"):
        line = run(capsys, "inspect", tmp_path / name).out.splitlines()[1]
        assert line == "1 tensor · 12 parameters · 48 B of tensor data", (name, line)
    line = run(capsys, "inspect", tmp_path / "a.npy").out.splitlines()[1]
    assert line == "header 128 bytes · 1 tensor · 12 parameters · 48 B of tensor data", line


# -- --tree and --verbose ----------------------------------------------------------------------

TREE = """\
model.safetensors  149 parameters
├── lm_head  24 parameters, 96 B
│   └── weight  F32 [4, 6]  24
└── model  125 parameters, 443 B
    ├── embed  60 parameters, 240 B
    │   └── weight  F32 [10, 6]  60
    ├── layers  63 parameters, 195 B
    │   ├── 0.attn.q  42 parameters, 156 B
    │   │   ├── bias  F16 [6]  6
    │   │   └── weight  F32 [6, 6]  36
    │   └── 1.mlp.up  21 parameters, 39 B
    │       ├── bias  I8 [3]  3
    │       └── weight  F16 [3, 6]  18
    └── norm  2 parameters, 8 B
        └── scale  I32 [2]  2"""


def test_inspect_tree(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "model.safetensors", metadata=MODEL_META)
    r = run(capsys, "inspect", path, "--tree")
    assert r.code == 0
    assert r.err == ""
    lines = [line.rstrip() for line in r.out.splitlines()]
    start = lines.index("model.safetensors  149 parameters")
    assert "\n".join(lines[start:]) == TREE
    # the header still comes first; the flat tensor table does not appear
    assert lines[0] == f"safetensors  {path}"
    assert table_rows(r.out, 5) == []


def test_inspect_tree_of_sharded_checkpoint(tmp_path: Path, capsys: Any) -> None:
    names = sorted(MODEL)
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in names[:3]}, {n: MODEL[n] for n in names[3:]}],
    )
    r = run(capsys, "inspect", index, "--tree")
    assert r.code == 0
    lines = [line.rstrip() for line in r.out.splitlines()]
    start = lines.index("model.safetensors.index.json  149 parameters")
    assert "\n".join(lines[start + 1 :]) == TREE.split("\n", 1)[1]


def test_inspect_verbose_lists_every_tensor(tmp_path: Path, capsys: Any) -> None:
    tensors = {f"t.{i:03d}": np.full(1, i % 256, np.uint8) for i in range(205)}
    path = write_safetensors(tmp_path / "many.safetensors", tensors)
    r = run(capsys, "inspect", path)
    assert r.code == 0
    rows = table_rows(r.out, 5)
    assert [row[0] for row in rows] == [f"t.{i:03d}" for i in range(200)]
    assert r.out.splitlines()[-1] == "... 5 more tensors (--verbose lists them all)"
    r = run(capsys, "inspect", path, "--verbose")
    assert r.code == 0
    assert [row[0] for row in table_rows(r.out, 5)] == sorted(tensors)
    assert "more tensors" not in r.out
    doc = run_json(capsys, "inspect", path)
    assert [t["name"] for t in doc["tensors"]] == sorted(tensors)


# -- names that look like rich markup -----------------------------------------------------------


def test_inspect_shows_bracketed_names_verbatim(tmp_path: Path, capsys: Any) -> None:
    tensors = {"w[b]": np.ones(2, np.float32), "layers[bold].x": np.ones(1, np.float32)}
    path = write_safetensors(tmp_path / "brackets.safetensors", tensors)
    r = run(capsys, "inspect", path)
    assert r.code == 0
    assert [row[0] for row in table_rows(r.out, 5)] == ["layers[bold].x", "w[b]"]
    r = run(capsys, "inspect", path, "--tree")
    assert r.code == 0
    assert "w[b]  F32 [2]  2" in r.out
    assert "layers[bold]  1 parameter, 4 B" in r.out


def test_inspect_bracket_closing_name_does_not_crash(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "close.safetensors", {"x[/]": np.ones(1, np.float32)})
    for extra in ((), ("--tree",)):
        r = run_proc("inspect", path, *extra)
        assert r.code == 0, r.err
        assert r.err == ""
        assert "x[/]" in r.out


# -- --json ------------------------------------------------------------------------------------


def test_inspect_json_safetensors(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "model.safetensors", metadata=MODEL_META)
    header_size, header = safetensors_header(path)
    doc = run_json(capsys, "inspect", path)
    ident = run(capsys, "id", path).out.strip()
    want_tensors = [
        {
            "name": name,
            "dtype": header[name]["dtype"],
            "shape": header[name]["shape"],
            "byte_length": header[name]["data_offsets"][1] - header[name]["data_offsets"][0],
            "offset": 8 + header_size + header[name]["data_offsets"][0],
            "data_offsets": header[name]["data_offsets"],
        }
        for name in sorted(MODEL)
    ]
    assert doc == {
        "schema": 1,
        "format": "safetensors",
        "path": str(path),
        "version": None,
        "header_size": header_size,
        "tensor_count": 7,
        "parameter_count": MODEL_PARAMS,
        "parameters_by_dtype": MODEL_PARAMS_BY_DTYPE,
        "bytes_by_dtype": MODEL_BYTES_BY_DTYPE,
        "total_bytes": MODEL_TOTAL_BYTES,
        "metadata": MODEL_META,
        "structural_hash": ident,
        "tensors": want_tensors,
    }
    assert HEX64.fullmatch(doc["structural_hash"])
    # the shapes and byte lengths are those of the arrays written
    for t in doc["tensors"]:
        assert t["shape"] == list(MODEL[t["name"]].shape)
        assert t["byte_length"] == MODEL[t["name"]].nbytes


def test_inspect_json_from_reference_writer(tmp_path: Path, capsys: Any) -> None:
    from safetensors.numpy import save_file as ref_save

    path = tmp_path / "ref.safetensors"
    ref_save(dict(MODEL), str(path), metadata={"format": "np"})
    header_size, header = safetensors_header(path)
    doc = run_json(capsys, "inspect", path)
    assert doc["header_size"] == header_size
    assert doc["metadata"] == {"format": "np"}
    assert doc["parameters_by_dtype"] == MODEL_PARAMS_BY_DTYPE
    assert {t["name"]: t["data_offsets"] for t in doc["tensors"]} == {
        n: header[n]["data_offsets"] for n in MODEL
    }


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_inspect_json_ztensor(tmp_path: Path, capsys: Any, compression: str | None) -> None:
    path = write_zt(tmp_path / "m.zt", attributes=MODEL_META, compression=compression)
    manifest_len, manifest = zt_manifest(path)
    doc = run_json(capsys, "inspect", path)
    assert doc["schema"] == 1
    assert doc["format"] == "ztensor"
    assert doc["version"] == "1.0"
    assert doc["path"] == str(path)
    assert doc["header_size"] == manifest_len
    assert doc["tensor_count"] == 7
    assert doc["parameter_count"] == MODEL_PARAMS
    assert doc["parameters_by_dtype"] == {ZT_DTYPES[k]: v for k, v in MODEL_PARAMS_BY_DTYPE.items()}
    assert doc["metadata"] == MODEL_META
    want = []
    for name in sorted(MODEL):
        entry = manifest["tensors"][name]
        comp = entry["components"]["data"]
        t = {
            "name": name,
            "dtype": entry["dtype"],
            "shape": list(MODEL[name].shape),
            "byte_length": comp["length"],
            "offset": comp["offset"],  # zTensor's manifest offsets are absolute
            "data_offsets": [comp["offset"], comp["offset"] + comp["length"]],
        }
        if compression:
            t["encoding"] = "zstd"
        want.append(t)
    assert doc["tensors"] == want
    assert doc["total_bytes"] == sum(t["byte_length"] for t in want)
    if compression is None:
        assert doc["bytes_by_dtype"] == {ZT_DTYPES[k]: v for k, v in MODEL_BYTES_BY_DTYPE.items()}
        assert doc["total_bytes"] == MODEL_TOTAL_BYTES


def test_inspect_json_gguf(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {"tok.weight": np.ones((4, 8), np.float32), "out.weight": np.ones(8, np.float16)},
        [
            ("add_uint32", "llama.block_count", 2),
            ("add_string", "general.name", "tiny"),
            ("add_float32", "x.scale", 0.5),
            ("add_bool", "x.flag", True),
            ("add_array", "x.list", [1, 2, 3]),
        ],
    )
    reader = gguf.GGUFReader(str(path))
    doc = run_json(capsys, "inspect", path)
    assert doc["format"] == "gguf"
    assert doc["version"] == "3"
    assert doc["tensor_count"] == 2
    assert doc["parameter_count"] == 40
    assert doc["parameters_by_dtype"] == {"F16": 8, "F32": 32}
    assert doc["bytes_by_dtype"] == {"F16": 16, "F32": 128}
    assert doc["total_bytes"] == 144
    assert doc["metadata"] == {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "general.name": "tiny",
        "x.scale": 0.5,
        "x.flag": True,
        "x.list": [1, 2, 3],
    }
    # the header ends where the (aligned) tensor data begins
    assert reader.data_offset - reader.alignment < doc["header_size"] <= reader.data_offset
    want = []
    for t in sorted(reader.tensors, key=lambda t: t.name):
        start = int(t.data_offset) - int(reader.data_offset)
        want.append(
            {
                "name": t.name,
                "dtype": t.tensor_type.name,
                "shape": [int(d) for d in reversed(t.shape)],
                "byte_length": int(t.n_bytes),
                "offset": int(t.data_offset),
                "data_offsets": [start, start + int(t.n_bytes)],
            }
        )
    assert doc["tensors"] == want
    assert "shards" not in doc


def test_inspect_json_gguf_non_finite_metadata_is_valid_json(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(
        tmp_path / "nan.gguf",
        {"t": np.ones(4, np.float32)},
        [("add_float32", "x.nan", float("nan")), ("add_float64", "x.inf", float("inf"))],
    )
    run_json(capsys, "inspect", path)  # strict: NaN / Infinity are not JSON


# -- sharded checkpoints -----------------------------------------------------------------------


def _two_shards(tmp_path: Path) -> tuple[Path, list[list[str]]]:
    names = sorted(MODEL)
    groups = [names[:3], names[3:]]
    index = write_sharded(
        tmp_path / "ckpt",
        [{n: MODEL[n] for n in g} for g in groups],
        [MODEL_META, {"format": "pt", "extra": "2"}],
    )
    return index, groups


@pytest.mark.parametrize("how", ["index", "folder", "glob"])
def test_inspect_json_sharded(tmp_path: Path, capsys: Any, how: str) -> None:
    index, groups = _two_shards(tmp_path)
    folder = index.parent
    target = {"index": index, "folder": folder, "glob": folder / "model-*.safetensors"}[how]
    doc = run_json(capsys, "inspect", target)
    shard_names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    headers = [safetensors_header(folder / s) for s in shard_names]
    assert doc["format"] == "safetensors"
    assert doc["path"] == str(target)
    assert doc["header_size"] == headers[0][0] + headers[1][0]
    assert doc["tensor_count"] == 7
    assert doc["parameter_count"] == MODEL_PARAMS
    assert doc["parameters_by_dtype"] == MODEL_PARAMS_BY_DTYPE
    assert doc["bytes_by_dtype"] == MODEL_BYTES_BY_DTYPE
    assert doc["total_bytes"] == MODEL_TOTAL_BYTES
    assert doc["metadata"] == {"format": "pt"}  # what both shards agree on
    assert doc["shards"] == [
        {
            "path": str(folder / s),
            "tensor_count": len(g),
            "total_bytes": sum(MODEL[n].nbytes for n in g),
        }
        for s, g in zip(shard_names, groups, strict=True)
    ]
    where = {n: s for s, g in zip(shard_names, groups, strict=True) for n in g}
    for t in doc["tensors"]:
        n, header = headers[shard_names.index(where[t["name"]])]
        assert t == {
            "name": t["name"],
            "dtype": header[t["name"]]["dtype"],
            "shape": list(MODEL[t["name"]].shape),
            "byte_length": MODEL[t["name"]].nbytes,
            "offset": 8 + n + header[t["name"]]["data_offsets"][0],  # in its shard
            "data_offsets": header[t["name"]]["data_offsets"],
            "shard": where[t["name"]],
        }
    assert [t["name"] for t in doc["tensors"]] == sorted(MODEL)


def test_inspect_sharded_human(tmp_path: Path, capsys: Any) -> None:
    index, groups = _two_shards(tmp_path)
    r = run(capsys, "inspect", index.parent)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0] == f"safetensors  {index.parent}"
    assert "· 7 tensors · 149 parameters · 539 B of tensor data" in lines[1]
    b1 = sum(MODEL[n].nbytes for n in groups[0])
    b2 = sum(MODEL[n].nbytes for n in groups[1])
    i = lines.index("2 shards:")
    assert lines[i + 1 : i + 3] == [
        f"  model-00001-of-00002.safetensors  3 tensors, {b1} B",
        f"  model-00002-of-00002.safetensors  4 tensors, {b2} B",
    ]
    rows = table_rows(r.out, 6)  # name, dtype, shape, bytes, offsets, shard
    assert [row[0] for row in rows] == sorted(MODEL)
    assert {row[0]: row[5] for row in rows} == {
        n: f"model-0000{i}-of-00002.safetensors" for i, g in enumerate(groups, 1) for n in g
    }


def test_a_sharded_checkpoint_has_one_format_name_in_every_command(
    tmp_path: Path, capsys: Any
) -> None:
    """inspect, summary, verify and convert call a sharded checkpoint by the same format name
    (safetensors; verify adds how many shards, as inspect lists them)."""
    index, _ = _two_shards(tmp_path)
    folder = index.parent
    assert run_json(capsys, "inspect", folder)["format"] == "safetensors"
    assert run(capsys, "summary", folder).out.split(",")[0] == "safetensors"
    doc = run_json(capsys, "verify", folder)
    assert (doc["format"], doc["shards"]) == ("safetensors", 2)
    verified = run(capsys, "verify", folder).out
    assert verified.startswith(f"{folder}: OK (safetensors, 2 shards, 7 tensors: "), verified
    converted = run_json(capsys, "convert", folder, tmp_path / "one.safetensors")
    assert converted["source_format"] == "safetensors"
