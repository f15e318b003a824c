"""Several files for one command (a shell expands ``*.zt`` into many paths): ``inspect``,
``id``, ``summary`` and ``meta`` (reading and editing) run on each in turn; ``diff`` keeps
exactly two. One file's output is unchanged; several get headings (or, for the one-line
commands, their path on the line), and ``--json`` a list of the one-file objects. A file that
cannot be read is reported and skipped, the others are processed, and the status is 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.checkpoints import MODEL_META, write_gguf, write_safetensors, write_zt
from tests.helpers.cli import ERROR_PREFIX, assert_one_error, run, run_json, strict_json


def _three(tmp_path: Path) -> list[Path]:
    return [
        write_safetensors(tmp_path / "a.safetensors", metadata=MODEL_META),
        write_zt(tmp_path / "b.zt", attributes={"format": "np"}),
        write_gguf(tmp_path / "c.gguf", {"t": np.ones(4, np.float32)}),
    ]


def _single(capsys: Any, *argv: Any) -> str:
    r = run(capsys, *argv)
    assert r.code == 0 and r.err == "", r
    return r.out


def test_summary_and_id_name_each_file_on_its_line(tmp_path: Path, capsys: Any) -> None:
    paths = _three(tmp_path)
    r = run(capsys, "summary", *paths)
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [f"{p},{_single(capsys, 'summary', p).strip()}" for p in paths]
    r = run(capsys, "id", *paths)
    assert (r.code, r.err) == (0, "")
    assert r.out.splitlines() == [f"{_single(capsys, 'id', p).strip()}  {p}" for p in paths]


@pytest.mark.parametrize(
    "cmd", [("inspect",), ("inspect", "--tree"), ("meta",)], ids=lambda c: " ".join(c)
)
def test_human_output_of_each_file_under_a_heading(
    tmp_path: Path, capsys: Any, cmd: tuple[str, ...]
) -> None:
    paths = _three(tmp_path)
    r = run(capsys, cmd[0], *paths, *cmd[1:])
    assert (r.code, r.err) == (0, "")
    alone = [_single(capsys, cmd[0], p, *cmd[1:]) for p in paths]
    want = "\n".join(f"==> {p} <==\n{text}" for p, text in zip(paths, alone, strict=True))
    assert r.out == want


@pytest.mark.parametrize(
    "cmd", [("inspect",), ("id",), ("id", "--content"), ("summary",), ("meta",)]
)
def test_json_is_a_list_of_the_one_file_documents(
    tmp_path: Path, capsys: Any, cmd: tuple[str, ...]
) -> None:
    paths = _three(tmp_path)
    docs = run_json(capsys, cmd[0], *paths, *cmd[1:])
    assert isinstance(docs, list)
    assert docs == [run_json(capsys, cmd[0], p, *cmd[1:]) for p in paths]
    assert [d["path"] for d in docs] == [str(p) for p in paths]
    assert all(d["schema"] == 1 for d in docs)


@pytest.mark.parametrize("json_mode", [False, True])
def test_an_unreadable_file_is_reported_and_the_others_processed(
    tmp_path: Path, capsys: Any, json_mode: bool
) -> None:
    a, b, c = _three(tmp_path)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a model at all")
    missing = tmp_path / "missing.zt"
    argv = ["summary", a, bad, b, missing, c, *(["--json"] if json_mode else [])]
    r = run(capsys, *argv)
    assert r.code == 2
    errors = r.err.splitlines()
    assert len(errors) == 3 and all(e.startswith(ERROR_PREFIX) for e in errors)
    assert str(bad) in errors[0] and str(missing) in errors[1]
    assert errors[2] == f"{ERROR_PREFIX}2 of 5 files could not be read: {bad}, {missing}"
    if json_mode:
        assert [d["path"] for d in strict_json(r.out)] == [str(a), str(b), str(c)]
    else:
        assert [line.split(",")[0] for line in r.out.splitlines()] == [str(a), str(b), str(c)]
    # one path: as before, one error line and nothing on stdout
    assert_one_error(run(capsys, "summary", missing), contains=str(missing))


def test_paths_after_an_option_join_the_others(tmp_path: Path, capsys: Any) -> None:
    a, b, _ = _three(tmp_path)
    docs = run_json(capsys, "summary", a, "--json", b)
    assert [d["path"] for d in docs] == [str(a), str(b)]
    assert_one_error(run(capsys, "summary", a, "--bogus", b), contains="--bogus")


def test_diff_takes_exactly_two(tmp_path: Path, capsys: Any) -> None:
    a, b, c = _three(tmp_path)
    assert_one_error(run(capsys, "diff", a, b, c), contains="unrecognized arguments")
    assert_one_error(run(capsys, "diff", a), contains="usage: tensorfile diff")


def test_meta_set_edits_each_file_atomically_and_skips_the_read_only(
    tmp_path: Path, capsys: Any
) -> None:
    a, b, c = _three(tmp_path)
    gguf_before = c.read_bytes()
    r = run(capsys, "meta", a, c, b, "--set", "license=MIT")
    assert r.code == 2
    errors = r.err.splitlines()
    assert "read-only" in errors[0] and str(c) in errors[0]
    assert errors[-1] == f"{ERROR_PREFIX}1 of 3 files could not be edited: {c}"
    assert r.out.splitlines()[0] == f"==> {a} <=="
    assert f"==> {b} <==" in r.out.splitlines()
    assert str(c) not in r.out
    assert run_json(capsys, "meta", a)["metadata"] == {**MODEL_META, "license": "MIT"}
    assert run_json(capsys, "meta", b)["metadata"] == {"format": "np", "license": "MIT"}
    assert c.read_bytes() == gguf_before
    # --json: the edits of the files that were edited
    docs = strict_json(run(capsys, "meta", a, b, "--delete", "license", "--json").out)
    assert [(d["path"], d["before"].get("license"), "license" in d["metadata"]) for d in docs] == [
        (str(a), "MIT", False),
        (str(b), "MIT", False),
    ]


def test_meta_set_with_a_malformed_pair_touches_no_file(tmp_path: Path, capsys: Any) -> None:
    a, b, _ = _three(tmp_path)
    before = (a.read_bytes(), b.read_bytes())
    assert_one_error(run(capsys, "meta", a, b, "--set", "novalue"), contains="KEY=VALUE")
    assert (a.read_bytes(), b.read_bytes()) == before


def test_a_url_among_several_is_named_without_its_credentials(tmp_path: Path, capsys: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://alice:hunter2pw@127.0.0.1:{port}/m.safetensors?token=s3cret#frag"
    a = write_safetensors(tmp_path / "a.safetensors")
    for extra in ((), ("--json",)):
        r = run(capsys, "summary", a, url, *extra)
        assert r.code == 2
        assert f"127.0.0.1:{port}/m.safetensors" in r.err.splitlines()[-1]
        for secret in ("alice", "hunter2pw", "s3cret", "frag"):
            assert secret not in r.out + r.err, (secret, r.err)


def test_an_empty_path_among_several_is_named_in_the_closing_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hypothesis found it: ``inspect '' good.safetensors`` closed with "could not be read:"
    and no name."""
    from tensorfile.cli.app import main
    from tensorfile.safetensors.numpy import save_file

    good = tmp_path / "good.safetensors"
    save_file({"w": np.ones(2, np.float32)}, str(good))
    assert main(["inspect", "", str(good)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "tensorfile: error: 1 of 2 files could not be read: ''"
