"""The command line under attack: an index that points at someone else's file, names and
metadata that hold terminal escape sequences, and arguments no one should pass (FIFOs,
devices, folders, undecodable bytes, empty strings, globs of nothing or of thousands).
Every case ends in status 0, 1 or 2, with one ``tensorfile: error:`` line for 2, nothing
raw on the terminal, and every file as it was."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorfile.cli._output import Output, printable
from tests.helpers.checkpoints import MODEL, write_safetensors, write_sharded, write_zt
from tests.helpers.cli import (
    ERROR_PREFIX,
    SCRIPT,
    Result,
    assert_one_error,
    natural,
    run,
    run_proc,
    strict_json,
    table_rows,
)
from tests.helpers.hostile import NASTY, lying_sparse, unsafe_chars, with_manifest

INDEX = "model.safetensors.index.json"


def _clean(r: Result) -> None:
    """Nothing a terminal would act on, on either stream; no traceback."""
    assert unsafe_chars(r.out) == [], r.out
    assert unsafe_chars(r.err) == [], r.err
    assert "Traceback" not in r.err


# -- an index that points elsewhere: meta --set leaves the victim untouched ----------------------


def _attack(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """A checkpoint whose index reaches ``victim.safetensors`` outside its folder."""
    victim = write_safetensors(tmp_path / "victim.safetensors", metadata={"owner": "victim"})
    shards = [{"a.w": np.ones(2, np.float32)}, {"b.w": np.ones(2, np.float32)}]
    index = write_sharded(tmp_path / "ckpt", shards)
    doc = json.loads(index.read_text())
    if how == "symlink":
        link = index.parent / "evil.safetensors"
        link.symlink_to(victim)
        target = link.name
    else:
        target = {
            "file-url": f"file://{victim}",
            "absolute": str(victim),
            "dotdot": "../victim.safetensors",
            "network": f"//localhost{victim}",
        }[how]
    doc["weight_map"] = {"a.w": "model-00001-of-00002.safetensors", **dict.fromkeys(MODEL, target)}
    index.write_text(json.dumps(doc))
    return index, victim


ATTACKS = ["file-url", "absolute", "dotdot", "network", "symlink"]


@pytest.mark.parametrize("how", ATTACKS)
def test_meta_set_through_a_hostile_index_leaves_the_victim_alone(
    tmp_path: Path, capsys: Any, how: str
) -> None:
    index, victim = _attack(tmp_path, how)
    before = victim.read_bytes()
    shard = index.parent / "model-00001-of-00002.safetensors"
    shard_before = shard.read_bytes()
    for target in (index, index.parent):
        for argv in (("--set", "pwned=yes"), ("--clear",), ("--delete", "owner")):
            r = run(capsys, "meta", target, *argv)
            assert_one_error(r, contains="outside" if how == "symlink" else "plain file name")
            _clean(r)
    for cmd in (("inspect",), ("id", "--content"), ("summary",)):
        assert_one_error(run(capsys, cmd[0], index, *cmd[1:]))
    assert victim.read_bytes() == before
    assert shard.read_bytes() == shard_before  # all or nothing: no shard was edited either


@pytest.mark.parametrize("how", ATTACKS)
def test_meta_set_in_the_checkpoint_folder_itself(tmp_path: Path, how: str) -> None:
    # the reported command, run from the checkpoint's folder as the console script
    index, victim = _attack(tmp_path, how)
    before = victim.read_bytes()
    r = run_proc("meta", INDEX, "--set", "k=v", cwd=index.parent)
    assert_one_error(r)
    r = run_proc("meta", ".", "--set", "k=v", "--json", cwd=index.parent)
    assert_one_error(r)
    assert victim.read_bytes() == before


# -- names and metadata that try to drive the terminal -------------------------------------------


@pytest.fixture
def nasty(tmp_path: Path) -> tuple[Path, Path, dict[str, Any], dict[str, str]]:
    """Two safetensors files whose tensor names and metadata hold :data:`NASTY` text; some
    tensors differ in shape or value between them."""
    tensors = {f"layer.{i}.{text}": np.full(2, i, np.float32) for i, text in enumerate(NASTY)}
    tensors[NASTY[0] + ".deep." + NASTY[5]] = np.ones(3, np.int8)
    meta = {f"k{i}{text}": f"v{text}" for i, text in enumerate(NASTY)}
    a = write_safetensors(tmp_path / "a.safetensors", tensors, meta)
    other = dict(tensors)
    other[f"layer.1.{NASTY[1]}"] = np.full(2, 9, np.float32)  # data differs
    other[f"layer.2.{NASTY[2]}"] = np.full(3, 2, np.float32)  # shape differs
    del other[f"layer.3.{NASTY[3]}"]
    other["added" + NASTY[4]] = np.ones(1, np.float32)
    meta_b = dict(meta)
    meta_b[f"k0{NASTY[0]}"] = "changed" + NASTY[6]
    b = write_safetensors(tmp_path / "b.safetensors", other, meta_b)
    return a, b, tensors, meta


COMMANDS = [
    ("inspect",),
    ("inspect", "--verbose"),
    ("inspect", "--tree"),
    ("meta",),
    ("summary",),
    ("id",),
    ("id", "--content"),
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_human_output_escapes_every_hostile_character(
    nasty: Any, capsys: Any, cmd: tuple[str, ...]
) -> None:
    a, _, tensors, meta = nasty
    r = run(capsys, cmd[0], a, *cmd[1:])
    assert r.code == 0, r
    _clean(r)
    if cmd[0] == "inspect":
        assert "  k0\\x1b[31mred\\x1b[0m: v\\x1b[31mred\\x1b[0m" in r.out.splitlines()
        assert "\\u202egnp.exe" in r.out
    if cmd == ("inspect", "--verbose"):
        names = {row[0] for row in table_rows(r.out, 5)}
        assert names == {printable(n) for n in tensors}
    if cmd == ("meta",):
        assert sorted(r.out.splitlines()) == sorted(
            f"{printable(k)}: {printable(v)}" for k, v in meta.items()
        )


@pytest.mark.parametrize(
    "fmt", [(), ("--format", "md"), ("--data",), ("--data", "--format", "md", "--fail-on-diff")]
)
def test_diff_output_escapes_every_hostile_character(
    nasty: Any, capsys: Any, fmt: tuple[str, ...]
) -> None:
    a, b, _, _ = nasty
    r = run(capsys, "diff", a, b, *fmt)
    assert r.code == (1 if "--fail-on-diff" in fmt else 0), r
    _clean(r)
    assert printable(f"layer.3.{NASTY[3]}") in r.out  # removed
    assert printable("added" + NASTY[4]) in r.out  # added
    if "--data" in fmt:
        assert printable(f"layer.1.{NASTY[1]}") in r.out


def test_markdown_cells_cannot_break_the_table(tmp_path: Path, capsys: Any) -> None:
    a = write_safetensors(tmp_path / "a.safetensors", {"x|`y`": np.ones(1, np.float32)},
                          {"k|": "<img src=x onerror=alert(1)>|*"})  # fmt: skip
    b = write_safetensors(tmp_path / "b.safetensors", {"z": np.ones(1, np.float32)}, {"k|": "v"})
    r = run(capsys, "diff", a, b, "--format", "md")
    assert r.code == 0
    lines = r.out.splitlines()
    assert "| `` x\\|`y` `` | removed | | |" in lines
    changed = next(line for line in lines if "changed" in line)
    assert "\\<img" in changed and changed.count("<img") == 1  # no raw HTML
    # every table row keeps its four cells: an unescaped '|' would add one
    for line in lines:
        if line.startswith("| "):
            assert len(line.replace("\\|", "").split("|")) == 6, line


@pytest.mark.parametrize("cmd", [("inspect",), ("diff",), ("meta",), ("id",), ("summary",)])
def test_json_output_is_exact(nasty: Any, capsys: Any, cmd: tuple[str, ...]) -> None:
    a, b, tensors, meta = nasty
    argv = (cmd[0], a, b) if cmd[0] == "diff" else (cmd[0], a)
    r = run(capsys, *argv, "--json")
    assert r.code == 0 and r.err == "", r
    _clean(r)  # escaped as JSON escapes...
    doc = strict_json(r.out)  # ...which decode to exactly the file's text
    if cmd[0] == "inspect":
        assert [t["name"] for t in doc["tensors"]] == natural(tensors)
        assert doc["metadata"] == meta
    if cmd[0] == "meta":
        assert doc["metadata"] == meta
    if cmd[0] == "diff":
        assert doc["tensors"]["removed"] == [f"layer.3.{NASTY[3]}"]


def test_extension_layout_name_is_escaped(tmp_path: Path, capsys: Any) -> None:
    def layout(m: dict[str, Any]) -> None:
        m["tensors"]["lm_head.weight"]["format"] = "fancy\x1b[2J\u202e"

    path = with_manifest(write_zt(tmp_path / "g.zt"), tmp_path / "ext.zt", layout)
    for argv in (("inspect", path), ("inspect", path, "--tree")):
        r = run(capsys, *argv)
        assert r.code == 0, r
        _clean(r)
    assert "fancy\\x1b[2J\\u202e" in run(capsys, "inspect", path).out


def test_error_and_warning_lines_are_escaped(tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / ("gone" + "".join(t for t in NASTY if "\x00" not in t) + ".safetensors")
    r = run(capsys, "inspect", missing)
    assert_one_error(r, contains="cannot read")
    _clean(r)
    # a tensor name in an error message
    shards = [{NASTY[0]: np.ones(1, np.float32)}, {NASTY[0]: np.ones(1, np.float32)}]
    write_safetensors(tmp_path / "s1.safetensors", shards[0])
    write_safetensors(tmp_path / "s2.safetensors", shards[1])
    r = run(capsys, "inspect", tmp_path / "s*.safetensors")
    assert_one_error(r, contains="is in both")
    _clean(r)
    # the two streams' writers themselves
    import io

    out = Output(json_mode=False, stdout=io.StringIO(), stderr=io.StringIO())
    for text in NASTY:
        out.warning(f"tensor {text} is odd")
        out.error(f"tensor {text} is bad")
    lines = out.stderr.getvalue().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 2 * len(NASTY)
    assert unsafe_chars(out.stderr.getvalue()) == []  # type: ignore[attr-defined]


def test_usage_errors_escape_the_arguments(tmp_path: Path, capsys: Any) -> None:
    for argv in (
        ("diff", "a", "\x1b[31m", "\u202e"),
        ("diff", "a", "b", "--format", "\x1b]0;x\x07"),
        ("\x1b[2J",),
        ("meta", "m", "--\x1b"),
    ):
        r = run(capsys, *argv)
        assert_one_error(r, contains="usage: tensorfile")
        _clean(r)


# -- arguments no one should pass ------------------------------------------------------------------


ALL = [
    ("inspect",),
    ("inspect", "--tree"),
    ("id",),
    ("id", "--content"),
    ("summary", "--json"),
    ("meta",),
    ("meta", "--set", "k=v"),
    ("diff",),
    ("diff", "--data"),
]


def _argv(cmd: tuple[str, ...], path: Any) -> list[Any]:
    return [cmd[0], path, path, *cmd[1:]] if cmd[0] == "diff" else [cmd[0], path, *cmd[1:]]


def test_fifos_devices_and_folders_are_refused_without_blocking(
    tmp_path: Path, capsys: Any
) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    index_dir = tmp_path / "ckpt"
    index_dir.mkdir()
    (index_dir / INDEX).mkdir()  # an "index" that is a folder
    fifo_ckpt = tmp_path / "fifo-ckpt"
    fifo_ckpt.mkdir()
    os.mkfifo(fifo_ckpt / INDEX)
    for path, word in (
        (fifo, "FIFO"),
        ("/dev/zero", "character device"),
        (folder, "folder"),
        (index_dir, "directory"),
        (fifo_ckpt, "FIFO"),
        (tmp_path / "pipe.*", "FIFO"),
    ):
        for cmd in ALL[:2]:  # a separate process: a hang would time out, not stall
            assert_one_error(run_proc(*_argv(cmd, path)), contains=word)
        for cmd in ALL[2:]:  # the same path handling in every command
            assert_one_error(run(capsys, *_argv(cmd, path)), contains=word)


def test_undecodable_path_names_work_and_print_escaped(tmp_path: Path, capsys: Any) -> None:
    name = os.fsdecode(b"mod\xffel\x1b.safetensors")  # a lone surrogate, as argv carries it
    path = write_safetensors(tmp_path / name, metadata={"k": "v"})
    for argv in (
        ("inspect", path),
        ("inspect", path, "--json"),
        ("id", path, "--content"),
        ("summary", path),
        ("diff", path, path, "--data"),
        ("meta", path),
        ("meta", path, "--json"),
    ):
        for r in (run(capsys, *argv), run_proc(*argv)):
            assert r.code == 0, (argv, r)
            _clean(r)
            if "--json" in argv:
                strict_json(r.out)
    assert "mod\\xffel\\x1b.safetensors" in run(capsys, "inspect", path).out
    # the error naming a missing one is one clean line too
    r = run(capsys, "inspect", tmp_path / os.fsdecode(b"gone\xfe.safetensors"))
    assert_one_error(r, contains="gone\\xfe")


def test_undecodable_metadata_argument_is_refused(tmp_path: Path, capsys: Any) -> None:
    path = write_safetensors(tmp_path / "m.safetensors", metadata={"k": "v"})
    before = path.read_bytes()
    for argv in (("--set", os.fsdecode(b"k=\xff")), ("--set", os.fsdecode(b"\xfe=v"))):
        r = run(capsys, "meta", path, *argv)
        assert_one_error(r, contains="UTF-8")
        _clean(r)
    assert path.read_bytes() == before


def test_empty_strings(tmp_path: Path, capsys: Any) -> None:
    for cmd in ALL:
        assert_one_error(run(capsys, *_argv(cmd, "")), contains="empty")
    path = write_safetensors(tmp_path / "m.safetensors", metadata={"k": "v"})
    before = path.read_bytes()
    assert_one_error(run(capsys, "meta", path, "--set", ""), contains="KEY=VALUE")
    assert_one_error(run(capsys, "meta", path, "--set", "=v"), contains="KEY=VALUE")
    assert_one_error(run(capsys, "meta", path, "--delete", ""), contains="no key")
    assert_one_error(run(capsys, "diff", path, ""), contains="empty")
    assert path.read_bytes() == before


def test_globs_of_nothing_and_of_thousands(tmp_path: Path, capsys: Any) -> None:
    r = run(capsys, "inspect", tmp_path / "nothing-*.safetensors")
    assert_one_error(r, contains="no file matches")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(2000):
        write_safetensors(many / f"s{i:04d}.safetensors", {f"t{i}": np.ones(1, np.int8)})
    r = run(capsys, "summary", many / "s*.safetensors", "--json")
    assert r.code == 0, r
    assert strict_json(r.out)["tensor_count"] == 2000
    (many / "s9999.safetensors").write_bytes(b"not a model")
    r = run(capsys, "inspect", many / "*.safetensors")
    assert_one_error(r, contains="s9999.safetensors")


def test_unquoted_glob_expanded_by_the_shell_is_one_short_line(capsys: Any) -> None:
    extra = [f"file{i}.safetensors" for i in range(5000)]
    r = run(capsys, "diff", "a.safetensors", "b.safetensors", *extra)
    message = assert_one_error(r, contains="unrecognized arguments")
    assert "and 4,995 more" in message and len(message) < 400


def test_thousands_of_missing_files_end_with_one_short_line(capsys: Any) -> None:
    # a glob the shell expanded for a command that takes several files: each is reported,
    # and the closing line names a few, not all
    paths = [f"missing{i}.safetensors" for i in range(3000)]
    r = run(capsys, "summary", *paths)
    assert r.code == 2 and r.out == ""
    lines = r.err.splitlines()
    assert len(lines) == 3001
    assert lines[-1].startswith("tensorfile: error: 3,000 of 3,000 files could not be read: ")
    assert lines[-1].endswith("and 2,995 more") and len(lines[-1]) < 400


def test_sparse_tensor_claiming_terabytes(tmp_path: Path, capsys: Any) -> None:
    path = lying_sparse(tmp_path / "lie.zt", "coo", (1 << 20, 1 << 20))
    assert run(capsys, "inspect", path).code == 0
    assert_one_error(run(capsys, "id", path, "--content"), contains="limit")
    assert_one_error(run(capsys, "diff", path, path, "--data"), contains="limit")
    r = run(capsys, "diff", path, path)  # headers only: fine
    assert r.code == 0


def test_deep_module_tree(tmp_path: Path, capsys: Any) -> None:
    names = {"a." * 100_000 + "w": np.ones(2, np.float32), "x": np.ones(1, np.float32)}
    names |= {"b." * i + "v": np.ones(1, np.int8) for i in range(300)}  # 300 nested levels
    path = write_safetensors(tmp_path / "deep.safetensors", names)
    r = run(capsys, "inspect", path, "--tree")
    assert r.code == 0, r.err[-500:]
    assert "listed flat" in r.out  # levels past the drawn depth are listed, not dropped
    compact = re.sub(r"[\s│├└─]", "", r.out)  # long labels are folded over lines
    assert compact.count("vI8[1]1") == 300
    assert compact.count("a." * 1000) > 0 and "wF32[2]2" in compact


def test_write_failure_is_not_called_a_read(tmp_path: Path) -> None:
    path = write_safetensors(tmp_path / "m.safetensors")
    with open("/dev/full", "w") as full:
        argv = [str(SCRIPT), "inspect", str(path)]
        proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith(ERROR_PREFIX) and proc.stderr.count("\n") == 1
    assert "cannot read" not in proc.stderr and "No space left" in proc.stderr


def test_reader_leaving_early_is_quiet(tmp_path: Path) -> None:
    path = write_safetensors(
        tmp_path / "m.safetensors", {f"t{i}": np.ones(1, np.int8) for i in range(3000)}
    )
    for extra in ((), ("--json",), ("--verbose",)):
        proc = subprocess.Popen([str(SCRIPT), "inspect", str(path), *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(10)
        proc.stdout.close()  # like `| head -c 10`
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, err
        assert err == b""
