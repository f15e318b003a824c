"""What the command line says about a file that is not a tensor file it reads: one line, exit
status 2, naming the file and what it looks like (an HTML page, a sharded checkpoint's index,
an empty file, random bytes), for every command; the content decides, not the name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.checkpoints import write_gguf, write_safetensors
from tests.helpers.cli import assert_one_error, run, run_json, run_proc

COMMANDS = [
    ("inspect",),
    ("inspect", "--json"),
    ("id",),
    ("id", "--content"),
    ("summary",),
    ("meta",),
    ("meta", "--set", "a=b"),
]
KNOWN = "not a tensor file tensorfile knows (safetensors, zTensor, GGUF, npz, npy, PyTorch pickle)"
INDEX = {"weight_map": {"a": "m-00001-of-00002.safetensors", "b": "m-00002-of-00002.safetensors"}}

CASES: dict[str, tuple[bytes, str]] = {
    "html": (b"<!DOCTYPE html>\n<html><body>Index of /</body></html>\n", "looks like an HTML page"),
    "index": (json.dumps(INDEX).encode(), "unsupported: {path} is a sharded checkpoint index"),
    "empty": (b"", "{path} is empty (0 bytes), " + KNOWN),
    "short": (b"\x01\x02\x03", "it is only 3 bytes long (b'\\x01\\x02\\x03')"),
    "random": (bytes(range(7, 107)), "{path} is " + KNOWN),
    "json": (b'{"model_type": "llama"}', "{path} looks like a JSON document, " + KNOWN),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("cmd", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_each_command_names_what_the_file_is(
    tmp_path: Path, capsys: Any, case: str, cmd: tuple[str, ...]
) -> None:
    blob, words = CASES[case]
    path = tmp_path / "model.safetensors"  # the name says safetensors; the bytes decide
    path.write_bytes(blob)
    message = assert_one_error(run(capsys, cmd[0], path, *cmd[1:]))
    assert words.format(path=path) in message, message
    assert message.count(str(path)) == 1, message
    assert not message.startswith("invalid"), message  # not "invalid safetensors file"
    assert path.read_bytes() == blob  # meta --set wrote nothing


@pytest.mark.parametrize("case", sorted(CASES))
def test_diff_names_the_side_that_is_not_a_tensor_file(
    tmp_path: Path, capsys: Any, case: str
) -> None:
    blob, words = CASES[case]
    bad = tmp_path / "bad.zt"
    bad.write_bytes(blob)
    good = write_safetensors(tmp_path / "good.safetensors", {"w": np.zeros(2, np.float32)})
    for argv in (("diff", bad, good), ("diff", good, bad, "--data", "--json")):
        message = assert_one_error(run(capsys, *argv))
        assert words.format(path=bad) in message, message


def test_a_gguf_file_named_safetensors_is_read_as_gguf(tmp_path: Path, capsys: Any) -> None:
    path = write_gguf(tmp_path / "model.safetensors", {"w": np.ones((2, 3), np.float32)})
    doc = run_json(capsys, "inspect", path)
    assert (doc["format"], doc["tensor_count"]) == ("gguf", 1)
    message = assert_one_error(run(capsys, "meta", path, "--set", "a=b"))
    assert "read-only" in message


def test_the_console_script_says_it_on_one_line(tmp_path: Path) -> None:
    page = tmp_path / "model.safetensors"
    page.write_bytes(b"<html>\n<head><title>404 Not Found</title></head>\n</html>\n")
    message = assert_one_error(run_proc("inspect", page, "--json"))
    assert message.startswith(f"{page} looks like an HTML page, not a tensor file"), message
    assert message.endswith("its first 16 of 57 bytes are b'<html>\\n<head><ti'..."), message
