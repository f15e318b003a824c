"""Errors and the output contract: bad input is exit status 2 with exactly one
``tensorfile: error:`` line on stderr and nothing on stdout; usage errors are status 2; the
installed console script keeps stdout (data) and stderr (messages) apart end to end."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import cbor2
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
from tests.helpers.cli import assert_one_error, run, run_proc, strict_json

COMMANDS = [
    ("inspect",),
    ("inspect", "--json"),
    ("inspect", "--tree"),
    ("id",),
    ("id", "--content", "--json"),
    ("summary",),
    ("summary", "--json"),
    ("meta",),
    ("meta", "--json"),
    ("meta", "--set", "a=b"),
]
CMD_IDS = [" ".join(c) for c in COMMANDS]


def _cmd(cmd: tuple[str, ...], path: Any) -> list[Any]:
    return [cmd[0], path, *cmd[1:]]


# -- unreadable input ----------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS, ids=CMD_IDS)
def test_missing_file(tmp_path: Path, capsys: Any, cmd: tuple[str, ...]) -> None:
    missing = tmp_path / "nope.safetensors"
    message = assert_one_error(run(capsys, *_cmd(cmd, missing)), contains="cannot read")
    assert str(missing) in message
    assert not missing.exists()


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a word its error message must contain)."""
    good_st = write_safetensors(tmp_path / "good.safetensors", metadata=MODEL_META)
    good_zt = write_zt(tmp_path / "good.zt")
    good_gg = write_gguf(tmp_path / "good.gguf", {"t": np.ones((4, 8), np.float32)})
    st, zt, gg = good_st.read_bytes(), good_zt.read_bytes(), good_gg.read_bytes()
    (n,) = struct.unpack("<Q", st[:8])
    files = {
        "empty": (b"", "safetensors"),
        "short": (b"\x01\x02\x03", "safetensors"),
        "garbage": (bytes(range(256)) * 4, "safetensors"),
        "text": (b"hello, this is not a model file\n", "safetensors"),
        "st-cut-in-header": (st[: 8 + n // 2], "safetensors"),
        "st-cut-in-data": (st[:-5], "safetensors"),
        "st-extra-bytes": (st + b"\0" * 8, "safetensors"),
        "st-header-not-object": (struct.pack("<Q", 2) + b"[]", "safetensors"),
        "st-header-not-json": (struct.pack("<Q", 8) + b"{nope!!}", "safetensors"),
        "st-unknown-dtype": (
            _st_raw({"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}, 4),
            "safetensors",
        ),
        "zt-bad-version": (b"ZTEN9999" + zt[8:], "ztensor"),
        "zt-cut": (zt[: len(zt) // 2], "ztensor"),
        "zt-footer-garbage": (zt[:-8] + b"\xff" * 8, "ztensor"),
        "gguf-bad-version": (b"GGUF" + struct.pack("<I", 99) + gg[8:], "gguf"),
        "gguf-cut-in-header": (gg[:40], "gguf"),
    }
    out = {}
    for name, (data, word) in files.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        out[name] = (path, word)
    return out


def _st_raw(header: dict[str, Any], data_len: int) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"\0" * data_len


BAD_NAMES = [
    "empty", "short", "garbage", "text", "st-cut-in-header", "st-cut-in-data",
    "st-extra-bytes", "st-header-not-object", "st-header-not-json", "st-unknown-dtype",
    "zt-bad-version", "zt-cut", "zt-footer-garbage", "gguf-bad-version", "gguf-cut-in-header",
]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_invalid_files(tmp_path: Path, capsys: Any, bad: str) -> None:
    path, word = _bad_files(tmp_path)[bad]
    before = path.read_bytes()
    for cmd in COMMANDS:
        message = assert_one_error(run(capsys, *_cmd(cmd, path)))
        assert word in message.lower(), (cmd, message)
    good = tmp_path / "good.safetensors"
    assert_one_error(run(capsys, "diff", path, good))
    assert_one_error(run(capsys, "diff", good, path, "--json", "--fail-on-diff"))
    assert path.read_bytes() == before  # meta --set did not touch it


def test_error_message_stays_on_one_line(tmp_path: Path, capsys: Any) -> None:
    weird = tmp_path / "two\nlines.safetensors"
    assert_one_error(run(capsys, "inspect", weird), contains="cannot read")
    header = b'{"w":\n {"dtype":\n "F32",\n\n'
    weird.write_bytes(struct.pack("<Q", len(header)) + header)
    assert_one_error(run(capsys, "summary", weird), contains="invalid safetensors")


def test_diff_with_missing_side(tmp_path: Path, capsys: Any) -> None:
    good = write_safetensors(tmp_path / "good.safetensors")
    missing = tmp_path / "missing.zt"
    for argv in (
        ("diff", good, missing),
        ("diff", missing, good),
        ("diff", good, missing, "--data", "--json", "--fail-on-diff"),
    ):
        message = assert_one_error(run(capsys, *argv), contains="cannot read")
        assert str(missing) in message


def test_content_id_of_truncated_gguf_data(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(tmp_path / "m.gguf", {"t": np.arange(64, dtype=np.float32)})
    path.write_bytes(path.read_bytes()[:-16])  # the last 4 values are gone
    # hashing "the tensor bytes" of a file that does not hold them is unreadable input
    assert_one_error(run(capsys, "id", path, "--content"))


def _with_manifest(src: Path, dst: Path, change: Any) -> Path:
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[-8:])
    start = len(raw) - 8 - n
    manifest = cbor2.loads(raw[start:-8])
    change(manifest)
    encoded = cbor2.dumps(manifest)
    dst.write_bytes(raw[:start] + encoded + struct.pack("<Q", len(encoded)))
    return dst


def test_extension_layout_is_hashed_and_compared_not_crashed(tmp_path: Path, capsys: Any) -> None:
    good = write_zt(tmp_path / "good.zt")

    def layout(m: dict[str, Any]) -> None:
        m["tensors"]["lm_head.weight"]["format"] = "fancy_layout"

    path = _with_manifest(good, tmp_path / "ext.zt", layout)
    # the header can be shown...
    r = run(capsys, "inspect", path, "--json")
    assert r.code == 0
    doc = strict_json(r.out)
    assert {t["name"]: t.get("layout") for t in doc["tensors"]}["lm_head.weight"] == "fancy_layout"
    # ...and its data is hashed and compared component by component (raw bytes)
    r = run_proc("id", path, "--content")
    assert r.code == 0, r.err
    assert len(r.out.strip()) == 64 and r.err == ""
    assert r.out != run_proc("id", good, "--content").out
    r = run_proc("diff", path, good, "--data", "--json")
    assert r.code == 0, r.err
    doc = strict_json(r.out)
    assert doc["data"]["compared"] >= 1


def test_json_success_reports_reader_warnings_as_single_lines(tmp_path: Path) -> None:
    good = write_zt(tmp_path / "good.zt")

    def misalign(m: dict[str, Any]) -> None:
        data = [t["components"]["data"] for t in m["tensors"].values()]
        min(data, key=lambda c: c["offset"])["offset"] += 1  # still inside the file

    path = _with_manifest(good, tmp_path / "odd.zt", misalign)
    r = run_proc("inspect", path, "--json")
    assert r.code == 0
    assert strict_json(r.out)["tensor_count"] == 7
    # stdout holds only the JSON; the reader's warning is one tidy line on stderr
    lines = r.err.splitlines()
    assert lines, "the misalignment warning should be reported"
    assert all(line.startswith("tensorfile: warning: ") for line in lines), r.err
    assert any("not a multiple of 64" in line for line in lines), r.err


# -- sharded checkpoints -------------------------------------------------------------------------


def test_sharded_errors(tmp_path: Path, capsys: Any) -> None:
    names = sorted(MODEL)
    index = write_sharded(
        tmp_path / "ckpt", [{n: MODEL[n] for n in names[:3]}, {n: MODEL[n] for n in names[3:]}]
    )
    folder = index.parent
    # a shard is missing
    shard2 = folder / "model-00002-of-00002.safetensors"
    saved = shard2.read_bytes()
    shard2.unlink()
    for target in (index, folder):
        message = assert_one_error(run(capsys, "inspect", target), contains="cannot read")
        assert "model-00002-of-00002.safetensors" in message
    shard2.write_bytes(saved)
    # the index is not JSON / has no weight_map / names a tensor its shard lacks
    for text, word in (
        ("not json", "JSON"),
        ('{"metadata": {}}', "weight_map"),
        ('{"weight_map": {"ghost": "model-00001-of-00002.safetensors"}}', "ghost"),
        ('{"weight_map": {"x": "../outside.safetensors"}}', "leaves the folder"),
    ):
        bad = tmp_path / "bad" / "model.safetensors.index.json"
        bad.parent.mkdir(exist_ok=True)
        for f in folder.glob("*.safetensors"):
            (bad.parent / f.name).write_bytes(f.read_bytes())
        bad.write_text(text)
        assert_one_error(run(capsys, "summary", bad), contains=word)
        assert_one_error(run(capsys, "summary", bad.parent, "--json"), contains=word)
    # a folder without an index, a glob matching nothing, two files holding one tensor
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error(run(capsys, "id", empty), contains="index")
    assert_one_error(run(capsys, "id", tmp_path / "none-*.safetensors"), contains="cannot read")
    write_safetensors(tmp_path / "dup.safetensors", {names[0]: MODEL[names[0]]})
    both = str(tmp_path) + "/*/model-00001-of-00002.safetensors"
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "model-00001-of-00002.safetensors").write_bytes(
        (folder / "model-00001-of-00002.safetensors").read_bytes()
    )
    assert_one_error(run(capsys, "inspect", both), contains=names[0])


def test_glob_mixing_formats(tmp_path: Path, capsys: Any) -> None:
    write_safetensors(tmp_path / "a.model", {"a": np.ones(1, np.float32)})
    write_zt(tmp_path / "b.model", {"b": np.ones(1, np.float32)})
    assert_one_error(run(capsys, "inspect", tmp_path / "*.model"), contains="mix formats")


# -- usage errors (argparse prints its own usage text) -------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("bogus",),
        ("inspect",),
        ("inspect", "m.safetensors", "--bogus"),
        ("diff", "a", "b", "c"),
        ("diff", "only-one"),
        ("diff", "a", "b", "--format", "xml"),
        ("meta", "m.safetensors", "--set"),
        ("id", "--content"),
        ("--json", "inspect", "m.safetensors"),
    ],
    ids=lambda a: " ".join(a) or "no-args",
)
def test_usage_errors(capsys: Any, argv: tuple[str, ...]) -> None:
    # one line, like every other error: what is wrong, then the command's usage
    assert_one_error(run(capsys, *argv), contains="usage: tensorfile")


def test_help_and_version(capsys: Any) -> None:
    import tensorfile

    r = run(capsys, "--version")
    assert (r.code, r.out, r.err) == (0, f"tensorfile {tensorfile.__version__}\n", "")
    r = run(capsys, "--help")
    assert r.code == 0
    assert r.out.startswith("usage: tensorfile")
    for name in ("inspect", "id", "summary", "diff", "meta"):
        assert name in r.out
    r = run(capsys, "diff", "--help")
    assert r.code == 0
    assert "--fail-on-diff" in r.out


# -- the console script, end to end --------------------------------------------------------------


def test_script_json_on_stdout_only(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata=MODEL_META)
    r = run_proc("inspect", path, "--json")
    assert r.code == 0
    assert r.err == ""
    doc = strict_json(r.out)
    assert (doc["schema"], doc["tensor_count"], doc["metadata"]) == (1, 7, MODEL_META)
    r = run_proc("summary", path)
    assert r.code == 0
    assert r.err == ""
    assert r.out == f"safetensors,N/A,7,2,{doc['structural_hash']}\n"


def test_script_errors_on_stderr_only(tmp_path: Path) -> None:
    missing = tmp_path / "missing.safetensors"
    for argv in (("inspect", missing, "--json"), ("meta", missing, "--set", "a=b")):
        assert_one_error(run_proc(*argv), contains="cannot read")
    path = write_safetensors(tmp_path / "m.safetensors")
    assert_one_error(run_proc("meta", path, "--set", "foo"), contains="KEY=VALUE")
    garbage = tmp_path / "g.safetensors"
    garbage.write_bytes(b"\xff" * 64)  # named .safetensors, but the content decides
    assert_one_error(run_proc("id", garbage, "--json"), contains="not a tensor file")
    r = run_proc("inspect", path, "--frobnicate")
    assert_one_error(r, contains="unrecognized arguments: --frobnicate")
    assert "usage: tensorfile inspect" in r.err


def test_script_diff_exit_status(tmp_path: Path) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", metadata={"v": "1"})
    b = write_zt(tmp_path / "b.zt", attributes={"v": "2"})
    same = write_zt(tmp_path / "same.zt", attributes={"v": "1"}, compression="zstd")
    r = run_proc("diff", a, b, "--fail-on-diff", "--json")
    assert r.code == 1
    assert r.err == ""
    assert strict_json(r.out)["metadata"]["changed"] == {"v": ["1", "2"]}
    r = run_proc("diff", a, b)
    assert r.code == 0
    assert r.out.splitlines()[-1] == "the files differ"
    r = run_proc("diff", a, same, "--data", "--fail-on-diff")
    assert r.code == 0
    assert r.err == ""
    assert r.out.splitlines()[-1] == "identical"
